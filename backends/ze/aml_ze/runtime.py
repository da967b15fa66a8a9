"""``ZeRuntime``: the devices of the first Level Zero driver, and the ``IPC`` and
``VIRTUAL_MEMORY`` capability groups of :mod:`aml_core.gpu.runtime` over Level Zero.

Level Zero differs from CUDA and HIP in ways that shape this module:

* **Contexts.** Every Level Zero allocation belongs to a context. Each area of
  :mod:`aml_ze.area` has its own (as AML's ``aml_area_ze_*_create``); the runtime has
  one more, created on first use, for IPC imports and virtual memory. Areas register
  which context owns each of their pointers (:meth:`ZeRuntime.register`), so that the
  group operations, which only get a pointer, reach the right one.
* **No ALLOCATION group.** Areas call ``zeMemAlloc*`` themselves, with their own
  context, descriptor flags and alignment: the group's calls (``_malloc(size)``...) have
  none of them. The ``MANAGED`` and ``STREAMS`` groups have no Level Zero counterpart
  here either (shared allocations have no advice or prefetch through aml-ze).
* **IPC handle.** The group's handle is :data:`IPC_HANDLE_SIZE` (80) bytes: the 64-byte
  ``ze_ipc_mem_handle_t``, the magic ``b"AMZE"``, the exporter's pid, its device index
  and 4 zero bytes (little endian). A Level Zero IPC handle carries a file descriptor
  of the *exporter* (its first 4 bytes, as Intel's driver and UMF read them): the
  importer duplicates it with ``pidfd_open`` + ``pidfd_getfd`` and opens a copy of the
  handle carrying its own descriptor, which it closes after ``zeMemOpenIpcHandle``.
  ``pidfd_getfd`` needs ptrace rights over the exporter: where Yama's ``ptrace_scope``
  is 1, the exporter calls ``prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)`` on its first
  export (any process of the same user may then ptrace it; documented in the README).
* **Virtual memory.** ``zeVirtualMemMap`` takes an access attribute: aml-ze maps with
  ``NONE`` and :meth:`vmm_set_access` grants access, as on CUDA. Level Zero destroys a
  physical allocation at once (``zePhysicalMemDestroy``), where CUDA and HIP keep it
  while mapped: the runtime counts references and mappings and destroys it when both are
  gone, which also gives ``retain`` (Level Zero has none). Access is one attribute per
  range for the whole context: ``set_access`` refuses different accesses for different
  devices (ENOTSUP). Level Zero 1.4 cannot export a physical allocation as a file
  descriptor: ``export_fd`` / ``import_fd`` raise ENOTSUP with the reason.
* **Free memory.** The core API cannot tell; Sysman can (:mod:`aml_ze.sysman`, found on
  the first :meth:`~aml_core.gpu.runtime.Runtime.free_memory`): through ``zesInit``, or
  through the core handles when ``ZES_ENABLE_SYSMAN=1`` was set before ``zeInit`` (read
  here, just before this runtime's ``zeInit``).

Every "success" with an impossible result (a NULL pointer or handle, page size 0) is
FAILURE, with the call named. The IPC group is :class:`aml_ze.ipc.ZeIpc`, the
virtual-memory group :class:`aml_ze.vmm.ZeVirtualMemory` (parts of :class:`ZeRuntime`);
this module keeps the driver, contexts, devices and pointers.
"""

from __future__ import annotations

import os
import threading
from ctypes import byref, c_uint32, c_void_p
from typing import Final

import attrs

from aml_core import checks
from aml_core.buffer import DLDeviceType
from aml_core.errors import AMLError, AMLFailure, AMLNotSupported, AMLValueError
from aml_core.gpu.runtime import (
    PointerAttributes,
    Runtime,
    RuntimeTraits,
    device_capabilities,
)
from aml_core.specs import Capability, DeviceInfo

from . import abi as C
from .ipc import IPC_HANDLE_SIZE, IPC_MAGIC, ZeIpc
from .native import ZeLibrary
from .sysman import LEGACY_ENV, Sysman
from .vmm import ZeVirtualMemory

__all__ = ["IPC_HANDLE_SIZE", "IPC_MAGIC", "AllocProperties", "ZeRuntime"]

_MEMORY_TYPES: Final = {
    C.ZE_MEMORY_TYPE_HOST: "host",
    C.ZE_MEMORY_TYPE_DEVICE: "device",
    C.ZE_MEMORY_TYPE_SHARED: "shared",
}
_DEVICE_TYPES: Final = {
    C.ZE_DEVICE_TYPE_GPU: "GPU",
    C.ZE_DEVICE_TYPE_CPU: "CPU",
    C.ZE_DEVICE_TYPE_FPGA: "FPGA",
    C.ZE_DEVICE_TYPE_MCA: "MCA",
    C.ZE_DEVICE_TYPE_VPU: "VPU",
}


def _vp(value: int) -> c_void_p:
    return c_void_p(value or None)


