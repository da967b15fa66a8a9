"""The harness rule of the allocator benchmarks: every allocator is called through the same
shape.

A peer's ``alloc`` and ``free`` are what the timing loop calls (``free(alloc(n))``). The
rule: each is a callable the library itself offers, bound where the library allows
(a bound method, a ``functools.partial`` of one, ``operator.methodcaller``, a builtin such
as ``id`` for a peer whose memory goes back when its handle is dropped), so that the
benchmark adds no Python frame of its own; where a library offers no such callable (a call
that returns an error code to check, a free that needs the size back), the benchmark's
frame is counted, and aml is measured beside it through a control that pays the same
number of frames (:func:`framed`). A ratio is reported only between two peers of the same
shape: :func:`check_pairs` refuses any other.

:func:`benchmark_frames` counts the frames a call runs in the benchmark's own code (the
files of ``benchmarks/``) before it reaches the library; what the library does inside its
own callable (Python or C) is what that allocator costs its users, and is not counted.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

#: the folder whose code is "the benchmark's own"
BENCH_DIR = Path(__file__).resolve().parent


def own_code(fn: Any) -> bool:
    """Whether ``fn`` (a Python function) is defined in the benchmarks' folder."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    try:
        return Path(code.co_filename).resolve().parent == BENCH_DIR
    except (OSError, ValueError):
        return False


def benchmark_frames(fn: Any, own: Callable[[Any], bool] = own_code) -> int:
    """Python frames of the benchmark's own code that one call of ``fn`` runs before it
    reaches a library's callable: 0 for a builtin, a method of a compiled class, a
    ``functools.partial`` or bound method over one, or a library's own function; 1 plus
    nothing further for a function of the benchmark (it is not looked into: a frame of ours
    that calls the library is one frame; :func:`framed` nests them to count more)."""
    depth = getattr(fn, "__benchmark_frames__", None)
    if isinstance(depth, int):
        return depth
    if isinstance(fn, functools.partial):
        return benchmark_frames(fn.func, own)
    if isinstance(fn, types.MethodType):
        return benchmark_frames(fn.__func__, own)
    if isinstance(fn, types.FunctionType):
        return 1 if own(fn) else 0
    call = type(fn).__dict__.get("__call__") if callable(fn) else None
    if isinstance(call, types.FunctionType) and own(call):
        return 1
    return 0


def shape(alloc: Any, free: Any, own: Callable[[Any], bool] = own_code) -> tuple[int, int]:
    """(frames of ``alloc``, frames of ``free``)."""
    return benchmark_frames(alloc, own), benchmark_frames(free, own)


def framed(fn: Callable[..., Any], frames: int) -> Callable[..., Any]:
    """``fn`` called through ``frames`` more Python frames of the benchmark (0: ``fn``
    itself): the control that pays what a peer's wrapper pays."""
    if frames <= 0:
        return fn
    inner = framed(fn, frames - 1)

    def one_frame(*args: Any, **kwargs: Any) -> Any:
        return inner(*args, **kwargs)

    one_frame.__benchmark_frames__ = 1 + benchmark_frames(inner)  # type: ignore[attr-defined]
    return one_frame


class ShapeMismatch(ValueError):
    """Two peers a ratio compares are called through different shapes."""


def check_pairs(
    pairs: Iterable[tuple[str, str]], shapes: dict[str, tuple[int, int]]
) -> list[tuple[str, str]]:
    """The pairs (``mine``, ``theirs``) whose two peers both ran; raises
    :class:`ShapeMismatch` naming the first pair whose shapes differ."""
    checked = []
    for mine, theirs in pairs:
        if mine not in shapes or theirs not in shapes:
            continue
        if shapes[mine] != shapes[theirs]:
            raise ShapeMismatch(
                f"{mine!r} is called through {shapes[mine]} benchmark frames (alloc, free) and "
                f"{theirs!r} through {shapes[theirs]}: a ratio between them would count the harness"
            )
        checked.append((mine, theirs))
    return checked
