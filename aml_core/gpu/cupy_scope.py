"""Scoped CuPy allocation from an aml pool, and CuPy's pinned memory from an aml pinned pool.

``cupy_scope(area, backend=...)`` (``aml_cuda.cupy_scope``, ``aml_hip.cupy_scope``) is a
reusable context manager: inside ``with scope:`` CuPy allocates device memory from
``area`` (an aml pool, or a device or managed area of that backend) through
``cupy.cuda.using_allocator``, which CuPy keeps per thread. So the scope is the calling
thread's only, may be nested (an inner scope or CuPy's own ``using_allocator`` wins until
it ends) and may be entered by several threads at once, each for itself; outside it
CuPy's allocator (process-wide, or the enclosing scope) is untouched::

    pool = aml_core.pool(aml_cuda.create(0), limit=1 << 30)
    scope = aml_cuda.cupy_scope(pool)
    with scope:
        x = cupy.zeros(1 << 20)             # from the pool, in this thread
    y = cupy.zeros(1 << 20)                 # CuPy's own pool again

Arrays made in the scope keep their memory after it ends; it goes back to the pool when
CuPy drops them (``scope.live`` counts them). Over a pool, the allocator is the compiled
one of aml_core/_hooks.pyx (a cached block served in C, CuPy's memory object the only one
made) and a refusal is the pool's error raised in CuPy's call (``MemoryError`` for
ENOMEM: never a null pointer); over any other area each allocation is one ``area.mmap``.
Unlike :func:`~aml_core.gpu.hooks.use_with_cupy` (one process-wide hook at a time), any
number of scopes may exist over any areas; leaving one by an exception restores the
allocator before the exception goes on.

``use_pinned_with_cupy(pinned, backend=...)`` makes ``cupy.cuda.set_pinned_memory_allocator``
take pinned host memory from ``pinned`` (a host-kind area: an
:class:`~aml_core.gpu.pinned_pool.PinnedPool`, or a pool over a pinned area) for the
whole process (CuPy has no scoped pinned allocator); ``hook.uninstall()`` gives CuPy its
default pinned memory pool back, EBUSY while CuPy holds blocks of it (``force=True`` anyway).
"""

from __future__ import annotations

import threading
from typing import Any, cast

from ..area import Area
from ..errors import AMLBusyError, AMLValueError
from ..specs import Kind
from . import hooks
from .hooks import CupyHook, _check_area, _import, _Owner

__all__ = ["CupyPinnedHook", "CupyScope", "cupy_scope", "use_pinned_with_cupy"]


class CupyScope:
    """CuPy's per-thread allocator inside ``with scope:`` (see the module doc): made by
    :func:`cupy_scope` over ``area``. ``allocator`` is what CuPy calls, ``live`` the
    allocations CuPy still holds from it, ``errors`` what its free path refused."""

    def __init__(self, area: Area, backend: str) -> None:
        # A CuPy hook that is never installed: the allocator and its bookkeeping (the
        # compiled pool allocator, or the Python one over any area) are written once there.
        self._hook = CupyHook(area, None, backend)
        self._cupy = self._hook._cupy
        self.area = area
        self.backend = backend
        self._local = threading.local()  # this thread's entered using_allocator contexts

    @property
    def allocator(self) -> Any:
        return self._hook.allocator

    @property
    def live(self) -> int:
        return self._hook.live

    @property
    def errors(self) -> list[BaseException]:
        return self._hook.errors

    @property
    def active(self) -> bool:
        """Whether the calling thread is inside this scope."""
        return bool(getattr(self._local, "stack", None))

    def __enter__(self) -> CupyScope:
        self.area._check_open()
        context = self._cupy.cuda.using_allocator(self.allocator)
        context.__enter__()
        stack: list[Any] = self._local.__dict__.setdefault("stack", [])
        stack.append(context)
        return self

    def __exit__(self, *exc: Any) -> None:
        stack: list[Any] = getattr(self._local, "stack", [])
        if not stack:
            raise AMLValueError("this CuPy scope was not entered in this thread")
        stack.pop().__exit__(*exc)  # the allocator before the scope; the exception goes on

    def __repr__(self) -> str:
        return f"<aml CupyScope ({self.backend}) over {self.area!r}, {self.live} live>"


