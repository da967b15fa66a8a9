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

from .. import checks
from .._buffer import NativeAllocator
from ..buffer import DLDeviceType
from ..errors import AMLError, AMLFailure, AMLNotSupported, AMLValueError, ErrorTable
from ..specs import Capability, DeviceInfo
from .devices import selected_device
from .groups import Group, capabilities

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

#: The host as a managed-memory location (cudaCpuDeviceId, hipCpuDeviceId).
CPU_DEVICE = -1
#: "No single location" in range attributes (cudaInvalidDeviceId, hipInvalidDeviceId).
INVALID_DEVICE = -2

#: Access flags both CUDA and HIP define: none, read, read-write.
_ACCESS_FLAGS = frozenset({0, 1, 3})
#: Attach flags both define: global 1, host 2, single 4.
_ATTACH_FLAGS = frozenset({1, 2, 4})
#: Range attribute data is at most this many ints (one per device and the host).
_MAX_ATTRIBUTE_INTS = 4096


@attrs.frozen
class PointerAttributes:
    """What the runtime knows of an address (``cudaPointerGetAttributes``)."""

    #: "device", "host", "managed" or "unregistered".
    memory_type: str
    device: int
    device_pointer: int
    host_pointer: int
    is_managed: bool


@attrs.frozen
class AllocationProperties:
    """Properties of a virtual-memory physical allocation."""

    #: 1 = pinned (the only type CUDA and HIP create here).
    type: int
    location_device: int
    #: Bit mask of shareable handle types (1 = POSIX file descriptor).
    handle_types: int


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


class AllocationOps(abc.ABC):
    """``ALLOCATION``: device and host memory, registration, attributes and copies."""

    traits: RuntimeTraits

    def malloc(self, size: int) -> int:
        return self._malloc(checks.size(size))

    def free(self, ptr: int) -> None:
        self._free(checks.pointer(ptr))

    def host_alloc(self, size: int, *, portable: bool, mapped: bool) -> int:
        return self._host_alloc(checks.size(size), bool(portable), bool(mapped))

    def free_host(self, ptr: int) -> None:
        self._free_host(checks.pointer(ptr))

    def host_register(self, ptr: int, size: int, *, portable: bool, mapped: bool) -> None:
        self._host_register(checks.pointer(ptr), checks.size(size), bool(portable), bool(mapped))

    def host_unregister(self, ptr: int) -> None:
        self._host_unregister(checks.pointer(ptr))

    def host_device_pointer(self, ptr: int) -> int:
        return self._host_device_pointer(checks.pointer(ptr))

    def pointer_attributes(self, ptr: int) -> PointerAttributes:
        return self._pointer_attributes(checks.pointer(ptr))

    def memcpy(self, dst: int, src: int, size: int) -> None:
        self._memcpy(checks.pointer(dst, "dst"), checks.pointer(src, "src"), checks.size(size))

    def memset(self, ptr: int, value: int, size: int) -> None:
        self._memset(checks.pointer(ptr), checks.byte(value), checks.size(size))

    def native_allocator(self) -> NativeAllocator | None:
        """The compiled allocator of this runtime (:class:`aml_core._buffer.NativeAllocator`:
        the C addresses of its get_device, malloc, free and, if it has them,
        malloc_managed, host_alloc and free_host, with an error hook raising what the
        ``_``-methods raise), which GpuArea installs so that mmap and munmap run in C;
        None (the default): areas call the ``_``-methods. The native calls must be the
        ones the ``_``-methods make (a buffer allocated by one is freed by the other): a
        subclass that replaces one of them gets None (see :func:`replaces_native`)."""
        return None

    @abc.abstractmethod
    def _malloc(self, size: int) -> int: ...
    @abc.abstractmethod
    def _free(self, ptr: int) -> None: ...
    @abc.abstractmethod
    def _host_alloc(self, size: int, portable: bool, mapped: bool) -> int: ...
    @abc.abstractmethod
    def _free_host(self, ptr: int) -> None: ...
    @abc.abstractmethod
    def _host_register(self, ptr: int, size: int, portable: bool, mapped: bool) -> None: ...
    @abc.abstractmethod
    def _host_unregister(self, ptr: int) -> None: ...
    @abc.abstractmethod
    def _host_device_pointer(self, ptr: int) -> int: ...
    @abc.abstractmethod
    def _pointer_attributes(self, ptr: int) -> PointerAttributes: ...
    @abc.abstractmethod
    def _memcpy(self, dst: int, src: int, size: int) -> None: ...
    @abc.abstractmethod
    def _memset(self, ptr: int, value: int, size: int) -> None: ...


