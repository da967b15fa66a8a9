"""Numba on an aml pool: an External Memory Management (EMM) plugin (numba-cuda's
``numba.cuda.BaseCUDAMemoryManager`` interface, version 1).

``numba_manager(area, pinned=None, backend=...)`` (``aml_cuda.numba_manager``, and
``aml_hip.numba_manager`` for HIP pointers that are CUDA pointers: the HIP double forwarding
to CUDA, as HIP's NVIDIA platform) returns the plugin class, bound to ``area`` (an aml pool,
or a device or managed area of that backend); ``use_with_numba(...)`` also installs it with
``numba.cuda.set_memory_manager``, which must happen before Numba's first CUDA use (Numba
makes one manager per context, when the context is made)::

    pool = aml_core.pool(aml_cuda.create(0), limit=1 << 30)
    aml_cuda.use_with_numba(pool)
    d = numba.cuda.device_array(1 << 20)     # from the pool

What each method of the interface does here:

=====================  ===================================================================
``memalloc(size)``     ``area.mmap(size)``: a block of the pool; the returned
                       ``MemoryPointer``'s finalizer munmaps it when Numba drops it. A
                       refusal is the pool's error (AMLMemoryError, a MemoryError: its
                       limit, ``on_oom``); 0 bytes is AMLValueError, as for every area
                       (Numba allocates nothing for an empty array).
``memhostalloc``       with ``pinned`` (a pinned pool, :class:`~aml_core.gpu.pinned_pool.PinnedPool`):
                       a block of it (``PinnedMemory``; ``MappedMemory`` at the device
                       address when ``mapped``, which needs a pool made with
                       ``mapped=True``); ``portable`` must match the pool's, and
                       write-combined (``wc``) memory is AMLNotSupported (aml's pinned pool
                       does not make it). Without ``pinned``: Numba's own (``cuMemHostAlloc``).
``mempin``             the backend's ``host_register`` (``cudaHostRegister`` /
                       ``hipHostRegister``) of the caller's memory; unregistered when Numba
                       drops the returned object.
``get_memory_info``    a pool with a limit: ``(limit - bytes the pool holds + its cached
                       bytes, limit)``; otherwise the device's free and total memory.
``get_ipc_handle``     aml's IPC export of the block (``area.ipc_export``: a pool block is its
                       slab's handle and offset), in an :class:`IpcHandle` that Numba's
                       callers use as theirs: it pickles, ``open(context)`` maps it in the
                       other process through aml (``ipc_open``), ``close()`` unmaps. Opening
                       a handle that is open already is AMLValueError (EINVAL; Numba's own
                       handle raises ValueError too), as is closing one that is not open.
``initialize()``       checks the area is open (Numba calls it when it makes the context).
``reset()``            releases the pool's cached memory (``trim``) and, as Numba's, Numba's
                       own host allocations; blocks Numba still holds stay until it drops them.
``defer_cleanup()``    a context manager: frees of dropped blocks wait until the outermost
                       one ends (then run in order), with Numba's own deferral for host memory.
``interface_version``  1.
=====================  ===================================================================

Numba (the ``numba-cuda`` package) is imported when the class is made; without it:
AMLNotSupported naming the package.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from .. import checks
from ..area import Area
from ..buffer import Buffer
from ..errors import AMLError, AMLNotSupported, AMLValueError
from ..pool import Pool
from ..specs import Kind
from .area import GpuArea
from .hooks import _check_area, _import
from .pinned_pool import PinnedPool
from .runtime import Group

__all__ = ["numba_manager", "use_with_numba"]

#: The EMM plugin interface version this plugin implements.
INTERFACE_VERSION = 1
_classes: dict[type, type] = {}
_classes_lock = threading.Lock()


def _cuda() -> Any:
    return _import("numba.cuda", "Numba's CUDA target (numba-cuda)")


def _proxy(context: Any) -> Any:
    return None if context is None else weakref.proxy(context)


def _base_class(cuda: Any) -> type:
    """The plugin class over Numba's ``HostOnlyCUDAMemoryManager`` (made once per Numba)."""
    base = cuda.HostOnlyCUDAMemoryManager
    with _classes_lock:
        made = _classes.get(base)
        if made is None:
            made = _classes[base] = _make_class(cuda, base)
        return made


