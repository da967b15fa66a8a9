"""AML's Level Zero area (``aml_area_ze``), and the aml-ze backend object.

The backend template (docs/backend-authoring.md §1) lets a backend whose area is its
own have an area module: Level Zero's area is not the CUDA/HIP area of
:mod:`aml_core.gpu` (no flag word of ALLOC_HOST/UNIFIED/MAPPED, no current device, and
one context per area), so it lives here, with :class:`ZeBackend`, the
:class:`~aml_core.gpu.backend.BackendBase` whose bound methods are aml-ze's API.

:class:`ZeArea` behaves as ``aml_area_ze_device_create`` / ``aml_area_ze_host_create``
(docs/aml-contract.md#level-zero-area):

* each area uses the first driver and creates its own context, destroyed when the area
  closes (``aml_area_ze_destroy``) or, dropped without close(), when it is collected;
* DEVICE areas map with ``zeMemAllocDevice``, SHARED ones with ``zeMemAllocShared``
  (device and host descriptors, the area's device), HOST ones with ``zeMemAllocHost``;
  munmap is ``zeMemFree``;
* the device index, memory ordinal, alignment (a power of two) and the allocation flag
  bits are checked before any native call (EINVAL); native failures go through the
  area's error table (:mod:`aml_ze.errors`);
* host and shared memory is host-accessible (buffer protocol); DLPack devices are
  ``kDLOneAPI`` of the area's device for device and shared memory, ``kDLCPU`` for host
  memory.
"""

from __future__ import annotations

import enum
import os
import sys
import threading
import weakref
from typing import Any

import attrs

from aml_core import checks
from aml_core.area import Area, NoOptions, NoOptionsDict, compiled_mmap
from aml_core.backend_api import AreaLock, RuntimeMemory
from aml_core.buffer import Buffer, DLDeviceType
from aml_core.dmabuf import DmabufHandle
from aml_core.dmabuf import export_from as dmabuf_export_from
from aml_core.errors import AMLError, AMLNotSupported, AMLTypeError, AMLValueError
from aml_core.gpu.backend import BackendBase
from aml_core.gpu.ipc import IpcExport, IpcHandle
from aml_core.gpu.runtime import Group
from aml_core.specs import Capability, Kind
from aml_core.stream import StreamLike

from . import abi as C
from .alloc import MemAllocator
from .plugin import AREA_OPTIONS
from .runtime import AllocProperties, ZeRuntime

__all__ = ["ZeArea", "ZeBackend", "ZeDeviceFlags", "ZeFlags", "ZeHostFlags"]


class ZeFlags(enum.IntEnum):
    """The allocation type of a device area: ``AML_AREA_ZE_MMAP_DEVICE_FLAGS`` (1,
    ``zeMemAllocDevice``) or ``AML_AREA_ZE_MMAP_SHARED_FLAGS`` (2, ``zeMemAllocShared``)."""

    DEVICE = 1
    SHARED = 2


class ZeDeviceFlags(enum.IntFlag):
    """``ze_device_mem_alloc_flag_t``."""

    NONE = 0
    BIAS_CACHED = C.ZE_DEVICE_MEM_ALLOC_FLAG_BIAS_CACHED
    BIAS_UNCACHED = C.ZE_DEVICE_MEM_ALLOC_FLAG_BIAS_UNCACHED
    BIAS_INITIAL_PLACEMENT = C.ZE_DEVICE_MEM_ALLOC_FLAG_BIAS_INITIAL_PLACEMENT


class ZeHostFlags(enum.IntFlag):
    """``ze_host_mem_alloc_flag_t`` (API 1.4)."""

    NONE = 0
    BIAS_CACHED = C.ZE_HOST_MEM_ALLOC_FLAG_BIAS_CACHED
    BIAS_UNCACHED = C.ZE_HOST_MEM_ALLOC_FLAG_BIAS_UNCACHED
    BIAS_WRITE_COMBINED = C.ZE_HOST_MEM_ALLOC_FLAG_BIAS_WRITE_COMBINED
    BIAS_INITIAL_PLACEMENT = C.ZE_HOST_MEM_ALLOC_FLAG_BIAS_INITIAL_PLACEMENT


#: AML's default areas: cached allocations, 64-byte alignment.
DEFAULT_ALIGNMENT = 64

_CAPABILITIES = {
    Kind.DEVICE: Capability.DLPACK | Capability.IPC,
    Kind.MANAGED: Capability.DLPACK | Capability.BUFFER_PROTOCOL | Capability.MANAGED,
    Kind.HOST: Capability.DLPACK | Capability.BUFFER_PROTOCOL | Capability.PINNED,
}


