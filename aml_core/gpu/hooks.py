"""Allocator hooks: CuPy and PyTorch allocate from an aml GPU area or pool.

Written once for the GPU backends whose device pointers CuPy and PyTorch use as their own:
aml-cuda, and aml-hip (with the ROCm builds of CuPy and PyTorch, which keep the CUDA names
``cupy.cuda.set_allocator`` and ``torch.cuda.memory.CUDAPluggableAllocator``; or, in aml's
tests, with the CUDA builds over the HIP double that forwards to CUDA). Each backend exposes
them as methods of its :class:`~aml_core.gpu.backend.GpuBackend`, bound to its name
(``aml_hip.use_with_cupy`` is ``aml_hip.BACKEND.use_with_cupy``, which calls
``use_with_cupy(area, pinned=pinned, backend="hip")`` here).

``use_with_cupy(area, backend=...)`` makes ``cupy.cuda.set_allocator`` take device memory
from ``area`` (a device or managed area of that backend, or an ``aml_core.pool`` over one).
Over a pool, CuPy's ``PythonFunctionAllocator`` calls the compiled ``cupy_malloc`` /
``cupy_free`` of aml_core/_hooks.pyx: a cached block is served by the pool's kernel in C
and CuPy's own memory object is the only one made; the pool's errors are raised to CuPy.
Over any other area each CuPy allocation is an ``area.mmap``, wrapped without a copy in
``cupy.cuda.UnownedMemory`` whose owner keeps the aml buffer alive and unmaps it when CuPy
drops the memory. ``pinned=`` does the same for ``cupy.cuda.set_pinned_memory_allocator``
with a host-kind area::

    pool = aml_core.pool(aml_cuda.create(0))
    hook = aml_cuda.use_with_cupy(pool)
    x = cupy.zeros(1 << 20)                 # from the pool
    del x
    hook.uninstall()                        # CuPy's previous allocators are back

Rules (errors are aml's, with their codes):

* one CuPy hook at a time, whatever its backend (CuPy has one allocator): installing a
  second while one is installed is :class:`~aml_core.errors.AMLBusyError` (EBUSY);
  uninstall the first;
* ``uninstall()`` while CuPy still holds memory from the hook is EBUSY and leaves the
  hook installed; ``uninstall(force=True)`` restores CuPy's allocators anyway, and the
  live arrays keep their buffers, unmapped when CuPy drops them;
* every buffer the hook hands out counts as a view of it (a DLPack export), so closing
  the area while CuPy holds memory detaches the buffers instead of freeing them: the
  memory lives until CuPy drops it;
* an area that is closed or not an aml area is EINVAL / a TypeError at install, and so is
  a GPU area (or a pool over one) of another backend than the hook's.
* without CuPy (or PyTorch for ``use_with_torch``) installed, or when it fails to import,
  installing is :class:`~aml_core.errors.AMLNotSupported` (ENOTSUP) naming the package.

``use_with_torch(area, backend=...)`` does the same for PyTorch through
``CUDAPluggableAllocator`` (see :func:`use_with_torch`): one per process, never removed;
a refusal is raised in PyTorch. For a pool PyTorch uses inside a scope, at any time, see
:mod:`aml_core.gpu.torch_pool` (a ``torch.cuda.MemPool`` over an aml pool).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Mapping
from typing import Any

from .. import _hooks
from ..area import Area
from ..backend_list import label_of
from ..buffer import Buffer
from ..errors import AMLBusyError, AMLError, AMLNotSupported, AMLTypeError, AMLValueError
from ..pool import Pool
from ..specs import Kind
from .area import GpuArea

__all__ = ["CupyHook", "TorchHook", "use_with_cupy", "use_with_torch"]

#: The memory each backend calls its device memory in messages.

_lock = threading.Lock()
_installed: CupyHook | None = None


class _Owner:
    """What CuPy's memory object holds: the aml buffer and one export of it. Dropped by
    CuPy, it releases the export and unmaps the buffer."""

    __slots__ = ("__weakref__", "buf", "capsule", "counted", "hook", "ptr", "size")

    def __init__(self, hook: CupyHook, buf: Buffer) -> None:
        self.counted = False  # in hook.live (set by the hook once it is made)
        self.hook = hook
        self.buf = buf
        self.ptr = buf.ptr
        self.size = buf.size
        # An unconsumed DLPack capsule counts as a view: the area refuses to free the
        # buffer under CuPy and detaches it on close instead.
        self.capsule: Any = buf.__dlpack__()

    def __del__(self) -> None:
        self.capsule = None
        hook = self.hook
        buf = self.buf
        if self.counted:
            hook._tokens.pop()  # atomic: no lock a finalizer could wait on (or re-enter)
        if not buf.freed:
            # A closed area detached the buffer (it was viewed): it is freed with the buffer.
            with contextlib.suppress(AMLError):
                buf.area.munmap(buf)


def _import(module: str, library: str) -> Any:
    """``library``'s module, imported on first use (CuPy and PyTorch are not dependencies
    of aml); :class:`~aml_core.errors.AMLNotSupported` naming the package when it is not
    installed or fails to import."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise AMLNotSupported(
            f"this hook needs {library} (the {module!r} package), which cannot be imported: {exc}"
        ) from exc


