"""GPU backends built from a runtime, in two layers:

* :class:`BackendBase`, what every GPU backend has (aml-cuda, aml-hip, aml-ze, aml-hsa and a
  third-party one): the lazily loaded runtime and its devices, areas by kind
  (:meth:`~BackendBase.create_area`, the ``aml_core.area(kind=...)`` factory), the probe and
  the capabilities it reports, IPC import and virtual memory (where the runtime provides
  their groups: without them they raise ENOTSUP with the reason);
* :class:`GpuBackend`, the CUDA/HIP layer on top: AML's flag-word areas
  (``aml_area_<name>_create``, ``aml_area_<name>_destroy``, the default areas), streams,
  pointer attributes, peer access, the pinned pool and the framework functions bound to
  the backend (the CuPy and PyTorch allocator hooks, PyTorch's scoped pools, CuPy scopes,
  CuPy's pinned memory, Numba's memory manager): the backends whose device pointers CuPy,
  PyTorch and Numba use as their own.

``aml_cuda`` and ``aml_hip`` are each one :class:`GpuBackend` over their own runtime, and
their public functions *are* its bound methods (``aml_hip.create is aml_hip.BACKEND.create``):
the API is written here once, and a backend package only names its backend. aml-ze's and
aml-hsa's backends derive from :class:`BackendBase` and add their own area constructors.
The plugin descriptor is in :mod:`.plugin`.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from .. import checks
from ..area import Area
from ..buffer import Buffer
from ..descriptor import ProbeResult
from ..errors import AMLError, AMLNotSupported, AMLTypeError, AMLValueError
from ..specs import Capability, Kind
from ._vmm_api import close_dropped
from .area import GpuArea
from .devices import usable_device_count, usable_runtime
from .flags import GpuFlags, flags_for_kind
from .ipc import IpcHandle, IpcImportArea
from .peer import copy_peer
from .plugin import GPU_AREA_OPTIONS, GPU_KINDS
from .runtime import Group, PeerOps, PointerAttributes, Runtime
from .stream import Stream
from .vmm import VirtualMemory

if TYPE_CHECKING:
    from ..pool import Pool
    from .cupy_scope import CupyPinnedHook, CupyScope
    from .hooks import CupyHook, TorchHook
    from .pinned_pool import PinnedPool
    from .torch_pool import TorchMemPool

__all__ = ["HOOKS_MODULE_NAMES", "BackendBase", "GpuBackend"]

#: What the ``hooks`` modules of aml-cuda and aml-hip had (deprecated in 0.3, removed in 0.4),
#: each old name with its place in the package now (``aml_cuda.hooks.use_with_cupy`` is
#: ``aml_cuda.use_with_cupy``, ``BACKEND_NAME`` is ``aml_cuda.BACKEND.name``; the modules
#: read them with :func:`aml_core.lazy.moved_names`): the hooks are :class:`GpuBackend`'s
#: methods, declared for both packages in ``aml_core/gpu/exports.pyi``.
HOOKS_MODULE_NAMES: Final[Mapping[str, str]] = {
    "BACKEND_NAME": "BACKEND.name",
    "CupyHook": "CupyHook",
    "TorchHook": "TorchHook",
    "TorchMemPool": "TorchMemPool",
    "torch_mem_pool": "torch_mem_pool",
    "use_with_cupy": "use_with_cupy",
    "use_with_torch": "use_with_torch",
}

#: The runtime class of a backend (``CudaRuntime``, ``ZeRuntime``...).
RuntimeT = TypeVar("RuntimeT", bound=Runtime)
#: The area class a backend's :meth:`~BackendBase.create_area` returns.
AreaT = TypeVar("AreaT", bound=Area)


class BackendBase(abc.ABC, Generic[RuntimeT, AreaT]):
    """What every GPU backend has. ``load_runtime`` is called lazily, once; it raises
    :class:`~aml_core.errors.AMLNotSupported` when the native library or driver is
    missing. A subclass implements :meth:`create_area` (the areas it provides, by kind)
    and adds its own area constructors."""

    def __init__(
        self,
        name: str,
        load_runtime: Callable[[], RuntimeT],
        *,
        description: str = "",
        precheck: Callable[[], str | None] | None = None,
    ) -> None:
        """``name`` — the registered backend name; ``load_runtime`` — called once, on
        first use, to load the runtime (raises ``AMLNotSupported`` when the library or
        driver is missing); ``description`` — one line for ``aml info``; ``precheck`` — a
        cheap test run by :meth:`probe` before loading the runtime, returning why the
        backend cannot work here, or None."""
        self.name = name
        self.description = description
        self._load_runtime = load_runtime
        self._precheck = precheck
        self._runtime: RuntimeT | None = None
        self._lock = threading.Lock()
        self._imports: IpcImportArea | None = None
        #: The shared areas of :meth:`_default`, by the key their backend gives them.
        self._defaults: dict[Hashable, AreaT] = {}

    @property
    def runtime(self) -> RuntimeT:
        """The loaded runtime (loads it on first use)."""
        with self._lock:
            if self._runtime is None:
                self._runtime = self._load_runtime()
            return self._runtime

    def _usable_runtime(self) -> RuntimeT:
        """The runtime of a call that needs a device: a missing library, driver or device
        raises :class:`AMLNotSupported` worded as everywhere (:mod:`.devices`)."""
        rt = usable_runtime(self.name, lambda: self.runtime)
        usable_device_count(rt)
        return rt

    def reset(self) -> None:
        """Forget the loaded runtime and the cached areas (tests switch libraries)."""
        with self._lock:
            imports, self._imports = self._imports, None
            defaults = list(self._defaults.values())
            self._defaults.clear()
            runtime, self._runtime = self._runtime, None
        if imports is not None:
            imports.close()
        for area in defaults:
            area.close()
        if runtime is not None:
            try:
                close_dropped(runtime)  # virtual memory collected unclosed whose release failed
            finally:
                self._unload(runtime)

    def _unload(self, runtime: RuntimeT) -> None:
        """Release what a forgotten runtime holds itself (:meth:`reset`, after its areas
        are closed); nothing by default."""

    def _default(self, key: Hashable, make: Callable[[], AreaT]) -> AreaT:
        """The shared area under ``key``, made by ``make()`` on first use or once closed
        (AML's default areas: callers must not close them)."""
        with self._lock:
            area = self._defaults.get(key)
        if area is None or area.closed:
            area = make()
            with self._lock:
                self._defaults[key] = area
        return area

    # -- areas ---------------------------------------------------------------------------
    @abc.abstractmethod
    def create_area(self, kind: Kind, device: int | None = None, **options: Any) -> AreaT:
        """The ``aml_core.area(kind=..., backend=<name>)`` factory: a new area of ``kind``
        on ``device`` (None: the backend's default device); ``options`` are the backend's
        own (unknown ones: :class:`~aml_core.errors.AMLTypeError`; a kind the backend does
        not provide: :class:`~aml_core.errors.AMLNotSupported`)."""

    @staticmethod
    def destroy(area: Area) -> None:
        """``aml_area_<name>_destroy``: free whatever the area still holds (the same as
        ``area.close()``). Idempotent."""
        area.close()

    # -- IPC and virtual memory ----------------------------------------------------------
    def ipc_open(self, handle: IpcHandle) -> Buffer:
        """Open an IPC handle exported by another process: maps the device memory with
        lazy peer access; opening the same handle again returns the same buffer (close it
        as many times). Close before the exporter frees. A runtime without the IPC group
        raises :class:`AMLNotSupported` with the reason."""
        rt = self.runtime
        with self._lock:
            if self._imports is None or self._imports.closed:
                self._imports = IpcImportArea(rt)
            imports = self._imports
        return imports.open(handle)

    def ipc_close(self, buffer: Buffer) -> None:
        """Close one open of an imported buffer (the native close on the last)."""
        buffer.area.munmap(buffer)

    def virtual_memory(self, device: int = 0) -> VirtualMemory:
        """The virtual-memory API and area of a device (reserve, create, map, access,
        export/import a POSIX fd, retain, properties, granularity); close it when done."""
        rt = usable_runtime(self.name, lambda: self.runtime)
        device = checks.c_int(device, "device")
        count = usable_device_count(rt)
        if not 0 <= device < count:
            raise AMLValueError(f"device {device!r} is not in 0..{count - 1}")
        return VirtualMemory(rt, device)

    # -- plugin --------------------------------------------------------------------------
    def probe(self) -> ProbeResult:
        """Whether the backend is usable here, and why not (never raises): loads the
        runtime, counts devices and reads their properties."""
        if self._runtime is None and self._precheck is not None:
            why = self._precheck()
            if why:
                return ProbeResult.unavailable(why)
        versions: dict[str, str] = {}  # what was found, also when no device is
        try:
            rt = self.runtime
            versions = dict(rt.traits.versions)
            count = rt.device_count()
            if count <= 0:
                return ProbeResult(available=False, reason=f"no {self.name} device found", versions=versions)
            devices = tuple(rt.device_info(i) for i in range(count))
            if isinstance(rt, Runtime):  # a duck-typed runtime reports no topology
                devices = rt.device_topology(devices)
        except AMLError as exc:
            return ProbeResult(available=False, reason=str(exc), versions=versions)
        caps = Capability.NONE
        for dev in devices:
            caps |= dev.capabilities
        return ProbeResult(
            available=True,
            detail=f"{count} device(s)",
            devices=devices,
            capabilities=caps,
            versions=versions,
        )


class GpuBackend(BackendBase[RuntimeT, GpuArea]):
    """The CUDA/HIP layer: AML's flag-word areas (:meth:`create`, the default and unified
    areas), streams, pointer attributes and peer access, over a runtime that provides the
    ``ALLOCATION`` group (and ``MANAGED``, ``STREAMS``, ``PEER`` for what needs them)."""

    #: The runtime's PEER group, once asked for (:meth:`_peer_ops`).
    _peer: PeerOps | None = None

    def _unload(self, runtime: RuntimeT) -> None:
        self._peer = None

    # -- AML area API --------------------------------------------------------------------
    def create(self, device: int = -1, flags: int | GpuFlags = GpuFlags.DEFAULT) -> GpuArea:
        """``aml_area_cuda_create`` / ``aml_area_hip_create(&area, device, flags)``: a new
        area; close it (or :meth:`destroy` it) when done.

        ``device`` is a device index, or negative for the current device at mmap time.
        Errors: no usable driver or device → ENOTSUP
        (:class:`~aml_core.errors.AMLNotSupported`, "no usable <backend> device: ...");
        the device count cannot be read for another reason → FAILURE
        (:class:`~aml_core.errors.AMLFailure`); ``device`` >= the device count → EINVAL;
        unknown flag bits → EINVAL (docs/aml-contract.md#hip-area).
        """
        return GpuArea(usable_runtime(self.name, lambda: self.runtime), device, flags)

    def _flags_default(self, flags: GpuFlags) -> GpuArea:
        return self._default(
            flags, lambda: GpuArea(usable_runtime(self.name, lambda: self.runtime), -1, flags)
        )

    def default_area(self) -> GpuArea:
        """``aml_area_cuda`` / ``aml_area_hip``: device memory on the current device,
        visible by a single device, not mapped on the host (shared: do not close it)."""
        return self._flags_default(GpuFlags.DEFAULT)

    def unified_area(self) -> GpuArea:
        """``aml_area_cuda_unified`` / ``aml_area_hip_unified``: managed memory on the
        current device (shared: do not close it)."""
        return self._flags_default(GpuFlags.ALLOC_UNIFIED)

    def create_area(
        self, kind: Kind, device: int | None = None, *, all_devices: bool = False, **options: object
    ) -> GpuArea:
        """The ``aml_core.area(kind=...)`` factory: DEVICE → DEFAULT, HOST → ALLOC_HOST,
        MANAGED → ALLOC_UNIFIED, MAPPED → ALLOC_MAPPED | ALLOC_HOST; ``all_devices``
        adds ALLOC_GLOBAL."""
        if options:
            raise AMLTypeError(
                f"unknown {self.name} area options {sorted(options)}; allowed: {sorted(GPU_AREA_OPTIONS)}"
            )
        if kind not in GPU_KINDS:  # pragma: no cover - the registry checks kinds
            raise AMLNotSupported(f"{self.name} does not provide {kind.value} memory")
        return self.create(-1 if device is None else device, flags_for_kind(kind, all_devices=all_devices))

    def pinned_pool(self, node: int | None = None, **settings: Any) -> PinnedPool:
        """An exact-size pinned host pool on NUMA ``node`` (None: the calling thread's),
        registered with this runtime (:class:`~aml_core.gpu.pinned_pool.PinnedPool`, whose
        keywords ``settings`` are: granule, max_cached, limit, portable, mapped,
        allow_cpu_less); close it when done."""
        from .pinned_pool import PinnedPool

        return PinnedPool(self._usable_runtime().require(Group.ALLOCATION), node, **settings)

    # -- frameworks: the allocator hooks, scoped pools, Numba (docs/frameworks.md) -------
    def use_with_cupy(self, area: Area, *, pinned: Area | None = None) -> CupyHook:
        """Make CuPy allocate device memory from ``area`` (a device or managed area of this
        backend, or a pool over one) and pinned host memory from ``pinned`` (a host-kind
        area), if given (:func:`aml_core.gpu.hooks.use_with_cupy`). ``hook.uninstall()``,
        or leaving it as a context manager, restores CuPy's previous allocators."""
        from . import hooks

        return hooks.use_with_cupy(area, pinned=pinned, backend=self.name)

    def use_with_torch(self, area: Area | Mapping[int, Area]) -> TorchHook:
        """Make PyTorch allocate GPU memory from ``area`` (a device area of this backend or a
        pool over one; or a mapping of device index to such areas) through
        ``torch.cuda.memory.CUDAPluggableAllocator``, before PyTorch's first GPU
        allocation, once per process (:func:`aml_core.gpu.hooks.use_with_torch`)."""
        from . import hooks

        return hooks.use_with_torch(area, backend=self.name)

    def torch_mem_pool(self, pool: Pool, *, device: int | None = None) -> TorchMemPool:
        """A ``torch.cuda.MemPool`` over ``pool`` (a device or managed pool of this backend),
        for ``with mp.use():`` / ``torch.cuda.use_mem_pool(mp.mempool)`` at any time,
        several at once; ``mp.close()`` gives its memory back to the pool
        (:mod:`aml_core.gpu.torch_pool`)."""
        from . import torch_pool

        return torch_pool.torch_mem_pool(pool, device=device, backend=self.name)

    def cupy_scope(self, area: Area) -> CupyScope:
        """A scope (``with scope:``) in which CuPy allocates from ``area`` (a device or
        managed area of this backend, or a pool over one) in the calling thread
        (:func:`aml_core.gpu.cupy_scope.cupy_scope`)."""
        from . import cupy_scope

        return cupy_scope.cupy_scope(area, backend=self.name)

    def use_pinned_with_cupy(self, pinned: Area) -> CupyPinnedHook:
        """Make CuPy take pinned host memory from ``pinned`` (this backend's
        :meth:`pinned_pool`) (:func:`aml_core.gpu.cupy_scope.use_pinned_with_cupy`)."""
        from . import cupy_scope

        return cupy_scope.use_pinned_with_cupy(pinned, backend=self.name)

    def numba_manager(self, area: Area, *, pinned: Area | None = None) -> type:
        """Numba's External Memory Management plugin class over ``area`` (and ``pinned`` for
        its pinned host memory) (:func:`aml_core.gpu.numba_emm.numba_manager`)."""
        from . import numba_emm

        return numba_emm.numba_manager(area, pinned=pinned, backend=self.name)

    def use_with_numba(self, area: Area, *, pinned: Area | None = None) -> type:
        """:meth:`numba_manager` installed with ``numba.cuda.set_memory_manager`` (before
        Numba's first CUDA use) (:func:`aml_core.gpu.numba_emm.use_with_numba`)."""
        from . import numba_emm

        return numba_emm.use_with_numba(area, pinned=pinned, backend=self.name)

    # -- streams and pointers ------------------------------------------------------------
    def stream(self, *, non_blocking: bool = False) -> Stream:
        """A new stream (``cudaStreamCreateWithFlags`` / ``hipStreamCreateWithFlags``);
        close it when done. No usable driver or device: :class:`AMLNotSupported`, as
        :meth:`create` says it."""
        return Stream(self._usable_runtime(), non_blocking=non_blocking)

    def pointer_attributes(self, ptr: int | Buffer) -> PointerAttributes:
        """``cudaPointerGetAttributes`` / ``hipPointerGetAttributes`` of an address or a
        buffer's ``ptr``."""
        address = ptr.ptr if isinstance(ptr, Buffer) else ptr
        return self.runtime.require(Group.ALLOCATION).pointer_attributes(address)

    # -- several devices: peer access and copies (docs/aml-contract.md#peer-access) -------
    def _peer_ops(self) -> PeerOps:
        """The runtime's PEER group, once a device was found (kept until :meth:`reset`:
        ``copy_peer`` of small buffers should not count devices every time)."""
        ops = self._peer
        if ops is None:
            ops = self._peer = self._usable_runtime().require(Group.PEER)
        return ops

    def can_access_peer(self, device: int, peer: int) -> bool:
        """``cudaDeviceCanAccessPeer`` / ``hipDeviceCanAccessPeer``: whether ``device``
        can reach ``peer``'s memory directly once peer access is enabled (False for a
        device and itself)."""
        return self._peer_ops().can_access_peer(device, peer)

    def enable_peer_access(self, peer: int, device: int | None = None) -> bool:
        """Let ``device`` (None or negative: the caller's current device, which is
        restored) reach ``peer``'s memory. Idempotent: True if this call enabled it,
        False if it was enabled already. A pair without a peer path is ENOTSUP."""
        return self._peer_ops().enable_peer_access(peer, device)

    def disable_peer_access(self, peer: int, device: int | None = None) -> bool:
        """Stop ``device`` (None or negative: the current device) reaching ``peer``'s
        memory. Idempotent: True if this call disabled it, False if it was not enabled."""
        return self._peer_ops().disable_peer_access(peer, device)

    def copy_peer(
        self, dst: Buffer, src: Buffer, size: int | None = None, *, dst_offset: int = 0, src_offset: int = 0
    ) -> None:
        """Copy ``size`` bytes (default: all of ``src`` after ``src_offset``) between two
        device buffers, each on its own device (``cudaMemcpyPeer`` / ``hipMemcpyPeer``);
        returns when the bytes are copied. See :func:`aml_core.gpu.peer.copy_peer`."""
        copy_peer(self._peer_ops(), dst, src, size, dst_offset=dst_offset, src_offset=src_offset)