@attrs.frozen
class _Settings:
    """An area's checked arguments."""

    kind: Kind
    device: int
    ordinal: int
    device_flags: int
    host_flags: int
    alignment: int
    #: Device memory allocated exportable as dma-bufs (docs/dmabuf.md).
    dmabuf: bool = False


class ZeArea(RuntimeMemory, Area):
    """A Level Zero area: build it with :meth:`ZeBackend.device_area` or
    :meth:`ZeBackend.host_area`."""

    def __init__(self, runtime: ZeRuntime, settings: _Settings) -> None:
        self.runtime = runtime
        self.settings = settings
        self.alignment = settings.alignment
        self.ordinal = settings.ordinal
        self.device_flags = ZeDeviceFlags(settings.device_flags) if settings.kind is not Kind.HOST else None
        self.host_flags = ZeHostFlags(settings.host_flags) if settings.kind is not Kind.DEVICE else None
        kind = settings.kind
        device = None if kind is Kind.HOST else settings.device
        super().__init__(backend="ze", kind=kind, device=device, capabilities=_CAPABILITIES[kind])
        #: ptr -> (the export, held weakly; its native handle data) for each export.
        self._exports: dict[int, list[tuple[weakref.ref[IpcExport], bytes]]] = {}
        self._ctx_lock = AreaLock(self, threading.RLock())
        #: The area's own context (aml_area_ze_*_create: "This area has its own context").
        self.context = runtime.create_context()
        self._bind_calls()

    def _memory_runtime(self) -> ZeRuntime:
        """The runtime that tells the device's memory (RuntimeMemory: MemoryCapacity)."""
        return self.runtime

    # -- allocation ----------------------------------------------------------------------
    @compiled_mmap
    def mmap(
        self, size: int, options: NoOptions | NoOptionsDict | None = None, *, stream: StreamLike = None
    ) -> Buffer:
        """Map ``size`` bytes in the area's own context: device memory
        (``zeMemAllocDevice``), shared memory (``zeMemAllocShared``, a MANAGED area) or
        host memory (``zeMemAllocHost``), with the area's alignment, memory ordinal and
        allocation flags.

        Options: none (the area's settings apply to every mapping): None or ``{}``.

        Errors of Level Zero areas: the driver's errors by aml-ze's error table (for
        example ``ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY`` as
        :class:`~aml_core.errors.AMLMemoryError`, an unsupported size or alignment as
        :class:`~aml_core.errors.AMLNotSupported`), with the native call and code as
        their cause; :class:`~aml_core.errors.AMLFailure` when the allocation
        "succeeds" with NULL."""
        return super().mmap(size, options)

    def _bind_calls(self) -> None:
        """Prepare the hot path: the native calls with their constant arguments."""
        settings = self.settings
        #: The area's native calls (their descriptors, bound once).
        self.allocator = MemAllocator(
            self.runtime,
            self.context,
            self.kind,
            device=self.runtime.devices[settings.device] if self.kind is not Kind.HOST else 0,
            ordinal=settings.ordinal,
            device_flags=settings.device_flags,
            host_flags=settings.host_flags,
            alignment=settings.alignment,
            dmabuf=settings.dmabuf,
        )
        if self.kind is Kind.HOST:
            self._dl: tuple[int, int] = (DLDeviceType.CPU, 0)
        else:
            self._dl = (DLDeviceType.ONEAPI, settings.device)

    def _allocate(self, size: int, options: Any) -> Buffer:
        ptr = self.allocator.allocate(size)
        return self._new_buffer(ptr, size, host_accessible=self.kind is not Kind.DEVICE, dl_device=self._dl)

    def _free(self, buffer: Buffer) -> None:
        ptr = buffer.ptr
        if self._exports:
            for ref, data in self._exports.pop(ptr, ()):
                export = ref()
                if export is not None:
                    export.close()
                self.runtime.ipc_put_handle(self.context, data)
        self.allocator.free(ptr)

    # -- what the driver knows ---------------------------------------------------------------
    def alloc_properties(self, buffer: Buffer | int) -> AllocProperties:
        """``zeMemGetAllocProperties`` of a buffer of this area (or any address) in the
        area's context."""
        ptr = buffer.ptr if isinstance(buffer, Buffer) else buffer
        return self.runtime.alloc_properties(ptr)

    # -- IPC -----------------------------------------------------------------------------
    def ipc_export(self, buffer: Buffer | int) -> IpcExport:
        """Export a device buffer (or its base pointer) for another process
        (``zeMemGetIpcHandle``); the handle is released (``zeMemPutIpcHandle`` where the
        loader has it) when the buffer is freed."""
        if self.kind is not Kind.DEVICE:
            raise AMLNotSupported(f"Level Zero IPC shares device memory; this is a {self.kind.value} area")
        with self._lock:
            self._check_open()
            buf = self._lookup(buffer, None)
            data = self.runtime.require(Group.IPC).ipc_get_handle(buf.ptr, buf.size)
            handle = IpcHandle(
                backend="ze", device=self.settings.device, size=buf.size, data=data, pid=os.getpid()
            )
            export = IpcExport(buf, handle)
            self._exports.setdefault(buf.ptr, []).append((weakref.ref(export), data))
            return export

    # -- dma-buf export (docs/dmabuf.md) -------------------------------------------------------
    def export_dmabuf(self, buffer: Buffer | int) -> DmabufHandle:
        """Export a device buffer (or its base pointer) as a dma-buf: a new fd, the caller's.
        Level Zero takes the export type when memory is allocated, so only an area made
        with ``device_area(..., dmabuf=True)`` can; AMLNotSupported with the reason
        otherwise."""
        if self.kind is Kind.DEVICE and not self.settings.dmabuf:
            raise AMLNotSupported(
                "this Level Zero area's memory was not allocated exportable as a dma-buf: make the area "
                "with device_area(..., dmabuf=True) (Level Zero takes ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF "
                "when it allocates)"
            )
        return dmabuf_export_from(self, buffer, self.runtime.require(Group.IPC).dmabuf_export)

    # -- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        """Free every mapping, then destroy the area's context (``aml_area_ze_destroy``)."""
        try:
            super().close()
        except BaseException as exc:
            try:
                self._destroy_context()
            except AMLError as also:
                exc.add_note(f"destroying the area's context failed too: {also}")
            raise
        self._destroy_context()

    def _destroy_context(self) -> None:
        with self._ctx_lock:
            if not self.context or self._orphans:
                return  # orphans (still-viewed buffers) free themselves, then the context goes
            self.runtime.destroy_context(self.context)  # on failure the context stays: close() retries
            self.context = 0

    def _free_orphan(self, buf: Buffer) -> None:
        super()._free_orphan(buf)
        if self.closed and not self._orphans:
            self._destroy_context()

    def __del__(self) -> None:
        """An area collected without close(): free its mappings (Area's finalizer), then
        destroy its context once nothing needs it (still-viewed buffers hold the area,
        so none is left by now). A failure is reported through ``sys.unraisablehook`` (an
        exception in ``__del__``) and the context kept for the runtime's close() (the
        backend's ``reset()``) to retry. At interpreter exit an area without mappings does
        nothing: the process's exit returns the context."""
        super().__del__()
        context = getattr(self, "context", 0)
        if not context or sys.is_finalizing() or getattr(self, "_orphans", None):
            return
        try:
            self._destroy_context()
        except AMLError:
            self.runtime.keep_context(context)
            raise

    def __repr__(self) -> str:
        what = {Kind.DEVICE: "device", Kind.MANAGED: "shared", Kind.HOST: "host"}[self.kind]
        state = "closed" if self.closed else f"{self._stats()[2]} live"
        dev = "" if self.kind is Kind.HOST else f" device={self.device} ordinal={self.ordinal}"
        dmabuf = " dmabuf" if self.settings.dmabuf else ""
        return f"<aml ZeArea {what}{dev} alignment={self.alignment}{dmabuf} {state}>"