@attrs.frozen
class AllocProperties:
    """``zeMemGetAllocProperties`` of a pointer: ``memory_type`` is ``"host"``,
    ``"device"``, ``"shared"`` or ``"unknown"`` (not a Level Zero allocation of the
    context), ``device`` the index of the device it belongs to (None: host memory or
    unknown), ``id`` and ``page_size`` as the driver reports them."""

    memory_type: str
    device: int | None
    id: int
    page_size: int


class ZeRuntime(Runtime, ZeIpc, ZeVirtualMemory):
    """The first Level Zero driver and its devices (see the module doc)."""

    def __init__(self, library: ZeLibrary) -> None:
        self.lib = library
        self.errors = library.errors
        # Read before zeInit: the driver reads it there (Sysman's legacy initialisation).
        sysman_legacy = os.environ.get(LEGACY_ENV, "").strip() == "1"
        rc = library.raw("zeInit", 0)
        if rc != C.ZE_RESULT_SUCCESS:
            # Nothing else is called after a failed zeInit (loader 1.8.12 segfaults in
            # zeDriverGet when Intel's driver is installed without a GPU).
            cause = self.errors.cause("zeInit", rc)
            raise AMLNotSupported(
                "no usable Level Zero driver (the loader found none, or its driver found no device)",
                native=cause,
            )
        count = c_uint32(0)
        library.call("zeDriverGet", byref(count), None)
        if count.value == 0:
            raise AMLNotSupported(f"the Level Zero loader {library.path} reports no driver")
        drivers = (c_void_p * count.value)()
        library.call("zeDriverGet", byref(count), drivers)
        self.driver: int = int(drivers[0] or 0)
        if not self.driver:
            raise AMLFailure("zeDriverGet returned a NULL driver handle")
        version = c_uint32(0)
        library.call("zeDriverGetApiVersion", _vp(self.driver), byref(version))
        self.api_version: int = int(version.value)
        ndev = c_uint32(0)
        library.call("zeDeviceGet", _vp(self.driver), byref(ndev), None)
        devices = (c_void_p * max(1, ndev.value))()
        if ndev.value:
            library.call("zeDeviceGet", _vp(self.driver), byref(ndev), devices)
        self.devices: tuple[int, ...] = tuple(int(devices[i] or 0) for i in range(ndev.value))
        if any(h == 0 for h in self.devices):
            raise AMLFailure("zeDeviceGet returned a NULL device handle")
        self.traits = RuntimeTraits(
            name="ze",
            dl_device=DLDeviceType.ONEAPI,
            dl_host=DLDeviceType.CPU,
            dl_managed=DLDeviceType.ONEAPI,
            ipc_handle_size=IPC_HANDLE_SIZE,
            interfaces=Capability.DLPACK,
            versions={"Level Zero API": C.version_string(self.api_version), "library": library.path},
        )
        self._lock = threading.RLock()
        self._context = 0
        #: Contexts of areas collected without close() whose zeContextDestroy failed:
        #: close() destroys them (keep_context).
        self._dropped_contexts: list[int] = []
        #: Pointer -> the context that owns it (registered by the areas).
        self._owners: dict[int, int] = {}
        ZeVirtualMemory.__init__(self)
        #: Sysman's view of the devices (free memory); searched on first use.
        self.sysman = Sysman(
            library, self.devices, lambda d: bytes(self.properties(d).uuid), legacy=sysman_legacy
        )

    # -- contexts ------------------------------------------------------------------------
    def create_context(self) -> int:
        """A new context of the driver (``zeContextCreate``); the caller destroys it."""
        desc = C.ze_context_desc_t(C.ZE_STRUCTURE_TYPE_CONTEXT_DESC, None, 0)
        out = c_void_p()
        self.lib.call("zeContextCreate", _vp(self.driver), byref(desc), byref(out))
        if not out.value:
            raise AMLFailure("zeContextCreate returned SUCCESS and a NULL context")
        return int(out.value)

    def destroy_context(self, context: int) -> None:
        self.lib.call("zeContextDestroy", _vp(context))

    @property
    def context(self) -> int:
        """The runtime's own context (IPC imports, virtual memory), created on first use."""
        with self._lock:
            if not self._context:
                self._context = self.create_context()
            return self._context

    def keep_context(self, context: int) -> None:
        """Keep the context of an area collected without close() that could not be
        destroyed then: :meth:`close` destroys it (never waits: a finalizer calls this)."""
        self._dropped_contexts.append(context)

    def close(self) -> None:
        """Destroy the contexts kept by :meth:`keep_context`, then the runtime's own (what
        they hold must be gone). A context whose zeContextDestroy fails stays: close()
        again retries it; the first error is raised, with the others as notes."""
        errors: list[AMLError] = []
        with self._lock:
            for context in list(self._dropped_contexts):
                try:
                    self.destroy_context(context)
                except AMLError as exc:
                    errors.append(exc)
                    continue
                self._dropped_contexts.remove(context)
            if self._context:
                try:
                    self.destroy_context(self._context)
                    self._context = 0
                except AMLError as exc:
                    errors.append(exc)
        if errors:
            for other in errors[1:]:
                errors[0].add_note(f"destroying another context failed too: {other}")
            raise errors[0]

    def register(self, ptr: int, context: int) -> None:
        """Record that ``ptr`` belongs to ``context`` (an area's allocation)."""
        self._owners[ptr] = context

    def unregister(self, ptr: int) -> None:
        self._owners.pop(ptr, None)

    def context_of(self, ptr: int) -> int:
        """The context owning ``ptr``: an area's, else the runtime's."""
        found = self._owners.get(ptr)
        return found if found is not None else self.context

    def handle(self, device: int) -> int:
        """The ``ze_device_handle_t`` of a device index (EINVAL past the count)."""
        d = checks.device(device)
        if d >= len(self.devices):
            raise AMLValueError(
                f"device {d} is not in 0..{len(self.devices) - 1} ({len(self.devices)} devices)"
            )
        return self.devices[d]

    def index_of(self, handle: int) -> int | None:
        try:
            return self.devices.index(handle)
        except ValueError:
            return None

    # -- devices -------------------------------------------------------------------------
    def device_count(self) -> int:
        return len(self.devices)

    def get_device(self) -> int:
        """Level Zero has no current device: always 0."""
        return 0

    def _set_device(self, device: int) -> None:
        self.handle(device)

    def synchronize(self) -> None:
        """Nothing to wait for: aml-ze submits no work to command queues."""

    def properties(self, device: int) -> C.ze_device_properties_t:
        props = C.ze_device_properties_t()
        props.stype = C.ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES
        self.lib.call("zeDeviceGetProperties", _vp(self.handle(device)), byref(props))
        return props

    def memory_properties(self, device: int) -> list[C.ze_device_memory_properties_t]:
        """``zeDeviceGetMemoryProperties``: one entry per memory ordinal."""
        h = _vp(self.handle(device))
        count = c_uint32(0)
        self.lib.call("zeDeviceGetMemoryProperties", h, byref(count), None)
        if count.value == 0:
            return []
        out = (C.ze_device_memory_properties_t * count.value)()
        for entry in out:
            entry.stype = C.ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES
        self.lib.call("zeDeviceGetMemoryProperties", h, byref(count), out)
        return list(out[: count.value])

    def _device_info(self, device: int) -> DeviceInfo:
        props = self.properties(device)
        memories = self.memory_properties(device)
        kind = _DEVICE_TYPES.get(props.type, f"type {props.type}")
        caps = device_capabilities(self, managed=False, concurrent=False, pageable=False, vmm=True)
        # Area capabilities (aml_ze.area): shared memory and host memory are host-accessible.
        caps |= Capability.MANAGED | Capability.PINNED | Capability.BUFFER_PROTOCOL
        return DeviceInfo(
            index=device,
            name=props.name.decode("utf-8", "replace") or f"Level Zero device {device}",
            total_memory=sum(int(m.totalSize) for m in memories),
            capabilities=caps,
            details={
                "type": kind,
                "vendor_id": f"{props.vendorId:#06x}",
                "device_id": f"{props.deviceId:#06x}",
                "max_alloc_size": int(props.maxMemAllocSize),
                "memory_ordinals": len(memories),
                "api_version": C.version_string(self.api_version),
                "library": self.lib.path,
            },
        )

    def _free_memory(self, device: int) -> int | None:
        """Sysman's free bytes of the device's own memory modules (:mod:`aml_ze.sysman`);
        None when Sysman cannot tell."""
        self.handle(device)
        return self.sysman.free_memory(device)

    # -- pointers ------------------------------------------------------------------------
    def alloc_properties(self, ptr: int) -> AllocProperties:
        """``zeMemGetAllocProperties`` of ``ptr`` in the context that owns it."""
        p = checks.pointer(ptr)
        props = C.ze_memory_allocation_properties_t()
        props.stype = C.ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES
        dev = c_void_p()
        self.lib.call("zeMemGetAllocProperties", _vp(self.context_of(p)), _vp(p), byref(props), byref(dev))
        kind = _MEMORY_TYPES.get(int(props.type), "unknown")
        index = self.index_of(int(dev.value or 0)) if dev.value and kind != "host" else None
        return AllocProperties(kind, index, int(props.id), int(props.pageSize))

    def pointer_attributes(self, ptr: int) -> PointerAttributes:
        """:meth:`alloc_properties` as the shared :class:`PointerAttributes` (shared
        memory is "managed", unknown memory "unregistered")."""
        p = checks.pointer(ptr)
        a = self.alloc_properties(p)
        memory_type = {"device": "device", "host": "host", "shared": "managed"}.get(
            a.memory_type, "unregistered"
        )
        host_ok = memory_type in ("host", "managed")
        return PointerAttributes(
            memory_type=memory_type,
            device=-1 if a.device is None else a.device,
            device_pointer=p if memory_type != "unregistered" else 0,
            host_pointer=p if host_ok else 0,
            is_managed=memory_type == "managed",
        )