class ManagedOps(abc.ABC):
    """``MANAGED``: managed (unified) memory and its advice, prefetch and attributes."""

    traits: RuntimeTraits

    def malloc_managed(self, size: int, *, attach_global: bool) -> int:
        return self._malloc_managed(checks.size(size), bool(attach_global))

    def mem_prefetch(self, ptr: int, size: int, device: int, stream: int) -> None:
        self._mem_prefetch(
            checks.pointer(ptr),
            checks.size(size),
            checks.device(device, host=CPU_DEVICE),
            checks.pointer(stream, "stream", null=True),
        )

    def mem_advise(self, ptr: int, size: int, advice: int, device: int) -> None:
        self._mem_advise(
            checks.pointer(ptr),
            checks.size(size),
            checks.member(advice, self.traits.advices, f"{self.traits.name} advice"),
            checks.device(device, host=CPU_DEVICE),
        )

    def mem_range_attributes(
        self, ptr: int, size: int, requests: Sequence[tuple[int, int]]
    ) -> list[list[int]]:
        """For each (attribute, count) request, ``count`` ints of data."""
        p, n = checks.pointer(ptr), checks.size(size)
        if not requests:
            raise AMLValueError("at least one range attribute is needed")
        checked: list[tuple[int, int]] = []
        for attribute, count in requests:
            a = checks.member(attribute, self.traits.range_attributes, f"{self.traits.name} range attribute")
            k = checks.integer(count, "count")
            if not 1 <= k <= _MAX_ATTRIBUTE_INTS:
                raise AMLValueError(f"a range attribute holds 1..{_MAX_ATTRIBUTE_INTS} ints, not {k}")
            checked.append((a, k))
        return self._mem_range_attributes(p, n, checked)

    def stream_attach(self, stream: int, ptr: int, size: int, flags: int) -> None:
        self._stream_attach(
            checks.pointer(stream, "stream", null=True),
            checks.pointer(ptr),
            checks.size(size, zero=True),
            checks.member(flags, _ATTACH_FLAGS, "attach flags"),
        )

    @abc.abstractmethod
    def _malloc_managed(self, size: int, attach_global: bool) -> int: ...
    @abc.abstractmethod
    def _mem_prefetch(self, ptr: int, size: int, device: int, stream: int) -> None: ...
    @abc.abstractmethod
    def _mem_advise(self, ptr: int, size: int, advice: int, device: int) -> None: ...
    @abc.abstractmethod
    def _mem_range_attributes(
        self, ptr: int, size: int, requests: Sequence[tuple[int, int]]
    ) -> list[list[int]]: ...
    @abc.abstractmethod
    def _stream_attach(self, stream: int, ptr: int, size: int, flags: int) -> None: ...


class StreamOps(abc.ABC):
    """``STREAMS``: create, synchronize and destroy streams."""

    traits: RuntimeTraits

    def stream_create(self, non_blocking: bool) -> int:
        return self._stream_create(bool(non_blocking))

    def stream_destroy(self, stream: int) -> None:
        self._stream_destroy(checks.pointer(stream, "stream"))

    def stream_synchronize(self, stream: int) -> None:
        self._stream_synchronize(checks.pointer(stream, "stream", null=True))

    @abc.abstractmethod
    def _stream_create(self, non_blocking: bool) -> int: ...
    @abc.abstractmethod
    def _stream_destroy(self, stream: int) -> None: ...
    @abc.abstractmethod
    def _stream_synchronize(self, stream: int) -> None: ...


