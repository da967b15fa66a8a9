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
FAILURE, with the call named.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import threading
from collections.abc import Sequence
from ctypes import byref, c_size_t, c_uint32, c_void_p
from typing import Final

import attrs

from aml_core import checks
from aml_core.buffer import DLDeviceType
from aml_core.errors import AMLFailure, AMLNotSupported, AMLValueError, NativeCause
from aml_core.gpu.runtime import (
    AllocationProperties,
    IpcOps,
    PointerAttributes,
    Runtime,
    RuntimeTraits,
    VirtualMemoryOps,
    device_capabilities,
)
from aml_core.specs import Capability, DeviceInfo

from . import abi as C
from .native import ZeLibrary
from .sysman import LEGACY_ENV, Sysman

__all__ = ["IPC_HANDLE_SIZE", "IPC_MAGIC", "AllocProperties", "ZeRuntime"]

#: Bytes of the IPC group's handle (see the module doc).
IPC_HANDLE_SIZE: Final = 80
IPC_MAGIC: Final = b"AMZE"
_IPC_TAIL = struct.Struct("<4sIII")

#: Access values of the shared virtual-memory API (CUDA's) <-> ze_memory_access_attribute_t.
_TO_ZE_ACCESS: Final = {
    0: C.ZE_MEMORY_ACCESS_ATTRIBUTE_NONE,
    1: C.ZE_MEMORY_ACCESS_ATTRIBUTE_READONLY,
    3: C.ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE,
}
_FROM_ZE_ACCESS: Final = {v: k for k, v in _TO_ZE_ACCESS.items()}

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
_SYS_PIDFD_GETFD: Final = 438
_PR_SET_PTRACER: Final = 0x59616D61
_PR_SET_PTRACER_ANY: Final = (1 << 64) - 1


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


@attrs.define
class _Physical:
    size: int
    device: int
    refs: int = 1
    maps: int = 0