class CupyHook:
    """An installed CuPy allocator hook (see the module doc): made by
    :func:`use_with_cupy`, with ``area`` (device memory), ``pinned`` (host memory, or None)
    and ``backend`` (the backend whose hook it is, for messages)."""

    def __init__(self, area: Area, pinned: Area | None, backend: str = "cuda") -> None:
        # Imported here (not a dependency of aml), untyped: CuPy ships no stubs.
        self._cupy: Any = _import("cupy", "CuPy")
        cupy = self._cupy
        self.area = area
        self.pinned = pinned
        self.backend = backend
        # One token per allocation CuPy holds: list append and pop are atomic, so _Owner's
        # finalizer (which may run at any allocation, in this thread too) needs no lock.
        self._tokens: list[None] = []
        self._previous = cupy.cuda.get_allocator()
        self._previous_pinned: Any = None
        self.installed = False
        self.errors: list[BaseException] = []
        #: A pool's compiled allocator (CuPy's PythonFunctionAllocator over the compiled
        #: HookState.cupy_malloc/cupy_free, aml_core/_hooks.pyx): only CuPy's own memory
        #: object per allocation. None: the Python allocator below (any other area).
        self._state: _hooks.HookState | None = None
        self._allocator: Any = None
        memory = getattr(cupy.cuda, "memory", None)
        py_allocator = getattr(memory, "PythonFunctionAllocator", None)
        if isinstance(area, Pool) and py_allocator is not None:
            self._state = _hook_state(self, area)
            self._allocator = py_allocator(self._state.cupy_malloc, self._state.cupy_free)

    @property
    def live(self) -> int:
        """Allocations CuPy still holds from this hook."""
        state = self._state.live if self._state is not None else 0
        return len(self._tokens) + state

    @property
    def allocator(self) -> Any:
        """What CuPy calls for device memory: the compiled allocator's ``malloc`` (a pool),
        else :meth:`malloc`."""
        return self._allocator.malloc if self._allocator is not None else self.malloc

    def _wrap(self, area: Area, size: int) -> tuple[_Owner, Buffer]:
        buf = area.mmap(size)
        try:
            owner = _Owner(self, buf)
        except BaseException:
            area.munmap(buf)
            raise
        self._tokens.append(None)
        owner.counted = True
        return owner, buf

    def malloc(self, size: int) -> Any:
        """The device allocator CuPy calls: a MemoryPointer at the buffer's address."""
        if self._allocator is not None:
            return self._allocator.malloc(size)
        cuda = self._cupy.cuda
        if size == 0:
            return cuda.MemoryPointer(cuda.memory.Memory(0), 0)
        owner, buf = self._wrap(self.area, size)
        device = buf.device if buf.device is not None and buf.device >= 0 else cuda.runtime.getDevice()
        mem = cuda.UnownedMemory(buf.ptr, size, owner, device)
        return cuda.MemoryPointer(mem, 0)

    def malloc_pinned(self, size: int) -> Any:
        """The pinned allocator CuPy calls: a PinnedMemoryPointer to host memory."""
        assert self.pinned is not None
        cuda = self._cupy.cuda
        owner, _buf = self._wrap(self.pinned, max(1, size))
        return cuda.PinnedMemoryPointer(owner, 0)

    def uninstall(self, *, force: bool = False) -> None:
        """Give CuPy its previous allocators back (see the module doc for ``force``)."""
        global _installed
        with _lock:
            if not self.installed:
                raise AMLValueError("this CuPy hook is not installed")
            if self.live and not force:
                raise AMLBusyError(
                    f"CuPy still holds {self.live} allocation(s) from this hook; drop them "
                    "(and free CuPy's caches) first, or uninstall(force=True)"
                )
            cuda = self._cupy.cuda
            cuda.set_allocator(self._previous)
            if self.pinned is not None:
                cuda.set_pinned_memory_allocator(self._previous_pinned)
            self.installed = False
            _installed = None

    def __enter__(self) -> CupyHook:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.installed:
            self.uninstall()

    def __repr__(self) -> str:
        state = "installed" if self.installed else "uninstalled"
        return f"<aml CupyHook ({self.backend}) {state} over {self.area!r}, {self.live} live>"