class IpcOps(abc.ABC):
    """``IPC``: share an allocation with another process through an opaque handle of
    ``traits.ipc_handle_size`` bytes."""

    traits: RuntimeTraits

    def ipc_get_handle(self, ptr: int, size: int) -> bytes:
        """The handle of the allocation at ``ptr`` of ``size`` bytes."""
        data = self._ipc_get_handle(checks.pointer(ptr), checks.size(size))
        return checks.handle_bytes(data, self.traits.ipc_handle_size, f"the {self.traits.name} IPC handle")

    def ipc_open_handle(self, handle: bytes, size: int) -> int:
        """Map another process's allocation of ``size`` bytes (with lazy peer access)."""
        data = checks.handle_bytes(handle, self.traits.ipc_handle_size, f"a {self.traits.name} IPC handle")
        return self._ipc_open_handle(data, checks.size(size))

    def ipc_close_handle(self, ptr: int) -> None:
        self._ipc_close_handle(checks.pointer(ptr))

    def ipc_mapped_size(self, ptr: int) -> int | None:
        """The bytes from ``ptr`` to the end of the allocation an opened handle mapped
        there, or None where the runtime cannot tell. The importer checks a handle's
        claimed size against it. A range query that "succeeds" with a range not containing
        ``ptr`` (NULL base, base past ``ptr``, empty) is AMLFailure."""
        ptr = checks.pointer(ptr)
        found = self._ipc_address_range(ptr)
        if found is None:
            return None
        base, size = found
        if base == 0 or base > ptr or size <= 0 or base + size <= ptr:
            raise AMLFailure(
                f"{self.traits.name}: the address range query reported success with base "
                f"0x{base:x}, size {size} for 0x{ptr:x}"
            )
        return base + size - ptr

    def _ipc_address_range(self, ptr: int) -> tuple[int, int] | None:
        """Override with the native range query (``cuMemGetAddressRange``,
        ``hipMemGetAddressRange``, ``zeMemGetAddressRange``) where the library has it:
        (base, size) of the allocation containing ``ptr``."""
        return None

    @abc.abstractmethod
    def _ipc_get_handle(self, ptr: int, size: int) -> bytes: ...
    @abc.abstractmethod
    def _ipc_open_handle(self, handle: bytes, size: int) -> int: ...
    @abc.abstractmethod
    def _ipc_close_handle(self, ptr: int) -> None: ...


class VirtualMemoryOps(abc.ABC):
    """``VIRTUAL_MEMORY``: reserve address ranges, create physical memory, map it, grant
    access, share it as a POSIX file descriptor."""

    traits: RuntimeTraits

    def vmm_granularity(self, device: int, recommended: bool) -> int:
        return self._vmm_granularity(checks.device(device), bool(recommended))

    def vmm_reserve(self, size: int, alignment: int, address: int) -> int:
        return self._vmm_reserve(
            checks.size(size),
            checks.size(alignment, "alignment", zero=True),
            checks.pointer(address, "address", null=True),
        )

    def vmm_address_free(self, ptr: int, size: int) -> None:
        self._vmm_address_free(checks.pointer(ptr), checks.size(size))

    def vmm_create(self, size: int, device: int, exportable: bool) -> int:
        return self._vmm_create(checks.size(size), checks.device(device), bool(exportable))

    def vmm_release(self, handle: int) -> None:
        self._vmm_release(checks.pointer(handle, "handle"))

    def vmm_map(self, ptr: int, size: int, handle: int, offset: int) -> None:
        self._vmm_map(
            checks.pointer(ptr),
            checks.size(size),
            checks.pointer(handle, "handle"),
            checks.size(offset, "offset", zero=True),
        )

    def vmm_unmap(self, ptr: int, size: int) -> None:
        self._vmm_unmap(checks.pointer(ptr), checks.size(size))

    def vmm_set_access(self, ptr: int, size: int, access: Sequence[tuple[int, int]]) -> None:
        if not access:
            raise AMLValueError("set_access needs at least one (device, access) pair")
        pairs = [
            (checks.device(d), checks.member(f, _ACCESS_FLAGS, "access (none 0, read 1, read-write 3)"))
            for d, f in access
        ]
        self._vmm_set_access(checks.pointer(ptr), checks.size(size), pairs)

    def vmm_get_access(self, ptr: int, device: int) -> int:
        return self._vmm_get_access(checks.pointer(ptr), checks.device(device))

    def vmm_export_fd(self, handle: int) -> int:
        return self._vmm_export_fd(checks.pointer(handle, "handle"))

    def vmm_import_fd(self, fd: int) -> int:
        return self._vmm_import_fd(checks.fd(fd))

    def vmm_retain(self, ptr: int) -> int:
        return self._vmm_retain(checks.pointer(ptr))

    def vmm_properties(self, handle: int) -> AllocationProperties:
        return self._vmm_properties(checks.pointer(handle, "handle"))

    @abc.abstractmethod
    def _vmm_granularity(self, device: int, recommended: bool) -> int: ...
    @abc.abstractmethod
    def _vmm_reserve(self, size: int, alignment: int, address: int) -> int: ...
    @abc.abstractmethod
    def _vmm_address_free(self, ptr: int, size: int) -> None: ...
    @abc.abstractmethod
    def _vmm_create(self, size: int, device: int, exportable: bool) -> int: ...
    @abc.abstractmethod
    def _vmm_release(self, handle: int) -> None: ...
    @abc.abstractmethod
    def _vmm_map(self, ptr: int, size: int, handle: int, offset: int) -> None: ...
    @abc.abstractmethod
    def _vmm_unmap(self, ptr: int, size: int) -> None: ...
    @abc.abstractmethod
    def _vmm_set_access(self, ptr: int, size: int, access: Sequence[tuple[int, int]]) -> None: ...
    @abc.abstractmethod
    def _vmm_get_access(self, ptr: int, device: int) -> int: ...
    @abc.abstractmethod
    def _vmm_export_fd(self, handle: int) -> int: ...
    @abc.abstractmethod
    def _vmm_import_fd(self, fd: int) -> int: ...
    @abc.abstractmethod
    def _vmm_retain(self, ptr: int) -> int: ...
    @abc.abstractmethod
    def _vmm_properties(self, handle: int) -> AllocationProperties: ...


