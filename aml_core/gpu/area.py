"""The GPU area: AML's CUDA/HIP area flag logic (``aml_area_hip_*``, ``aml_area_cuda_*``;
docs/aml-contract.md#hip-area), written once.

``GpuArea(runtime, device, flags)`` behaves as ``aml_area_hip_create`` /
``aml_area_cuda_create``:

* ``device`` >= the device count is EINVAL at creation; a failure to count devices is
  FAILURE; a negative device means "the current device at mmap time".
* ``mmap(size, options)``: ``options.device`` (if not None) overrides the area's device,
  negative meaning the current device; the device is selected for the allocation and
  the caller's current device is restored afterwards, also when the allocation fails.
* flags: ALLOC_UNIFIED → managed memory attached to the host (global with
  ALLOC_GLOBAL), ALLOC_HOST and ALLOC_MAPPED ignored; ALLOC_MAPPED with ALLOC_HOST →
  mapped host allocation (portable with ALLOC_GLOBAL); ALLOC_MAPPED alone → registers
  the caller's ``options.ptr`` (missing: EINVAL) and takes its device pointer;
  ALLOC_HOST → host allocation (portable with ALLOC_GLOBAL); no flag → device memory.
* native errors are translated by the backend's table (docs/aml-contract.md#hip-area:
  insufficient driver or no device → ENOTSUP, allocation failure → ENOMEM, invalid
  value/device → EINVAL, device in use → EBUSY, initialization error and anything unknown → FAILURE).
"""

from __future__ import annotations

from typing import Any

import attrs

from .. import checks
from ..area import compiled_mmap
from ..buffer import Buffer, native_as
from ..dmabuf import DmabufHandle
from ..dmabuf import export_from as dmabuf_export_from
from ..errors import AMLMemoryError, AMLNotSupported, AMLValueError
from ..interop import cuda_array_interface
from ..protocols import StreamOrdering
from ..specs import Capability, Kind
from ..stream import StreamLike
from ._copies import CopyingArea
from ._device_area import RuntimeMemory
from ._managed_area import ManagedAreaMethods
from .devices import selected_device, usable_device_count
from .flags import AllocMode, DecodedFlags, GpuFlags, decode_flags
from .ipc import ExportRegistry, IpcExport, close_exports, export_from
from .options import GpuAllocation, GpuMmapOptions, GpuMmapOptionsDict, StreamOrdered, host_memory
from .runtime import Group, Runtime, StreamOrderedOps, capabilities
from .stream import runtime_stream_ordering

__all__ = ["GpuAllocation", "GpuArea", "GpuMmapOptions", "GpuMmapOptionsDict", "StreamOrdered"]


