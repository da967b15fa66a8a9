"""The one rule for a caller's callback that a pool calls (``on_oom``, a ``log_to``
callable): an interrupt inside it never strands a block (issue 32, root cause 10).

The pool calls these callbacks in the middle of its own work: ``on_oom`` inside the
kernel's growth, a log's callback right after the kernel handed a block out or took one
back, before the pool made (or dropped) the Buffer around it. An ``Exception`` of the
callback is the call site's to handle (ENOMEM for ``on_oom``, a warning for a log). A
``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``, ``SystemExit``, a
``GeneratorExit``, anything of the kind) used to escape from the middle: the block was
handed out with no Buffer to free it. Now :func:`call` holds it for this thread and
raises :class:`Interrupted` (an ``Exception``) at the call site, which handles it as the
callback's failure; the pool then raises the interrupt itself where its state is whole
(:func:`deliver`): an mmap gives back the block it took first (it did not happen), a
free is done and its Buffer marked freed first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Interrupted", "after_free", "after_take", "call", "deliver", "guard", "held", "was_freed"]

_local = threading.local()


class Interrupted(Exception):
    """A callback the pool called was interrupted; the interrupt is held
    (:func:`deliver` raises it)."""


def call(callback: Callable[..., Any], *args: Any) -> Any:
    """``callback(*args)``; its Exception propagates; any other BaseException is held
    for this thread (the first one, until delivered) and Interrupted raised instead."""
    try:
        return callback(*args)
    except Exception:
        raise
    except BaseException as exc:
        if getattr(_local, "held", None) is None:
            _local.held = exc
        raise Interrupted(f"the callback was interrupted by {type(exc).__name__}") from exc


def guard(callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback`` called through :func:`call` (what the pool gives its kernel)."""

    def guarded(*args: Any) -> Any:
        return call(callback, *args)

    guarded.__wrapped__ = callback  # type: ignore[attr-defined]
    return guarded


def held() -> BaseException | None:
    """The interrupt held for this thread, if any (not cleared)."""
    exc: BaseException | None = getattr(_local, "held", None)
    return exc


def deliver() -> None:
    """Raise the interrupt held for this thread, if any (and forget it)."""
    exc = getattr(_local, "held", None)
    if exc is not None:
        _local.held = None
        raise exc


def after_take(addr: int, give_back: Callable[[int], None]) -> int:
    """``addr``, a block the pool's mmap just took; if an interrupt is held, the block
    is given back first (``give_back(addr)``: the mmap did not happen) and the
    interrupt raised."""
    if held() is None:
        return addr
    try:
        give_back(addr)
    finally:
        deliver()
    return addr  # pragma: no cover - deliver raised


def after_free(buffer: object) -> None:
    """A pool's free of ``buffer`` is done: if an interrupt is held, raise it, with
    ``buffer`` remembered as freed, so that the area does not track it again as a
    buffer whose free failed (the pool's ``_restore`` asks :func:`was_freed`)."""
    if held() is None:
        return
    _local.freed = buffer
    deliver()


def was_freed(buffer: object) -> bool:
    """Whether ``buffer`` is the one :func:`after_free` raised an interrupt after
    (asked once: forgotten afterwards)."""
    freed = getattr(_local, "freed", None)
    if freed is not buffer:
        return False
    _local.freed = None
    return True