class ZeRuntime(Runtime, IpcOps, VirtualMemoryOps):
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
        #: Pointer -> the context that owns it (registered by the areas).
        self._owners: dict[int, int] = {}
        self._physicals: dict[int, _Physical] = {}
        self._mappings: dict[int, tuple[int, int]] = {}
        #: unmapped address -> the physical allocation its unmap could not destroy
        self._undestroyed: dict[int, int] = {}
        self._ptracer_set = False
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

    def close(self) -> None:
        """Destroy the runtime's context (what it holds must be gone)."""
        with self._lock:
            if self._context:
                self.destroy_context(self._context)
                self._context = 0

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

    # -- IPC -----------------------------------------------------------------------------
    def _allow_pidfd_getfd(self) -> None:
        """Let importers duplicate this process's descriptors under Yama ptrace_scope 1."""
        if self._ptracer_set:
            return
        self._ptracer_set = True
        try:
            with open("/proc/sys/kernel/yama/ptrace_scope") as f:
                scope = f.read().strip()
        except OSError:
            return
        if scope == "1":
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PTRACER, ctypes.c_ulong(_PR_SET_PTRACER_ANY), 0, 0, 0)

    def _ipc_get_handle(self, ptr: int, size: int) -> bytes:
        handle = C.ze_ipc_mem_handle_t()
        context = self.context_of(ptr)
        self.lib.call("zeMemGetIpcHandle", _vp(context), _vp(ptr), byref(handle))
        self._allow_pidfd_getfd()
        props = self.alloc_properties(ptr)
        device = props.device or 0
        data = ctypes.string_at(byref(handle), C.ZE_MAX_IPC_HANDLE_SIZE)
        return data + _IPC_TAIL.pack(IPC_MAGIC, os.getpid(), device, 0)

    def ipc_put_handle(self, context: int, data: bytes) -> None:
        """``zeMemPutIpcHandle`` where the loader has it (spec 1.6+); otherwise the
        handle is released with its memory."""
        if not self.lib.has("zeMemPutIpcHandle"):
            return
        native = C.ze_ipc_mem_handle_t.from_buffer_copy(data[: C.ZE_MAX_IPC_HANDLE_SIZE])
        self.lib.call("zeMemPutIpcHandle", _vp(context), native)

    @staticmethod
    def parse_ipc_handle(data: bytes) -> tuple[bytes, int, int, int]:
        """(ze handle, exporter pid, device, exporter fd) of an aml-ze IPC handle; EINVAL
        if it is not one."""
        raw = checks.handle_bytes(data, IPC_HANDLE_SIZE, "an aml-ze IPC handle")
        magic, pid, device, reserved = _IPC_TAIL.unpack_from(raw, C.ZE_MAX_IPC_HANDLE_SIZE)
        if magic != IPC_MAGIC or reserved != 0:
            raise AMLValueError("not an aml-ze IPC handle (bad magic): from another backend, or tampered")
        if pid <= 0 or pid > checks.C_INT_MAX:
            raise AMLValueError(f"the aml-ze IPC handle names pid {pid}: tampered")
        fd = int.from_bytes(raw[:4], "little", signed=True)
        if fd < 0:
            raise AMLValueError(f"the aml-ze IPC handle carries fd {fd}: tampered")
        return raw[: C.ZE_MAX_IPC_HANDLE_SIZE], pid, device, fd

    def _ipc_open_handle(self, handle: bytes, size: int) -> int:
        ze, pid, device, remote_fd = self.parse_ipc_handle(handle)
        hdev = self.devices[device] if device < len(self.devices) else self.handle(0)
        local = _pidfd_getfd(pid, remote_fd)
        try:
            native = C.ze_ipc_mem_handle_t.from_buffer_copy(local.to_bytes(4, "little") + ze[4:])
            out = c_void_p()
            self.lib.call("zeMemOpenIpcHandle", _vp(self.context), _vp(hdev), native, 0, byref(out))
        finally:
            os.close(local)
        if not out.value:
            raise AMLFailure("zeMemOpenIpcHandle returned SUCCESS and a NULL pointer")
        return int(out.value)

    def _ipc_close_handle(self, ptr: int) -> None:
        self.lib.call("zeMemCloseIpcHandle", _vp(self.context), _vp(ptr))

    def _ipc_address_range(self, ptr: int) -> tuple[int, int] | None:
        """``zeMemGetAddressRange`` of the opened memory: the allocation the exporter shared
        (a tampered handle may claim more)."""
        base, size = c_void_p(), c_size_t(0)
        self.lib.call("zeMemGetAddressRange", _vp(self.context), _vp(ptr), byref(base), byref(size))
        return int(base.value or 0), int(size.value)

    # -- virtual memory ------------------------------------------------------------------
    def _vmm_granularity(self, device: int, recommended: bool) -> int:
        out = c_size_t(0)
        # The page size Level Zero would use for an allocation of this many bytes: the
        # smallest (1 byte) is the minimum granularity, 2 MiB the recommended one.
        size = (1 << 21) if recommended else 1
        self.lib.call(
            "zeVirtualMemQueryPageSize", _vp(self.context), _vp(self.handle(device)), size, byref(out)
        )
        g = int(out.value)
        if g <= 0 or g & (g - 1):
            raise AMLFailure(f"zeVirtualMemQueryPageSize returned SUCCESS and page size {g}")
        return g

    def _vmm_reserve(self, size: int, alignment: int, address: int) -> int:
        out = c_void_p()
        self.lib.call("zeVirtualMemReserve", _vp(self.context), _vp(address), size, byref(out))
        ptr = int(out.value or 0)
        if not ptr:
            raise AMLFailure("zeVirtualMemReserve returned SUCCESS and a NULL pointer")
        if alignment and ptr % alignment:
            self.lib.call("zeVirtualMemFree", _vp(self.context), _vp(ptr), size)
            raise AMLNotSupported(
                f"zeVirtualMemReserve has no alignment argument and returned 0x{ptr:x}, "
                f"not aligned to {alignment}"
            )
        return ptr

    def _vmm_address_free(self, ptr: int, size: int) -> None:
        self.lib.call("zeVirtualMemFree", _vp(self.context), _vp(ptr), size)

    def _vmm_create(self, size: int, device: int, exportable: bool) -> int:
        desc = C.ze_physical_mem_desc_t(C.ZE_STRUCTURE_TYPE_PHYSICAL_MEM_DESC, None, 0, size)
        out = c_void_p()
        self.lib.call(
            "zePhysicalMemCreate", _vp(self.context), _vp(self.handle(device)), byref(desc), byref(out)
        )
        handle = int(out.value or 0)
        if not handle:
            raise AMLFailure("zePhysicalMemCreate returned SUCCESS and a NULL handle")
        with self._lock:
            self._physicals[handle] = _Physical(size, device)
        return handle

    def _tracked(self, handle: int) -> _Physical:
        found = self._physicals.get(handle)
        if found is None:
            raise AMLValueError(f"0x{handle:x} is not a live physical allocation of this runtime")
        return found

    def _destroy_if_unused(self, handle: int, phys: _Physical) -> None:
        if phys.refs <= 0 and phys.maps <= 0:
            self.lib.call("zePhysicalMemDestroy", _vp(self.context), _vp(handle))
            del self._physicals[handle]

    def _vmm_release(self, handle: int) -> None:
        with self._lock:
            phys = self._tracked(handle)
            phys.refs -= 1
            try:
                self._destroy_if_unused(handle, phys)
            except BaseException:
                phys.refs += 1  # still alive: keep it tracked
                raise

    def _vmm_map(self, ptr: int, size: int, handle: int, offset: int) -> None:
        with self._lock:
            phys = self._tracked(handle)
            self.lib.call(
                "zeVirtualMemMap",
                _vp(self.context),
                _vp(ptr),
                size,
                _vp(handle),
                offset,
                C.ZE_MEMORY_ACCESS_ATTRIBUTE_NONE,
            )
            phys.maps += 1
            self._mappings[ptr] = (size, handle)

    def _vmm_unmap(self, ptr: int, size: int) -> None:
        with self._lock:
            handle = self._undestroyed.get(ptr)
            if handle is None:
                self.lib.call("zeVirtualMemUnmap", _vp(self.context), _vp(ptr), size)
                found = self._mappings.pop(ptr, None)
                if found is None:
                    return
                handle = found[1]
                phys = self._physicals.get(handle)
                if phys is None:
                    return
                phys.maps -= 1
            else:  # unmapped already: this retry destroys what the last unmap could not
                phys = self._physicals[handle]
            try:
                self._destroy_if_unused(handle, phys)
            except BaseException:
                # The range is unmapped, but the physical allocation it was the last user
                # of is not destroyed: the caller keeps the mapping, and its retry of this
                # unmap (or close()) destroys it without unmapping twice.
                self._undestroyed[ptr] = handle
                raise
            self._undestroyed.pop(ptr, None)

    def _vmm_set_access(self, ptr: int, size: int, access: Sequence[tuple[int, int]]) -> None:
        wanted = {flags for _, flags in access}
        if len(wanted) != 1:
            raise AMLNotSupported(
                "Level Zero sets one access attribute per range for every device of the context; "
                f"got different accesses {sorted(wanted)}"
            )
        self.lib.call(
            "zeVirtualMemSetAccessAttribute", _vp(self.context), _vp(ptr), size, _TO_ZE_ACCESS[wanted.pop()]
        )

    def _vmm_get_access(self, ptr: int, device: int) -> int:
        self.handle(device)
        size = next((s for p, (s, _) in self._mappings.items() if p <= ptr < p + s), 0)
        if not size:
            raise AMLValueError(f"0x{ptr:x} is not mapped by this runtime")
        access = c_uint32(0)
        out = c_size_t(0)
        self.lib.call(
            "zeVirtualMemGetAccessAttribute", _vp(self.context), _vp(ptr), size, byref(access), byref(out)
        )
        value = _FROM_ZE_ACCESS.get(int(access.value))
        if value is None:
            raise AMLFailure(f"zeVirtualMemGetAccessAttribute returned unknown access {access.value}")
        return value

    _NO_EXPORT: Final = (
        "Level Zero 1.4 cannot share a physical allocation as a file descriptor "
        "(zePhysicalMemCreate has no external-memory export; only zeMemAlloc* memory is shared, "
        "through IPC handles)"
    )

    def _vmm_export_fd(self, handle: int) -> int:
        self._tracked(handle)
        raise AMLNotSupported(self._NO_EXPORT)

    def _vmm_import_fd(self, fd: int) -> int:
        raise AMLNotSupported(self._NO_EXPORT)

    def _vmm_retain(self, ptr: int) -> int:
        with self._lock:
            found = self._mappings.get(ptr)
            if found is None:
                raise AMLValueError(f"0x{ptr:x} is not a mapping of this runtime")
            self._physicals[found[1]].refs += 1
            return found[1]

    def _vmm_properties(self, handle: int) -> AllocationProperties:
        phys = self._tracked(handle)
        # Level Zero has no query: these are the facts aml-ze recorded at creation
        # (device memory, no shareable handle type).
        return AllocationProperties(type=1, location_device=phys.device, handle_types=0)


def _pidfd_getfd(pid: int, fd: int) -> int:
    """A duplicate, in this process, of the exporter's descriptor ``fd``; EINVAL when the
    exporter or its descriptor is gone (or was never there: a tampered handle)."""
    if not sys.platform.startswith("linux"):  # pragma: no cover
        raise AMLNotSupported("aml-ze IPC passes file descriptors with pidfd_getfd (Linux 5.6+)")
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        raise AMLValueError(f"the exporting process {pid} is gone (or the handle was tampered)") from None
    except OSError as exc:
        raise AMLNotSupported(f"pidfd_open({pid}) failed: {exc}") from None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        local = int(libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0))
        if local < 0:
            err = ctypes.get_errno()
            if err == 9:  # EBADF
                raise AMLValueError(f"process {pid} has no descriptor {fd}: the handle is stale or tampered")
            raise AMLNotSupported(
                f"pidfd_getfd({pid}, {fd}) failed: {os.strerror(err)} (ptrace rights over the exporter "
                "are needed: see Yama ptrace_scope)",
                native=NativeCause("ze", "pidfd_getfd", err, os.strerror(err)),
            )
        return local
    finally:
        os.close(pidfd)