class GpuArea(RuntimeMemory, ManagedAreaMethods, CopyingArea):
    """An AML CUDA/HIP area over a :class:`~aml_core.gpu.runtime.Runtime` that provides the
    ``ALLOCATION`` group (and ``MANAGED`` for ALLOC_UNIFIED areas).

    When the runtime offers a compiled allocator (``native_allocator()``), device, managed
    and host areas install it: ``mmap(size)`` without options on the current device and
    ``munmap`` then run in C and do not call ``_allocate``/``_free`` (docs/
    backend-authoring.md, "The compiled allocator"). A subclass that changes how those
    areas allocate uninstalls it with ``self._set_native(None)``."""

    options_type = GpuMmapOptions

    @compiled_mmap
    def mmap(
        self,
        size: int,
        options: GpuMmapOptions | GpuMmapOptionsDict | None = None,
        *,
        stream: StreamLike = None,
    ) -> Buffer:
        """Map ``size`` bytes of the area's memory (its flags: device memory, managed
        memory with ALLOC_UNIFIED, pinned host memory with ALLOC_HOST, mapped host memory
        with ALLOC_HOST | ALLOC_MAPPED, the caller's registered memory with ALLOC_MAPPED
        alone) on the area's device, or the current device for a negative one; the
        caller's current device is restored after.

        Options (:class:`GpuMmapOptions`, or a :class:`GpuMmapOptionsDict` of its keys):

        - ``device``: a device index that overrides the area's (negative: the current
          device; None, the default: the area's).
        - ``ptr``: ALLOC_MAPPED areas without ALLOC_HOST only (required there): the host
          memory to register, an int address or a writable buffer-protocol object of at
          least ``size`` bytes (kept alive while mapped).
        - ``stream``: deprecated, removed in the next minor version: ``mmap(size,
          stream=s)``.

        ``stream``: device areas only: allocate in that stream's order
        (cudaMallocAsync/hipMallocAsync; any stream object or an int handle, 0 the
        default stream); munmap frees it on the same stream unless ``munmap(...,
        stream=)`` names another (None, the default: a plain allocation). munmap of any
        other buffer with a stream frees it once that stream is synchronized.

        Errors of GPU areas: :class:`~aml_core.errors.AMLValueError` for a device out of
        range, a missing ``ptr`` where one is required, a ``ptr`` too small or read-only,
        or a negative stream handle; :class:`~aml_core.errors.AMLNotSupported` for
        ``stream`` on an area that is not a device area, or a runtime without
        stream-ordered allocation; the runtime's errors by its error table
        (:class:`~aml_core.errors.AMLMemoryError` for out of memory, after one retry
        once the device is synchronized for a stream-ordered allocation), with the
        native call and code as their cause."""
        return super().mmap(size, options)

    def __init__(self, runtime: Runtime, device: int, flags: int | GpuFlags) -> None:
        """``aml_area_<name>_create(&area, device, flags)``: ``runtime`` — the backend's
        loaded runtime (``aml_hip.get_runtime()``); ``device`` — a device index, or
        negative for the current device at mmap time; ``flags`` — :class:`GpuFlags`
        (ALLOC_HOST, ALLOC_MAPPED, ALLOC_UNIFIED, ALLOC_GLOBAL). Prefer the backend's
        ``create(device, flags)``."""
        device = checks.c_int(device, "device")
        decoded = decode_flags(flags)
        kind = decoded.kind
        self.runtime = runtime
        #: The flags decoded once: the allocation paths below read this, never flag bits.
        self.decoded: DecodedFlags = decoded
        self.flags = decoded.flags
        #: The groups the hot path calls (the same object as ``runtime``, typed by group).
        self._alloc = runtime.require(Group.ALLOCATION)
        self._managed_ops = runtime.require(Group.MANAGED) if kind is Kind.MANAGED else None
        self._count = self._device_count()
        if device >= self._count:
            raise AMLValueError(f"device {device} is not in 0..{self._count - 1} ({self._count} devices)")
        super().__init__(
            backend=runtime.traits.name, kind=kind, device=device, capabilities=_capabilities(runtime, kind)
        )
        self._exports: ExportRegistry = {}
        self._default_options = GpuMmapOptions()
        self._stream_ordered: StreamOrderedOps | None = None
        self._take_streams()  # mmap(..., stream=) on device areas, munmap(..., stream=) on all
        #: Shared (frozen) native records by allocated size; the mode is the area's.
        self._records: dict[int, GpuAllocation] = {}
        self._install_native()

    def _install_native(self) -> None:
        """Install the runtime's compiled allocator (AllocationOps.native_allocator) for
        this area's mode, if it has one: mmap(size) and munmap then run in C
        (AreaBase._set_native). HOST_MAPPED and REGISTERED areas, which need more than
        one native call or the caller's memory, keep the Python path."""
        native = self._alloc.native_allocator()
        if native is None:
            return
        traits = self.runtime.traits
        mode, all_devices = self.decoded.mode, self.decoded.all_devices
        if mode is AllocMode.DEVICE:
            dl_type, host, flags, granule = traits.dl_device, False, 0, 1
        elif mode is AllocMode.MANAGED and native.has("malloc_managed"):
            flags = native.attach_global if all_devices else native.attach_host
            dl_type, host, granule = traits.dl_managed, True, traits.managed_granule
        elif mode is AllocMode.HOST and native.has("host_alloc"):
            flags = native.host_portable if all_devices else 0
            dl_type, host, granule = traits.dl_host, True, 1
        else:
            return
        self._set_native(
            native,
            mode.value,  # the compiled allocator's modes are named by AllocMode's values
            dl_device_type=dl_type,
            host_accessible=host,
            # Pinned host memory's DLPack device is (CUDA_HOST/ROCM_HOST, 0), as _allocate_on says.
            dl_device_current=mode is not AllocMode.HOST,
            flags=flags,
            granule=granule,
            records=self._records,
            record=self._record,
            slow_free=self._exports,
        )

    def _record(self, alloc_size: int) -> GpuAllocation:
        """A shared (frozen) GpuAllocation of this area's mode for the usual sizes:
        building an attrs instance costs more than the rest of the Python side of an
        mmap. Keyed by the size alone (an Enum's hash is Python code)."""
        found = self._records.get(alloc_size)
        if found is None:
            found = GpuAllocation(self.decoded.mode, alloc_size)
            if len(self._records) < _RECORDS_MAX:
                self._records[alloc_size] = found
        return found

    def _device_count(self) -> int:
        # No driver or device: AMLNotSupported "no usable <backend> device: ..." (.devices).
        return usable_device_count(self.runtime)

    # -- what pools use (aml_core.protocols) ---------------------------------------------------
    def stream_ordering(self) -> StreamOrdering:
        """The runtime's stream and event operations (StreamOrderedArea: a pool over this
        area takes and frees blocks in a stream's order); AMLNotSupported when the runtime
        lacks the STREAMS or STREAM_ORDERED group."""
        return runtime_stream_ordering(self.runtime)

    def _pool_binding(self, options: Any) -> tuple[Any, int | None]:
        """A pool caches the memory of one device (as CuPy's and PyTorch's pools do: one
        per device): over an area of the current device (negative device), the pool is
        bound to the device current when it is made, or to ``options.device`` if it names
        one. Every slab is then allocated there, so a block freed on one device is never
        handed out as another device's memory. (PoolBinding.)"""
        opts = self._coerce_options(options)
        device = self.device if opts.device is None else opts.device
        if device is not None and device >= 0:
            return options, device
        device = self.runtime.get_device()
        return attrs.evolve(opts, device=device), device

    def _memory_runtime(self) -> Runtime:
        """The runtime that tells the device's memory (RuntimeMemory: MemoryCapacity)."""
        return self.runtime

    # -- allocation -----------------------------------------------------------------------
    def _coerce_options(self, options: Any) -> Any:
        if options is None:
            return self._default_options  # frozen: one instance serves every mmap
        return super()._coerce_options(options)

    def _stream_synchronize(self, handle: int) -> None:
        """Wait for ``handle``'s work (a buffer munmap(..., stream=) frees at once), where the runtime
        has streams: without them no stream can have work on it (nothing to wait for, and
        no call that could tell a handle it does not know)."""
        if self.runtime.why_missing(Group.STREAMS) is None:
            self.runtime.require(Group.STREAMS).stream_synchronize(handle)

    def _stream_ops(self) -> StreamOrderedOps:
        ops = self._stream_ordered
        if ops is None:
            ops = self._stream_ordered = self.runtime.require(Group.STREAM_ORDERED)
        return ops

    def _allocate(self, size: int, options: GpuMmapOptions, stream: int | None = None) -> Buffer:
        # Select the device for the allocation and restore the caller's device after,
        # even on failure (aml_area_hip_mmap).
        device = self.device if options.device is None else options.device
        assert device is not None
        rt = self.runtime
        if device < 0:
            return self._allocate_on(size, options, rt.get_device(), stream)
        if device >= self._count:
            raise AMLValueError(f"device {device} is not in 0..{self._count - 1}")
        # A failing hipGetDevice/cudaGetDevice is translated like any call (aml_area_hip_mmap: no
        # device or driver -> ENOTSUP, initialization error -> FAILURE...).
        buf = None
        try:
            with selected_device(rt, device):
                buf = self._allocate_on(size, options, device, stream)
        except BaseException as exc:
            if buf is not None:
                # The allocation succeeded but the caller's device could not be restored. AML's
                # C area returns the pointer with aml_errno set; Python cannot both return and
                # raise, so the memory is given back and the restore error raised: nothing leaks
                # (a give-back that fails too leaves the mapping tracked for close()).
                self._give_back(buf, exc)
            raise
        return buf

    def _allocate_on(self, size: int, options: GpuMmapOptions, used: int, stream: int | None) -> Buffer:
        """Allocate on the selected device ``used`` (see the module doc for the flags).
        ``size`` was checked by :meth:`Area.mmap`: the group's unchecked calls are used."""
        ops = self._alloc
        traits = self.runtime.traits
        mode, all_devices = self.decoded.mode, self.decoded.all_devices
        dptr: int | None = None
        dl_device = (traits.dl_host, 0)  # pinned host memory: (CUDA_HOST/ROCM_HOST, 0)
        if stream is not None:
            if mode is not AllocMode.DEVICE:
                raise AMLNotSupported(
                    f"stream-ordered allocation makes device memory; this is a {self.kind.value} area"
                )
            ptr = self._malloc_async(size, stream)
            native = GpuAllocation(mode, size, StreamOrdered(stream))
            dl_device = (traits.dl_device, used)
        elif mode is AllocMode.DEVICE:
            ptr, native = ops._malloc(size), self._record(size)
            dl_device = (traits.dl_device, used)
        elif mode is AllocMode.MANAGED:
            assert self._managed_ops is not None
            g = traits.managed_granule
            n = -(-size // g) * g
            ptr, native = self._managed_ops._malloc_managed(n, all_devices), self._record(n)
            dl_device = (traits.dl_managed, used)
        elif mode is AllocMode.HOST:
            ptr, native = ops._host_alloc(size, all_devices, False), self._record(size)
        elif mode is AllocMode.HOST_MAPPED:
            ptr = ops._host_alloc(size, all_devices, True)
            try:
                dptr = ops._host_device_pointer(ptr)
            except BaseException:
                ops._free_host(ptr)
                raise
            native = self._record(size)
        else:
            ptr, dptr, native = self._register(size, options)
        return self._new_buffer(
            ptr,
            size,
            host_accessible=mode is not AllocMode.DEVICE,
            dl_device=dl_device,
            device_ptr=dptr,
            native=native,
            device=used,
        )

    def _malloc_async(self, size: int, stream: int) -> int:
        ops = self._stream_ops()
        try:
            return ops._malloc_async(size, stream)
        except AMLMemoryError:
            # Frees queued on streams return memory to the device's pool only when
            # they run: wait for the device, then try once more (then ENOMEM).
            self.runtime.synchronize()
            return ops._malloc_async(size, stream)

    def _register(self, size: int, options: GpuMmapOptions) -> tuple[int, int, GpuAllocation]:
        """REGISTERED: ALLOC_MAPPED without ALLOC_HOST maps the caller's memory (as in
        AML, options.ptr is only read by these areas): (host address, device pointer,
        record keeping the caller's object alive)."""
        if options.ptr is None:
            raise AMLValueError(
                "an ALLOC_MAPPED area without ALLOC_HOST maps the caller's memory: "
                "pass options.ptr (an address or a writable buffer)"
            )
        ops = self._alloc
        host, keep = host_memory(options.ptr, size)
        try:
            ops._host_register(host, size, self.decoded.all_devices, True)
            try:
                dptr = ops._host_device_pointer(host)
            except BaseException:
                ops._host_unregister(host)
                raise
        except BaseException:
            if isinstance(keep, memoryview):
                keep.release()
            raise
        return host, dptr, GpuAllocation(AllocMode.REGISTERED, size, keep)

    def _free(self, buffer: Buffer, stream: int | None = None) -> None:
        """Free ``buffer``: a stream-ordered one with cudaFreeAsync/hipFreeAsync on
        ``stream`` (munmap's; None: the stream it was allocated on); any other once
        ``stream`` (if given) is synchronized, its work on the buffer done. Either way a
        native call uses the handle, so a handle the runtime does not know is refused by
        it (the translated error) and the buffer stays live and tracked."""
        native = native_as(buffer, GpuAllocation)
        ops = self._alloc
        if stream is not None and not native.stream_ordered:
            self._stream_synchronize(stream)
        if self._exports:
            close_exports(self._exports, buffer.ptr)
        mode = native.mode
        if native.stream_ordered:
            self._stream_ops()._free_async(buffer.ptr, native.keep.stream if stream is None else stream)
        elif mode is AllocMode.DEVICE or mode is AllocMode.MANAGED:
            ops._free(buffer.ptr)
        elif mode is AllocMode.REGISTERED:
            ops._host_unregister(buffer.ptr)
            if isinstance(native.keep, memoryview):
                native.keep.release()
        else:
            ops._free_host(buffer.ptr)

    def _cuda_array_interface(self, buffer: Buffer) -> dict[str, Any] | None:
        return cuda_array_interface(buffer.device_ptr, buffer.size)

    # -- IPC (docs/aml-contract.md#hip-ipc) ---------------------------------------------------
    def ipc_export(self, buffer: Buffer | int) -> IpcExport:
        """Export a device buffer (or its base pointer) for another process."""
        return export_from(self, self.runtime, self._exports, buffer)

    def export_dmabuf(self, buffer: Buffer | int) -> DmabufHandle:
        """Export a device buffer (or its base pointer) as a dma-buf (docs/dmabuf.md): a new
        fd, the caller's; AMLNotSupported with the reason where the runtime or device
        cannot (DmabufExporter)."""
        return dmabuf_export_from(self, buffer, self.runtime.require(Group.IPC).dmabuf_export)

    def _memcpy(self, dst: int, src: int, size: int) -> None:
        self._alloc.memcpy(dst, src, size)


def _capabilities(runtime: Runtime, kind: Kind) -> Capability:
    """What an area of this kind offers: the runtime's groups that apply to the kind."""
    groups = {Group.ALLOCATION}
    if kind is Kind.MANAGED:
        groups.add(Group.MANAGED)
    elif kind is Kind.DEVICE and runtime.why_missing(Group.IPC) is None:
        groups.add(Group.IPC)
    caps = capabilities(groups, runtime.traits.interfaces)
    if kind is Kind.DEVICE:  # device memory is not host-accessible, pinned or mapped
        caps &= ~(Capability.PINNED | Capability.MAPPED | Capability.BUFFER_PROTOCOL)
    elif kind is Kind.MANAGED:  # host-accessible, but neither pinned nor mapped
        caps &= ~(Capability.PINNED | Capability.MAPPED)
    elif kind is Kind.HOST:
        caps &= ~Capability.MAPPED
    return caps


#: Native records an area keeps (GpuArea._record).
_RECORDS_MAX = 4096