class StreamOrderedOps(abc.ABC):
    """``STREAM_ORDERED``: device memory allocated and freed in stream order
    (``cudaMallocAsync``/``cudaFreeAsync``, ``hipMallocAsync``/``hipFreeAsync``) from
    the device's default memory pool, and the events that order work across streams
    (a block freed on one stream is reused on another only after an event)."""

    traits: RuntimeTraits

    def malloc_async(self, size: int, stream: int) -> int:
        return self._malloc_async(checks.size(size), checks.pointer(stream, "stream", null=True))

    def free_async(self, ptr: int, stream: int) -> None:
        self._free_async(checks.pointer(ptr), checks.pointer(stream, "stream", null=True))

    def event_create(self) -> int:
        """An event without timing (the cheap kind), for ordering only."""
        return self._event_create()

    def event_destroy(self, event: int) -> None:
        self._event_destroy(checks.pointer(event, "event"))

    def event_record(self, event: int, stream: int) -> None:
        self._event_record(checks.pointer(event, "event"), checks.pointer(stream, "stream", null=True))

    def event_query(self, event: int) -> bool:
        """True once the work recorded before the event is done."""
        return self._event_query(checks.pointer(event, "event"))

    def event_synchronize(self, event: int) -> None:
        self._event_synchronize(checks.pointer(event, "event"))

    def stream_wait_event(self, stream: int, event: int) -> None:
        """Make later work on ``stream`` wait for ``event`` (without blocking the host)."""
        self._stream_wait_event(checks.pointer(stream, "stream", null=True), checks.pointer(event, "event"))

    @abc.abstractmethod
    def _malloc_async(self, size: int, stream: int) -> int: ...
    @abc.abstractmethod
    def _free_async(self, ptr: int, stream: int) -> None: ...
    @abc.abstractmethod
    def _event_create(self) -> int: ...
    @abc.abstractmethod
    def _event_destroy(self, event: int) -> None: ...
    @abc.abstractmethod
    def _event_record(self, event: int, stream: int) -> None: ...
    @abc.abstractmethod
    def _event_query(self, event: int) -> bool: ...
    @abc.abstractmethod
    def _event_synchronize(self, event: int) -> None: ...
    @abc.abstractmethod
    def _stream_wait_event(self, stream: int, event: int) -> None: ...