class ZeBackend(BackendBase[ZeRuntime, ZeArea]):
    """The aml-ze backend: AML's Level Zero area API, plus IPC, virtual memory and the
    probe (inherited from :class:`~aml_core.gpu.backend.BackendBase`)."""

    @property
    def ze(self) -> ZeRuntime:
        """The loaded runtime (:attr:`runtime`)."""
        return self.runtime

    def _unload(self, runtime: ZeRuntime) -> None:
        """Destroy the forgotten runtime's own context (its areas are closed by then)."""
        runtime.close()

    def device_area(
        self,
        device: int = 0,
        ordinal: int = 0,
        device_flags: int = 0,
        alignment: int = DEFAULT_ALIGNMENT,
        flags: int = ZeFlags.DEVICE,
        *,
        dmabuf: bool = False,
        _checked: bool = True,
    ) -> ZeArea:
        """``aml_area_ze_device_create(&area, device, ordinal, device_flags, alignment,
        flags)``: device (``ZeFlags.DEVICE``) or shared (``ZeFlags.SHARED``) memory of
        device index ``device``, from memory ``ordinal``. Close it (or :meth:`destroy`)
        when done. ``dmabuf=True`` (aml's, not AML's): device memory allocated exportable
        as dma-bufs (``ze_external_memory_export_desc_t`` with
        ``ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF`` chained to every allocation), which
        ``export_dmabuf`` then exports (docs/dmabuf.md). Errors: a device past the count,
        an ordinal past the device's memory count, an alignment that is not a power of
        two, unknown flag bits or ``flags`` neither DEVICE nor SHARED → EINVAL; ``dmabuf``
        not a bool → EINVAL (AMLTypeError), with SHARED → ENOTSUP; context creation fails
        → the translated ze_result_t."""
        rt = self.runtime
        if _checked:
            rt.handle(device)
            dev = checks.device(device)
            ordinal = checks.integer(ordinal, "ordinal")
            ordinals = len(rt.memory_properties(dev))
            if not 0 <= ordinal < max(1, ordinals):
                raise AMLValueError(f"ordinal {ordinal} is not in 0..{max(1, ordinals) - 1} for device {dev}")
            device_flags = checks.flag_bits(device_flags, C.DEVICE_MEM_ALLOC_FLAGS, "device_flags")
            alignment = checks.power_of_two(alignment)
            flags = checks.member(flags, {ZeFlags.DEVICE, ZeFlags.SHARED}, "flags (DEVICE 1, SHARED 2)")
        if not isinstance(dmabuf, bool):
            raise AMLTypeError(f"dmabuf is a bool, not {type(dmabuf).__name__}")
        kind = Kind.MANAGED if flags == ZeFlags.SHARED else Kind.DEVICE
        if dmabuf and kind is Kind.MANAGED:
            raise AMLNotSupported(
                "Level Zero dma-buf export is of device memory: a shared area cannot be exportable"
            )
        host_flags = C.ZE_HOST_MEM_ALLOC_FLAG_BIAS_CACHED if kind is Kind.MANAGED else 0
        return ZeArea(
            rt,
            _Settings(kind, int(device), int(ordinal), int(device_flags), host_flags, int(alignment), dmabuf),
        )

    def host_area(
        self, host_flags: int = 0, alignment: int = DEFAULT_ALIGNMENT, *, _checked: bool = True
    ) -> ZeArea:
        """``aml_area_ze_host_create(&area, host_flags, alignment)``: host memory
        (``zeMemAllocHost``). Errors as :meth:`device_area`."""
        rt = self.runtime
        if _checked:
            host_flags = checks.flag_bits(host_flags, C.HOST_MEM_ALLOC_FLAGS, "host_flags")
            alignment = checks.power_of_two(alignment)
        return ZeArea(rt, _Settings(Kind.HOST, 0, 0, 0, int(host_flags), int(alignment)))

    def _ze_default(self, kind: Kind) -> ZeArea:
        if kind is Kind.HOST:
            return self._default(kind, lambda: self.host_area(ZeHostFlags.BIAS_CACHED, DEFAULT_ALIGNMENT))
        return self._default(
            kind, lambda: self.device_area(0, 0, ZeDeviceFlags.BIAS_CACHED, DEFAULT_ALIGNMENT, ZeFlags.DEVICE)
        )

    def default_device_area(self) -> ZeArea:
        """``aml_area_ze_device``: cached device memory of device 0, 64-byte aligned
        (shared: do not close it)."""
        return self._ze_default(Kind.DEVICE)

    def default_host_area(self) -> ZeArea:
        """``aml_area_ze_host``: cached host memory, 64-byte aligned (shared: do not close it)."""
        return self._ze_default(Kind.HOST)

    def alloc_properties(self, ptr: int | Buffer) -> AllocProperties:
        """``zeMemGetAllocProperties`` of an address or a buffer's ``ptr``."""
        return self.runtime.alloc_properties(ptr.ptr if isinstance(ptr, Buffer) else ptr)

    def pointer_attributes(self, ptr: int | Buffer) -> Any:
        """:meth:`alloc_properties` as :class:`~aml_core.gpu.runtime.PointerAttributes`."""
        return self.runtime.pointer_attributes(ptr.ptr if isinstance(ptr, Buffer) else ptr)

    def create_area(
        self, kind: Kind, device: int | None = None, *, all_devices: bool = False, **options: Any
    ) -> ZeArea:
        """The ``aml_core.area(kind=..., backend="ze")`` factory: DEVICE → a device area,
        MANAGED → a shared area, HOST → a host area; options are the area's arguments
        (``ordinal``, ``device_flags``, ``alignment``, ``dmabuf``; ``host_flags``,
        ``alignment``)."""
        if all_devices:
            raise AMLNotSupported("Level Zero areas allocate for one device (all_devices is CUDA/HIP's)")
        allowed = AREA_OPTIONS.get(kind)
        if allowed is None:
            raise AMLNotSupported(f"ze does not provide {kind.value} memory")
        unknown = set(options) - allowed
        if unknown:
            raise AMLTypeError(f"unknown ze area options {sorted(unknown)}; allowed: {sorted(allowed)}")
        if kind is Kind.HOST:
            return self.host_area(**options)
        flags = ZeFlags.SHARED if kind is Kind.MANAGED else ZeFlags.DEVICE
        return self.device_area(0 if device is None else device, flags=flags, **options)