def _make_class(cuda: Any, base: type) -> type:
    ipc_base: type = cuda.IpcHandle
    driver: Any = importlib.import_module("numba.cuda.cudadrv.driver")

    class AmlMappedMemory(driver.MappedMemory):  # type: ignore[misc]
        """Numba's MappedMemory at a device address aml's runtime gave
        (``cudaHostGetDevicePointer`` / ``hipHostGetDevicePointer``): Numba's own asks the
        CUDA driver itself, which a HIP runtime is not."""

        def __init__(
            self, context: Any, host: int, device: int, size: int, owner: Any = None, finalizer: Any = None
        ) -> None:
            self.owned = owner
            self.host_pointer = host
            self._bufptr_ = host
            driver.AutoFreePointer.__init__(self, context, ctypes.c_void_p(device), size, finalizer=finalizer)
            self.handle = host
            self._buflen_ = self.size

    class AmlIpcHandle(ipc_base):  # type: ignore[misc]
        """Numba's IpcHandle over aml's IPC handle (see the module doc)."""

        def __init__(self, base: Any, handle: Any, size: int, backend: str, offset: int = 0) -> None:
            super().__init__(base, handle, size, source_info=None, offset=offset)
            self.backend = backend
            self._buffer: Buffer | None = None

        def open(self, context: Any = None) -> Any:
            if self._buffer is not None:
                raise AMLValueError("this Numba IPC handle is open already; close() it before opening again")
            module = importlib.import_module(f"aml_{self.backend}")
            buf = module.ipc_open(self.handle)
            self._buffer = buf
            self._impl = buf  # what Numba's handle checks to tell it is open
            address = buf.device_ptr + self.offset  # the block's address, then the view's offset
            return cuda.MemoryPointer(_proxy(context), ctypes.c_void_p(address), self.size)

        open_direct = open

        def open_staged(self, context: Any = None) -> Any:
            raise AMLNotSupported("aml's IPC maps the exporter's memory directly; there is no staged open")

        def close(self) -> None:
            buf = self._buffer
            if buf is None:
                raise AMLValueError("this Numba IPC handle is not open")
            self._buffer = self._impl = None
            buf.area.munmap(buf)

        def __reduce__(self) -> tuple[Any, ...]:
            return (_rebuild_handle, (self.handle, self.size, self.backend, self.offset))

    class AmlNumbaManager(base):  # type: ignore[misc]
        """Numba's EMM plugin over an aml area (bound by :func:`numba_manager`)."""

        area: Area
        pinned: Area | None = None
        backend: str = "cuda"

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._lock = threading.RLock()  # a finalizer may run in a thread holding it
            self._bufs: dict[int, Buffer] = {}
            self._deferring = 0
            self._pending: list[Buffer] = []
            #: Frees that failed in a finalizer (nothing may raise there).
            self.errors: list[BaseException] = []

        # -- the interface ---------------------------------------------------------------
        @property
        def interface_version(self) -> int:
            return INTERFACE_VERSION

        def initialize(self) -> None:
            self.area._check_open()

        def memalloc(self, size: int) -> Any:
            buf = self.area.mmap(size)
            with self._lock:
                self._bufs[buf.device_ptr] = buf
            finalizer = _finalizer(self, buf.device_ptr)
            return cuda.MemoryPointer(
                _proxy(self.context), ctypes.c_void_p(buf.device_ptr), size, finalizer=finalizer
            )

        def memhostalloc(
            self, size: int, mapped: bool = False, portable: bool = False, wc: bool = False
        ) -> Any:
            pinned = self.pinned
            if pinned is None:
                return super().memhostalloc(size, mapped=mapped, portable=portable, wc=wc)
            if wc:
                raise AMLNotSupported("aml's pinned pool does not make write-combined memory (wc=True)")
            if isinstance(pinned, PinnedPool):
                if mapped and not pinned.mapped:
                    raise AMLValueError("mapped host memory needs a pinned pool made with mapped=True")
                if portable and not pinned.portable:
                    raise AMLValueError("portable host memory needs a pinned pool made with portable=True")
            buf = pinned.mmap(checks.size(size, "size"))
            finalizer = _host_finalizer(self, buf)
            if mapped:
                device = buf.device_ptr
                if isinstance(pinned, PinnedPool):
                    device = pinned.runtime.host_device_pointer(buf.ptr)
                mem = AmlMappedMemory(
                    _proxy(self.context),
                    buf.ptr,
                    device,
                    buf.size,
                    finalizer=_forget(self, buf.ptr, finalizer),
                )
                self.allocations[buf.ptr] = mem  # Numba's rule: the manager holds mapped memory
                return mem.own()  # until the owned pointers' count drops to 0
            return cuda.PinnedMemory(_proxy(self.context), buf.ptr, buf.size, finalizer=finalizer)

        def mempin(self, owner: Any, pointer: Any, size: int, mapped: bool = False) -> Any:
            runtime = _runtime_of(self.area)
            ptr = int((pointer.value or 0) if isinstance(pointer, ctypes.c_void_p) else pointer)
            runtime.host_register(ptr, size, portable=False, mapped=bool(mapped))

            def unpin() -> None:
                try:
                    runtime.host_unregister(ptr)
                except AMLError as exc:
                    self.errors.append(exc)

            if mapped:
                device = runtime.host_device_pointer(ptr)
                mem = AmlMappedMemory(
                    _proxy(self.context), ptr, device, size, owner=owner, finalizer=_forget(self, ptr, unpin)
                )
                self.allocations[ptr] = mem
                return mem.own()
            return cuda.PinnedMemory(_proxy(self.context), ptr, size, owner=owner, finalizer=unpin)

        def get_memory_info(self) -> Any:
            area = self.area
            if isinstance(area, Pool) and area.limit is not None:
                s = area.pool_stats
                free = max(0, area.limit - s.bytes_reserved + s.bytes_cached)
                return cuda.MemoryInfo(free=free, total=area.limit)
            below: Any = area.area if isinstance(area, Pool) else area
            total = below.total_memory() if hasattr(below, "total_memory") else None
            free_now = below.free_memory() if hasattr(below, "free_memory") else None
            if total is None or free_now is None:
                raise AMLNotSupported(f"{area!r} cannot tell its free and total memory")
            return cuda.MemoryInfo(free=free_now, total=total)

        def get_ipc_handle(self, memory: Any) -> Any:
            address = int(memory.device_pointer_value or 0)
            with self._lock:
                buf = next(
                    (b for p, b in self._bufs.items() if p <= address < p + b.size),
                    None,
                )
            if buf is None:
                raise AMLValueError(f"0x{address:x} is not memory this Numba manager allocated")
            exporter = getattr(self.area, "ipc_export", None)
            if exporter is None:
                raise AMLNotSupported(f"{self.area!r} cannot share its memory by IPC handle")
            handle = exporter(buf).handle
            offset = address - buf.device_ptr
            return AmlIpcHandle(memory, handle, memory.size, self.backend, offset=offset)

        def reset(self) -> None:
            super().reset()
            if isinstance(self.area, Pool) and not self.area.closed:
                self.area.trim()

        @contextlib.contextmanager
        def defer_cleanup(self) -> Iterator[None]:
            with super().defer_cleanup():
                with self._lock:
                    self._deferring += 1
                try:
                    yield
                finally:
                    with self._lock:
                        self._deferring -= 1
                        run = self._pending if self._deferring == 0 else []
                        if run:
                            self._pending = []
                    for buf in run:
                        self._free(buf)

        # -- frees ---------------------------------------------------------------------------
        def _release(self, ptr: int) -> None:
            """A finalizer: the block of ``ptr`` goes back to the area (or waits for the end
            of a ``defer_cleanup`` block)."""
            with self._lock:
                buf = self._bufs.pop(ptr, None)
                if buf is not None and self._deferring:
                    self._pending.append(buf)
                    return
            if buf is not None:
                self._free(buf)

        def _free(self, buf: Buffer) -> None:
            try:
                if not buf.freed:  # a closed area freed (or detached) it already
                    buf.area.munmap(buf)
            except AMLError as exc:
                self.errors.append(exc)

        @property
        def live(self) -> int:
            """Blocks Numba holds (and frees waiting for a defer_cleanup block)."""
            with self._lock:
                return len(self._bufs) + len(self._pending)

    AmlNumbaManager.IpcHandle = AmlIpcHandle
    return AmlNumbaManager