def _gpu_backend(area: Area) -> str | None:
    """The runtime name of the GPU area under ``area`` (through pools), or None."""
    while isinstance(area, Pool):
        area = area.area
    return area.runtime.traits.name if isinstance(area, GpuArea) else None


def _check_area(area: object, what: str, backend: str, hook: str) -> Area:
    if not isinstance(area, Area):
        raise AMLTypeError(f"{what} must be an aml area or pool, not {type(area).__name__}")
    area._check_open()
    other = _gpu_backend(area)
    if other is not None and other != backend:
        raise AMLValueError(
            f"aml_{backend}.{hook} takes a {backend} area or a pool over one; "
            f"{area!r} is a {other} area (use aml_{other}.{hook})"
        )
    return area


def use_with_cupy(area: Area, *, pinned: Area | None = None, backend: str) -> CupyHook:
    """Make CuPy allocate device memory from ``area`` (and pinned host memory from
    ``pinned``, a host-kind area, if given), for the GPU backend named ``backend``
    (``"cuda"``, ``"hip"``). Returns the hook; ``hook.uninstall()`` (or leaving it as a
    context manager) restores CuPy's previous allocators."""
    global _installed
    area = _check_area(area, "area", backend, "use_with_cupy")
    if area.kind is not Kind.DEVICE and area.kind is not Kind.MANAGED:
        raise AMLValueError(f"CuPy arrays live in device or managed memory, not {area.kind.value} memory")
    if pinned is not None:
        pinned = _check_area(pinned, "pinned", backend, "use_with_cupy")
        if pinned.kind is not Kind.HOST and pinned.kind is not Kind.MAPPED:
            raise AMLValueError(f"pinned memory comes from a host area, not a {pinned.kind.value} one")
    with _lock:
        if _installed is not None:
            raise AMLBusyError(f"{_installed!r} is installed already; uninstall it first")
        hook = CupyHook(area, pinned, backend)
        cuda = hook._cupy.cuda
        if pinned is not None:
            # CuPy has no getter for the pinned allocator: restore its default, the
            # default pinned memory pool.
            hook._previous_pinned = hook._cupy.get_default_pinned_memory_pool().malloc
            cuda.set_pinned_memory_allocator(hook.malloc_pinned)
        cuda.set_allocator(hook.allocator)
        hook.installed = True
        _installed = hook
        return hook


# -- the compiled entry points' slow path ----------------------------------------------------