class PeerOps(abc.ABC):
    """``PEER``: one device reaching another's memory directly (peer access) and copies
    between devices (``cudaDeviceCanAccessPeer`` / ``hipDeviceCanAccessPeer``,
    ``...EnablePeerAccess``, ``...DisablePeerAccess``, ``cudaMemcpyPeer`` /
    ``hipMemcpyPeer``; docs/aml-contract.md#peer-access).

    Peer access is one-way, from a device to a peer's memory, and process-wide: it is the
    runtime's state, shared with every library of the process. So:

    * :meth:`can_access_peer` answers False for a device and itself (a device is not its
      own peer: HIP documents it, CUDA answers it) without a native call;
    * :meth:`enable_peer_access` and :meth:`disable_peer_access` are idempotent: True when
      the call changed the state, False when it already was so (the runtime's "already
      enabled" / "not enabled" errors, which another library of the process may cause,
      are answers here, not errors; the runtime's last error is cleared);
    * they act for ``device`` (None or negative: the caller's current device), selecting it for
      the native call and restoring the caller's current device afterwards, also when
      the call fails (:func:`~aml_core.gpu.devices.selected_device`);
    * enabling a pair the hardware cannot link is ENOTSUP (asked first, with
      :meth:`can_access_peer`), a device as its own peer or an index past the device
      count EINVAL, before any native call.

    The runtime provides ``device_count``, ``get_device`` and ``_set_device``
    (:class:`Runtime`)."""

    traits: RuntimeTraits

    @abc.abstractmethod
    def device_count(self) -> int: ...
    @abc.abstractmethod
    def get_device(self) -> int: ...
    @abc.abstractmethod
    def _set_device(self, device: int) -> None: ...

    def _peer_device(self, device: object, what: str, count: int) -> int:
        d = checks.device(device, what=what)
        if d >= count:
            raise AMLValueError(f"{what} {d} is not in 0..{count - 1} ({count} devices)")
        return d

    def _peer_pair(self, device: int | None, peer: int) -> tuple[int, int]:
        """(device, peer) checked against the device count, distinct; ``device`` None or
        negative is the caller's current device (as an area's device)."""
        count = self.device_count()
        if device is not None and checks.c_int(device, "device") >= 0:
            d = self._peer_device(device, "device", count)
        else:
            d = self.get_device()
        p = self._peer_device(peer, "peer", count)
        if d == p:
            raise AMLValueError(
                f"device {d} is not its own peer: it reaches its own memory without peer access"
            )
        return d, p

    def can_access_peer(self, device: int, peer: int) -> bool:
        """Whether ``device`` can reach ``peer``'s memory directly (once enabled)."""
        count = self.device_count()
        d = self._peer_device(device, "device", count)
        p = self._peer_device(peer, "peer", count)
        return d != p and self._can_access_peer(d, p)

    def enable_peer_access(self, peer: int, device: int | None = None) -> bool:
        """Let ``device`` (None or negative: the current device) reach ``peer``'s memory; True if
        this call enabled it, False if it was enabled already."""
        d, p = self._peer_pair(device, peer)
        if not self._can_access_peer(d, p):
            raise AMLNotSupported(
                f"{self.traits.name} device {d} cannot access device {p}'s memory directly "
                f"({self.traits.name} reports no peer path between them)"
            )
        with selected_device(self, d):
            return self._enable_peer_access(p)

    def disable_peer_access(self, peer: int, device: int | None = None) -> bool:
        """Stop ``device`` (None or negative: the current device) reaching ``peer``'s memory; True
        if this call disabled it, False if it was not enabled (also: a pair that cannot
        be linked)."""
        d, p = self._peer_pair(device, peer)
        if not self._can_access_peer(d, p):
            return False
        with selected_device(self, d):
            return self._disable_peer_access(p)

    def memcpy_peer(self, dst: int, dst_device: int, src: int, src_device: int, size: int) -> None:
        """Copy ``size`` bytes from ``src`` on ``src_device`` to ``dst`` on ``dst_device``
        (peer access not needed: the runtime stages the copy when there is none). Returns
        when the bytes are copied."""
        count = self.device_count()
        self._memcpy_peer(
            checks.pointer(dst, "dst"),
            self._peer_device(dst_device, "dst_device", count),
            checks.pointer(src, "src"),
            self._peer_device(src_device, "src_device", count),
            checks.size(size),
        )

    @abc.abstractmethod
    def _can_access_peer(self, device: int, peer: int) -> bool: ...
    @abc.abstractmethod
    def _enable_peer_access(self, peer: int) -> bool:
        """Enable access from the current device to ``peer``; False on "already enabled"."""

    @abc.abstractmethod
    def _disable_peer_access(self, peer: int) -> bool:
        """Disable access from the current device to ``peer``; False on "not enabled"."""

    @abc.abstractmethod
    def _memcpy_peer(self, dst: int, dst_device: int, src: int, src_device: int, size: int) -> None:
        """The copy, synchronous (the bytes are at ``dst`` when it returns)."""


#: Each group and the class whose methods make it up.
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


def replaces_native(runtime: object, owner: type) -> bool:
    """Whether ``runtime``'s class replaces one of the :data:`NATIVE_METHODS` of
    ``owner``, the class whose ``native_allocator`` describes them: its compiled table
    would then not be what the runtime does (a test's recording runtime, a benchmark's
    do-nothing one), so it must not offer it."""
    cls = type(runtime)
    return any(getattr(cls, m, None) is not getattr(owner, m, None) for m in NATIVE_METHODS)


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