def _finalizer(manager: Any, ptr: int) -> Any:
    ref = weakref.ref(manager)

    def free() -> None:
        alive = ref()
        if alive is not None:
            alive._release(ptr)

    return free


def _forget(manager: Any, key: int, then: Any) -> Any:
    """A mapped allocation's finalizer: out of the manager's ``allocations``, then ``then``."""

    def free() -> None:
        manager.allocations.pop(key, None)
        then()

    return free


def _host_finalizer(manager: Any, buf: Buffer) -> Any:
    def free() -> None:
        manager._free(buf)

    return free


def _runtime_of(area: Area) -> Any:
    below = area
    while isinstance(below, Pool):
        below = below.area
    if not isinstance(below, GpuArea):
        raise AMLNotSupported(f"{area!r} has no GPU runtime to pin host memory with")
    return below.runtime.require(Group.ALLOCATION)


def _rebuild_handle(handle: Any, size: int, backend: str, offset: int) -> Any:
    """Unpickle an :class:`AmlIpcHandle` (in the importing process)."""
    cls: Any = _base_class(_cuda())
    cls = cls.IpcHandle
    return cls(None, handle, size, backend, offset=offset)


def numba_manager(area: Area, *, pinned: Area | None = None, backend: str) -> type:
    """Numba's EMM plugin class over ``area`` (a device or managed area of the backend named
    ``backend``, or a pool over one) and, for ``memhostalloc``, ``pinned`` (a host-kind
    area: a pinned pool), for ``numba.cuda.set_memory_manager`` (see the module doc)."""
    area = _check_area(area, "area", backend, "numba_manager")
    if area.kind is not Kind.DEVICE and area.kind is not Kind.MANAGED:
        raise AMLValueError(
            f"Numba device arrays live in device or managed memory, not {area.kind.value} memory"
        )
    if pinned is not None:
        pinned = _check_area(pinned, "pinned", backend, "numba_manager")
        if pinned.kind is not Kind.HOST and pinned.kind is not Kind.MAPPED:
            raise AMLValueError(f"pinned memory comes from a host area, not a {pinned.kind.value} one")
    base = _base_class(_cuda())
    return type("AmlNumbaManager", (base,), {"area": area, "pinned": pinned, "backend": backend})


def use_with_numba(area: Area, *, pinned: Area | None = None, backend: str) -> type:
    """:func:`numba_manager`, installed with ``numba.cuda.set_memory_manager`` (before
    Numba's first CUDA use: Numba makes the manager with each context); returns the class."""
    cls = numba_manager(area, pinned=pinned, backend=backend)
    _cuda().set_memory_manager(cls)
    return cls