def _hook_state(hook: Any, pool: Pool) -> _hooks.HookState:
    """The C entry points' state for ``pool``: its kernel serves hits; misses, hand-overs
    and foreign pointers call the pool with the GIL, errors kept in ``hook.errors`` (a
    :class:`TorchHook`, :class:`CupyHook` or ``TorchMemPool``: what has ``errors`` and
    ``backend``). The state refers to the list, not to the hook, so that a hook that
    outlives its use (a MemPool's, whose slot keeps the state) can be collected."""
    errors: list[BaseException] = hook.errors

    def slow_malloc(size: int, device: int, stream: int | None) -> int:
        try:
            return pool._hook_alloc(size, stream)
        except BaseException as exc:  # a callback must not raise: the entry point refuses
            errors.append(exc)
            return 0

    def slow_free(ptr: int, device: int, stream: int | None) -> bool:
        try:
            pool._hook_free(ptr, stream)
            return True
        except BaseException as exc:
            errors.append(exc)
            return False

    def raising_malloc(size: int, device: int) -> int:
        return pool._hook_alloc(size, None)  # CuPy takes the error: raised, not kept

    label = label_of(getattr(hook, "backend", "cuda"))
    return _hooks.HookState(pool._kernel, slow_malloc, slow_free, raising_malloc, errors=errors, label=label)


# -- PyTorch ----------------------------------------------------------------------------------

_torch_hook: TorchHook | None = None


class TorchHook:
    """PyTorch's GPU allocator, replaced by aml areas or pools (see :func:`use_with_torch`,
    which makes it with ``areas``, one per device index or None for "any device", and
    the ``backend`` name). The entry points are compiled (aml_core/_hooks.pyx): a pool's
    hit runs in C without the GIL; ``live`` counts the blocks PyTorch holds, ``errors``
    what the slow path refused (each refusal raised in PyTorch as a ``RuntimeError``
    whose message names the error kept here)."""

    def __init__(self, areas: Mapping[int | None, Area], backend: str = "cuda") -> None:
        self.areas = dict(areas)
        self.area = next(iter(self.areas.values()))
        self.backend = backend
        self._lock = threading.Lock()
        self._bufs: dict[int, Buffer] = {}
        self.errors: list[BaseException] = []
        self.states: dict[int | None, _hooks.HookState] = {
            device: self._state(area) for device, area in self.areas.items()
        }

    def _state(self, area: Area) -> _hooks.HookState:
        if isinstance(area, Pool):
            return _hook_state(self, area)
        streams = isinstance(area, GpuArea)

        def slow_malloc(size: int, device: int, stream: int | None) -> int:
            try:
                buf = area.mmap(size, stream=stream if streams and stream else None)
                with self._lock:
                    self._bufs[buf.device_ptr] = buf
                return buf.device_ptr
            except BaseException as exc:
                self.errors.append(exc)
                return 0

        def slow_free(ptr: int, device: int, stream: int | None) -> bool:
            try:
                with self._lock:
                    buf = self._bufs.pop(ptr, None)
                if buf is None:
                    raise AMLValueError(f"PyTorch freed 0x{ptr:x}, which this hook did not allocate")
                if not buf.freed:  # else the area was closed: the memory went with it
                    area.munmap(buf, stream=stream if stream and area._ordered else None)
                return True
            except BaseException as exc:
                self.errors.append(exc)
                return False

        label = label_of(self.backend)
        return _hooks.HookState(None, slow_malloc, slow_free, errors=self.errors, label=label)

    @property
    def live(self) -> int:
        return sum(state.live for state in self.states.values())

    def _refused(self, what: str, device: int, size: int) -> None:
        """A call for a device no area of this hook serves, or a size PyTorch may not ask."""
        if what == "malloc" and size <= 0:
            return  # PyTorch's own rule: NULL for nothing
        devices = sorted(d for d in self.areas if d is not None)
        self.errors.append(
            AMLValueError(f"PyTorch asked to {what} on device {device}; this hook serves devices {devices}")
        )

    def uninstall(self) -> None:
        """PyTorch cannot swap its allocator back once it has allocated: always
        :class:`~aml_core.errors.AMLNotSupported`; the hook stays for the process."""
        label = label_of(self.backend)
        raise AMLNotSupported(
            f"PyTorch cannot change its {label} allocator once it is in use; the aml hook stays installed"
        )

    def __repr__(self) -> str:
        return f"<aml TorchHook ({self.backend}) over {self.area!r}, {self.live} live>"


