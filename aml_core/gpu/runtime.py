"""The native runtime of a GPU backend, split into capability groups (after UMF's ops
tables), so that AML's area flag logic, managed memory, IPC, virtual memory and streams
are written once for every backend.

A backend's runtime is one class that derives from :class:`Runtime` (devices, which every
runtime has) and from the group classes it provides:

=====================  ==========================================  ======================
group                  class (its public methods)                  capability it brings
=====================  ==========================================  ======================
``ALLOCATION``         :class:`AllocationOps` (malloc, host memory,  PINNED, MAPPED,
                       registration, pointer attributes, copies)    BUFFER_PROTOCOL
``MANAGED``            :class:`ManagedOps` (managed allocation,      MANAGED
                       prefetch, advise, range attributes, attach)
``STREAMS``            :class:`StreamOps`                            (none)
``IPC``                :class:`IpcOps` (get, open, close a handle)   IPC
``VIRTUAL_MEMORY``     :class:`VirtualMemoryOps` (reserve, create,   VIRTUAL_MEMORY
                       map, access, export/import an fd, retain)
``STREAM_ORDERED``     :class:`StreamOrderedOps` (allocate and free  (none)
                       in stream order, events)
``PEER``               :class:`PeerOps` (whether a device can reach  (none)
                       another's memory, enable and disable peer
                       access, copy between devices)
=====================  ==========================================  ======================

The group classes live by concern, and this module re-exports them: :mod:`.ops_memory`
(``ALLOCATION``, ``MANAGED``, ``VIRTUAL_MEMORY``), :mod:`.ops_streams` (``STREAMS``,
``STREAM_ORDERED``) and :mod:`.ops_sharing` (``IPC``, ``PEER``); this module holds what
every runtime has (:class:`Runtime`, :class:`RuntimeTraits`) and what joins the groups
(:meth:`Runtime.require`, :data:`GROUP_OPS`, :func:`device_capabilities`).

A runtime provides a group wholly or not at all: each group class declares its native
operations as abstract ``_``-methods, so a class that misses one cannot be instantiated;
a runtime whose *library* lacks a group (an old version without virtual memory) says so
in :meth:`Runtime.missing_groups`, and that group is then absent with the reason.
:func:`~aml_core.gpu.groups.capabilities` derives what a backend reports from the groups it
provides: it is the one place where groups become capabilities.

Each group's public method validates its arguments (through :mod:`aml_core.checks`)
and then calls the backend's ``_``-method, so no backend hand-writes a check and no bad
value reaches ctypes or a binding. The shared logic's hot paths (``GpuArea.mmap``), whose
arguments the area has already checked, call the ``_``-methods directly.

Conventions: pointers, stream handles and VMM handles are ints; device ``-1``
(:data:`CPU_DEVICE`) is the host where a location may be the host; every native failure
raises the backend's translated :class:`~aml_core.errors.AMLError` (through its
:class:`~aml_core.errors.ErrorTable`).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Literal, overload

import attrs

from .. import checks, topology
from ..buffer import DLDeviceType
from ..errors import AMLError, AMLNotSupported, ErrorTable
from ..specs import Capability, DeviceInfo
from .groups import Group, capabilities
from .ops_memory import (
    CPU_DEVICE,
    INVALID_DEVICE,
    AllocationOps,
    AllocationProperties,
    ManagedOps,
    PointerAttributes,
    VirtualMemoryOps,
)
from .ops_sharing import IpcOps, PeerOps
from .ops_streams import StreamOps, StreamOrderedOps

__all__ = [
    "CPU_DEVICE",
    "GROUP_OPS",
    "INVALID_DEVICE",
    "AllocationOps",
    "AllocationProperties",
    "Group",
    "IpcOps",
    "ManagedOps",
    "PeerOps",
    "PointerAttributes",
    "Runtime",
    "RuntimeTraits",
    "StreamOps",
    "StreamOrderedOps",
    "VirtualMemoryOps",
    "capabilities",
    "device_capabilities",
    "replaces_native",
]


@attrs.frozen
class RuntimeTraits:
    """Facts of a runtime that change what the shared logic checks or exports."""

    #: Backend name ("cuda", "hip").
    name: str
    #: DLPack device types for device, pinned/mapped host and managed memory.
    dl_device: DLDeviceType
    dl_host: DLDeviceType
    dl_managed: DLDeviceType
    #: Managed allocations are made in granules of this many bytes (HIP: 4096).
    managed_granule: int = 1
    #: Managed advise ranges must start and end on this alignment (HIP: 4096).
    advise_alignment: int = 1
    #: Advice values the runtime accepts.
    advices: frozenset[int] = frozenset({1, 2, 3, 4, 5, 6})
    #: Range attributes the runtime answers.
    range_attributes: frozenset[int] = frozenset({1, 2, 3, 4})
    #: Bytes of a native IPC handle (``cudaIpcMemHandle_t``: 64).
    ipc_handle_size: int = 64
    #: Exchange protocols device memory speaks beside the buffer protocol.
    interfaces: Capability = Capability.DLPACK | Capability.CUDA_ARRAY_INTERFACE
    #: What the runtime found, name -> version (``{"cuda-bindings": "13.3.1", "driver API":
    #: "13.0"}``, ``{"HIP": "6.2.41133", "library": path}``): the probe reports these.
    versions: Mapping[str, str] = attrs.field(factory=dict, hash=False)

    @property
    def version(self) -> str:
        """The versions as one line for status output."""
        return ", ".join(f"{name} {value}" for name, value in self.versions.items())


class Runtime(abc.ABC):
    """Devices, which every runtime has, and the groups it provides (see the module doc).

    Subclasses set :attr:`traits` and :attr:`errors` and implement the ``_``-methods of
    this class and of each group class they derive from.
    """

    traits: RuntimeTraits
    errors: ErrorTable

    # -- devices -----------------------------------------------------------------------------
    @abc.abstractmethod
    def device_count(self) -> int:
        """The number of devices (0 when none); raises when the driver cannot say."""

    @abc.abstractmethod
    def get_device(self) -> int:
        """The calling thread's current device."""

    def set_device(self, device: int) -> None:
        self._set_device(checks.device(device))

    def device_info(self, device: int) -> DeviceInfo:
        """Name, memory, capabilities and details of a device; its free memory from
        :meth:`free_memory` unless ``_device_info`` filled it in."""
        device = checks.device(device)
        info = self._device_info(device)
        if info.free_memory is None:
            free = self.free_memory(device)
            if free is not None and free <= info.total_memory:
                info = attrs.evolve(info, free_memory=free)
        return info

    def free_memory(self, device: int) -> int | None:
        """Bytes free on ``device`` now, as its driver counts them for every process;
        None when the runtime cannot tell (never raises for that: a failed query is
        "not known"). Reading it must not create a context or allocate on the device
        where the runtime has a way around it (aml-cuda asks NVML). A value that is
        negative or not an int is a query that failed: None."""
        device = checks.device(device)
        try:
            free = self._free_memory(device)
        except AMLError:
            return None
        if isinstance(free, bool) or not isinstance(free, int) or free < 0:
            return None
        return free

    def _free_memory(self, device: int) -> int | None:
        """Override: the free bytes of ``device`` (None: not known). Raise an AMLError
        (through :attr:`errors`) when the native query fails."""
        return None

    def device_topology(self, devices: Sequence[DeviceInfo]) -> tuple[DeviceInfo, ...]:
        """``devices`` (this runtime's, from :meth:`device_info`) with their place in the
        node's topology added to their details: ``pci_bus_id`` (as sysfs names it;
        None: not known), ``numa_node`` (None: not known) and ``links`` (each other
        device's index, as a string, to the link between them: a name of
        :data:`aml_core.topology.LINKS`). Never raises: what cannot be read is unknown."""
        buses = [topology.normalize_bus_id(d.details.get("pci_bus_id")) for d in devices]
        out = []
        for dev, bus in zip(devices, buses, strict=True):
            links = {
                str(peer.index): self._link_or_unknown(bus, peer_bus)
                for peer, peer_bus in zip(devices, buses, strict=True)
                if peer.index != dev.index
            }
            details = {
                **dev.details,
                "pci_bus_id": bus,
                "numa_node": topology.pci_numa_node(bus),
                "links": links,
            }
            out.append(attrs.evolve(dev, details=details))
        return tuple(out)

    def _link_or_unknown(self, bus: str | None, peer: str | None) -> str:
        if bus is None or peer is None:
            return "unknown"
        try:
            return self._link(bus, peer) or "unknown"
        except Exception:  # a report never fails the probe
            return "unknown"

    def _link(self, bus: str, peer: str) -> str | None:
        """Override: the link between the devices at two PCI bus ids (a name of
        :data:`aml_core.topology.LINKS`; None: not known) as the vendor's own query tells
        it; this default reads sysfs (:func:`aml_core.topology.gpu_link`)."""
        return topology.gpu_link(bus, peer)

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait for all work on the current device."""

    @abc.abstractmethod
    def _set_device(self, device: int) -> None: ...

    @abc.abstractmethod
    def _device_info(self, device: int) -> DeviceInfo: ...

    # -- groups ------------------------------------------------------------------------------
    def missing_groups(self) -> Mapping[Group, str]:
        """Groups this runtime's class provides but its loaded library lacks, with why
        (override: for example an old library without virtual memory)."""
        return {}

    def _group_table(self) -> Mapping[Group, str | None]:
        """Each group, with why this runtime does not provide it (None: it does). Worked
        out once: a runtime's class and loaded library do not change, and ``require`` runs
        on every managed-memory call."""
        table: dict[Group, str | None] | None = self.__dict__.get("_groups")
        if table is None:
            missing = self.missing_groups()
            table = {
                g: missing.get(g)
                if isinstance(self, ops)
                else f"{self.traits.name} has no {g.value.replace('_', ' ')} operations"
                for g, ops in GROUP_OPS.items()
            }
            self.__dict__["_groups"] = table
        return table

    def groups(self) -> frozenset[Group]:
        """The groups this runtime provides."""
        return frozenset(g for g, why in self._group_table().items() if why is None)

    def why_missing(self, group: Group) -> str | None:
        """Why this runtime does not provide ``group``; None when it does."""
        return self._group_table()[group]

    @overload
    def require(self, group: Literal[Group.ALLOCATION]) -> AllocationOps: ...
    @overload
    def require(self, group: Literal[Group.MANAGED]) -> ManagedOps: ...
    @overload
    def require(self, group: Literal[Group.STREAMS]) -> StreamOps: ...
    @overload
    def require(self, group: Literal[Group.IPC]) -> IpcOps: ...
    @overload
    def require(self, group: Literal[Group.VIRTUAL_MEMORY]) -> VirtualMemoryOps: ...
    @overload
    def require(self, group: Literal[Group.STREAM_ORDERED]) -> StreamOrderedOps: ...
    @overload
    def require(self, group: Literal[Group.PEER]) -> PeerOps: ...
    def require(self, group: Group) -> object:
        """This runtime as the group's operations; :class:`AMLNotSupported` with the
        reason when it does not provide the group."""
        why = self.why_missing(group)
        if why is not None:
            raise AMLNotSupported(why)
        return self


GROUP_OPS: Mapping[Group, type] = {
    Group.ALLOCATION: AllocationOps,
    Group.MANAGED: ManagedOps,
    Group.STREAMS: StreamOps,
    Group.IPC: IpcOps,
    Group.VIRTUAL_MEMORY: VirtualMemoryOps,
    Group.STREAM_ORDERED: StreamOrderedOps,
    Group.PEER: PeerOps,
}


#: The methods a runtime's NativeAllocator stands for.
NATIVE_METHODS = ("get_device", "_malloc", "_free", "_malloc_managed", "_host_alloc", "_free_host")

#: The methods a runtime's NativeStreams (``native_streams()``) stands for.
STREAM_METHODS = (
    "_event_create",
    "_event_destroy",
    "_event_record",
    "_stream_wait_event",
    "_event_query",
    "_stream_synchronize",
)


def replaces_native(runtime: object, owner: type, methods: tuple[str, ...] = NATIVE_METHODS) -> bool:
    """Whether ``runtime``'s class replaces one of the ``methods`` of ``owner`` (the
    :data:`NATIVE_METHODS`, or the :data:`STREAM_METHODS`), the class whose
    ``native_allocator`` (or ``native_streams``) describes them: its compiled table
    would then not be what the runtime does (a test's recording runtime, a benchmark's
    do-nothing one), so it must not offer it."""
    cls = type(runtime)
    return any(getattr(cls, m, None) is not getattr(owner, m, None) for m in methods)


def device_capabilities(
    runtime: Runtime, *, managed: bool, concurrent: bool, pageable: bool, vmm: bool, ipc: bool = True
) -> Capability:
    """The capabilities of one device: the runtime's groups, less what the device lacks
    (managed memory, virtual memory, IPC), plus what only some devices have (concurrent
    managed access, pageable memory access)."""
    groups = set(runtime.groups())
    for has, group in ((managed, Group.MANAGED), (vmm, Group.VIRTUAL_MEMORY), (ipc, Group.IPC)):
        if not has:
            groups.discard(group)
    caps = capabilities(groups, runtime.traits.interfaces)
    if managed and concurrent and Group.MANAGED in groups:
        caps |= Capability.CONCURRENT_MANAGED_ACCESS
    if pageable:
        caps |= Capability.PAGEABLE_ACCESS
    return caps