def cupy_scope(area: Area, *, backend: str) -> CupyScope:
    """A scope in which CuPy allocates device memory from ``area`` (a device or managed
    area of the GPU backend named ``backend``, or a pool over one), per thread (see the
    module doc). CuPy not importable: AMLNotSupported; a closed area, one of another
    backend, or host memory: AMLValueError."""
    area = _check_area(area, "area", backend, "cupy_scope")
    if area.kind is not Kind.DEVICE and area.kind is not Kind.MANAGED:
        raise AMLValueError(f"CuPy arrays live in device or managed memory, not {area.kind.value} memory")
    return CupyScope(area, backend)


_pinned_lock = threading.Lock()
_pinned_installed: CupyPinnedHook | None = None


class CupyPinnedHook:
    """CuPy's pinned memory allocator, from an aml host-kind area (made by
    :func:`use_pinned_with_cupy`): ``live`` counts the blocks CuPy holds."""

    def __init__(self, pinned: Area, backend: str) -> None:
        self._cupy: Any = _import("cupy", "CuPy")
        self.pinned = pinned
        self.backend = backend
        self._tokens: list[None] = []  # one per block CuPy holds (what _Owner counts)
        self.installed = False

    @property
    def live(self) -> int:
        return len(self._tokens)

    def malloc(self, size: int) -> Any:
        """What CuPy calls: a PinnedMemoryPointer to a block of the pinned area (a
        refusal is the area's error, raised to CuPy)."""
        buf = self.pinned.mmap(max(1, size))
        try:
            owner = _Owner(cast(CupyHook, self), buf)
        except BaseException:
            self.pinned.munmap(buf)
            raise
        self._tokens.append(None)
        owner.counted = True
        return self._cupy.cuda.PinnedMemoryPointer(owner, 0)

    def uninstall(self, *, force: bool = False) -> None:
        """CuPy's default pinned memory pool back (EBUSY while CuPy holds blocks, unless
        ``force``: those blocks are then freed when CuPy drops them)."""
        global _pinned_installed
        with _pinned_lock:
            if not self.installed:
                raise AMLValueError("this CuPy pinned hook is not installed")
            if self.live and not force:
                raise AMLBusyError(
                    f"CuPy still holds {self.live} pinned block(s) from this hook; drop them first, "
                    "or uninstall(force=True)"
                )
            self._cupy.cuda.set_pinned_memory_allocator(self._cupy.get_default_pinned_memory_pool().malloc)
            self.installed = False
            _pinned_installed = None

    def __enter__(self) -> CupyPinnedHook:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.installed:
            self.uninstall()

    def __repr__(self) -> str:
        state = "installed" if self.installed else "uninstalled"
        return f"<aml CupyPinnedHook ({self.backend}) {state} over {self.pinned!r}, {self.live} live>"


def use_pinned_with_cupy(pinned: Area, *, backend: str) -> CupyPinnedHook:
    """Make CuPy take pinned host memory from ``pinned`` (a host-kind area: a pinned pool)
    through ``cupy.cuda.set_pinned_memory_allocator``, for the process. One pinned hook at
    a time: another installed (this one, or ``use_with_cupy(..., pinned=...)``) is EBUSY."""
    global _pinned_installed
    pinned = _check_area(pinned, "pinned", backend, "use_pinned_with_cupy")
    if pinned.kind is not Kind.HOST and pinned.kind is not Kind.MAPPED:
        raise AMLValueError(f"pinned memory comes from a host area, not a {pinned.kind.value} one")
    with _pinned_lock:
        other = hooks._installed
        if _pinned_installed is not None or (other is not None and other.pinned is not None):
            raise AMLBusyError(
                f"{_pinned_installed or other!r} gives CuPy its pinned memory already; uninstall it first"
            )
        hook = CupyPinnedHook(pinned, backend)
        hook._cupy.cuda.set_pinned_memory_allocator(hook.malloc)
        hook.installed = True
        _pinned_installed = hook
        return hook