def use_with_torch(area: Area | Mapping[int, Area], *, backend: str) -> TorchHook:
    """Make PyTorch allocate GPU memory from ``area`` (a device area of the backend named
    ``backend``, or a pool over one; or a mapping of device index to such an area, one
    pool per device when PyTorch uses several GPUs) through
    ``torch.cuda.memory.CUDAPluggableAllocator`` (the same name in ROCm builds):
    PyTorch's caching is replaced by the area's (a pool is the right area). An area
    bound to one device serves that device only (a request for another is refused, an
    error in ``hook.errors``); an area of the current device serves every device.
    Must run before PyTorch allocates any GPU memory (PyTorch's rule: otherwise
    :class:`~aml_core.errors.AMLBusyError`), and only once per process (EBUSY too); the
    hook cannot be removed (:meth:`TorchHook.uninstall` says so). The entry points are
    compiled C functions (aml_core/_hooks.pyx): a pool serves a cached block with no
    GIL and no Python object. An allocation the area refuses (its limit, ``on_oom``
    declining, the device out of memory) is kept in ``hook.errors`` and raised in
    PyTorch as a ``RuntimeError`` whose message starts as PyTorch's own ("CUDA out of
    memory.", "HIP out of memory.") and names aml's error: the entry point throws a C++
    ``std::runtime_error`` that PyTorch's C++ frames carry to Python (never NULL, which
    PyTorch would not check). For ``torch.OutOfMemoryError`` itself, and a pool that
    can be changed at any time, use a scoped pool (:func:`aml_core.gpu.torch_pool.torch_mem_pool`).
    The hook and its pools live until the process ends: PyTorch frees tensors after the
    interpreter is torn down, and those frees are served in C (or left to the process's
    exit)."""
    global _torch_hook
    given: Mapping[Any, Any] = area if isinstance(area, Mapping) else {None: area}
    if not given:
        raise AMLValueError("use_with_torch needs an area, or a mapping of device index to area")
    areas: dict[int | None, Area] = {}
    for index, given_area in given.items():
        if index is not None and (
            not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < 64
        ):
            raise AMLValueError(f"a device index is an int in 0..63, not {index!r}")
        each = _check_area(given_area, "area", backend, "use_with_torch")
        if each.kind is not Kind.DEVICE and each.kind is not Kind.MANAGED:
            raise AMLValueError(
                f"PyTorch tensors live in device or managed memory, not {each.kind.value} memory"
            )
        bound = each.device if each.device is not None and each.device >= 0 else None
        if index is not None and bound is not None and bound != index:
            raise AMLValueError(f"the area for device {index} allocates on device {bound}")
        device: int | None = bound if index is None else index
        if device in areas:
            raise AMLValueError(f"two areas for device {device}")
        areas[device] = each
    torch: Any = _import("torch", "PyTorch")
    with _lock:
        if _torch_hook is not None:
            raise AMLBusyError(f"{_torch_hook!r} is installed already (PyTorch takes one allocator)")
        hook = TorchHook(areas, backend)
        memory = torch.cuda.memory
        allocator = memory.CUDAPluggableAllocator.__new__(memory.CUDAPluggableAllocator)
        # What CUDAPluggableAllocator.__init__ does with the symbols of a shared library,
        # with the addresses of the compiled entry points instead.
        malloc, free = _hooks.torch_entry_points()
        allocator._allocator = torch._C._cuda_customAllocator(malloc, free)
        try:
            memory.change_current_allocator(allocator)
        except RuntimeError as exc:
            label = label_of(backend)
            raise AMLBusyError(
                f"PyTorch has allocated {label} memory already; call use_with_torch first ({exc})"
            ) from exc
        per_device = {d: st for d, st in hook.states.items() if d is not None}
        _hooks.set_torch(per_device, hook.states.get(None), hook._refused)
        _torch_hook = hook
        return hook
