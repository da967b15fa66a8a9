"""Who hears of a pool's memory going back before it goes: a slab released (trim, the
release threshold, the limit's trim-and-retry, close) or an expandable segment's chunk
unmapped. An RDMA registration (:mod:`aml_core.rdma`) listens, to deregister that range
first: no registration outlives the memory under it.

The kernel calls one hook, ``release_hook(ptr, size)``, with its mutex held, before it
frees the range; an exception there keeps the range the pool's (cached, counted) and is
the release's error. The hook holds its listeners weakly: a listener never keeps a pool
alive, and a pool never keeps a dropped listener."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Protocol

from ..errors import AMLError

if TYPE_CHECKING:
    from .._buffer import PoolKernel

__all__ = ["ReleaseListener", "Releases"]


class ReleaseListener(Protocol):
    """What a pool tells a listener (see the module doc)."""

    def _range_released(self, ptr: int, size: int) -> None:
        """``[ptr, ptr + size)`` (a whole slab, or one chunk) is about to go back to the
        area; raising keeps it the pool's."""

    def _pool_closing(self) -> None:
        """The pool closes: nothing it holds may stay registered."""


class _Hook:
    """The kernel's release hook: the listeners, held weakly (no cycle through the pool)."""

    __slots__ = ("listeners",)

    def __init__(self) -> None:
        self.listeners: weakref.WeakSet[ReleaseListener] = weakref.WeakSet()

    def __call__(self, ptr: int, size: int) -> None:
        for listener in tuple(self.listeners):
            listener._range_released(ptr, size)


class Releases:
    """The pool's side: listeners added and removed, told of close."""

    _kernel: PoolKernel
    _release_hook: _Hook | None = None

    def _listen(self, listener: ReleaseListener) -> None:
        """Tell ``listener`` of every range before it goes back (until :meth:`_unlisten`)."""
        kernel = self._kernel
        with kernel:
            if self._release_hook is None:
                self._release_hook = _Hook()
            self._release_hook.listeners.add(listener)
            kernel.release_hook = self._release_hook

    def _unlisten(self, listener: ReleaseListener) -> None:
        kernel = self._kernel
        with kernel:
            hook = self._release_hook
            if hook is not None:
                hook.listeners.discard(listener)
                if not hook.listeners:
                    kernel.release_hook = None

    def _close_listeners(self) -> AMLError | None:
        """Tell every listener the pool closes (first thing in close); the first AML error
        of one, after telling the others."""
        hook = self._release_hook
        if hook is None:
            return None
        error: AMLError | None = None
        for listener in tuple(hook.listeners):
            try:
                listener._pool_closing()
            except AMLError as exc:
                error = error or exc
        return error
