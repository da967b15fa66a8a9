"""Testing garbage-collected buffers (part of the conformance kit): capture what a
GC-driven free reports, and stress dropped buffers from many threads with the collector
running at every allocation.

A buffer that becomes unreachable without munmap is freed by its finalizer (see
:mod:`aml_core.area`, "Garbage collection"); a free that fails there is reported through
``sys.unraisablehook``, which :func:`catch_unraisable` records.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
from collections.abc import Iterator
from typing import Any

from ..area import Area
from ..buffer import Buffer
from ..specs import AreaStats

__all__ = ["UnraisableReport", "catch_unraisable", "collect", "collect_often", "drop_hammer"]


class UnraisableReport:
    """One ``sys.unraisablehook`` call: the exception and the object it was ignored in."""

    __slots__ = ("exc", "obj", "text")

    def __init__(self, exc: BaseException | None, obj: Any) -> None:
        self.exc = exc
        self.obj = obj
        #: The exception's message and notes, for matching.
        self.text = "" if exc is None else "\n".join([str(exc), *getattr(exc, "__notes__", ())])

    def __repr__(self) -> str:
        return f"<unraisable {type(self.exc).__name__}: {self.text!r} in {self.obj!r}>"


@contextlib.contextmanager
def catch_unraisable() -> Iterator[list[UnraisableReport]]:
    """Record what ``sys.unraisablehook`` receives inside the block (nothing is printed)."""
    caught: list[UnraisableReport] = []
    previous = sys.unraisablehook

    def hook(args: Any) -> None:
        caught.append(UnraisableReport(args.exc_value, args.object))

    sys.unraisablehook = hook
    try:
        yield caught
    finally:
        sys.unraisablehook = previous


def collect(rounds: int = 5) -> None:
    """Run the cyclic collector until it finds nothing more (finalizers may free more),
    at most ``rounds`` times (garbage it cannot free is found again every time)."""
    for _ in range(rounds):
        if not gc.collect():
            break


@contextlib.contextmanager
def collect_often(threshold: int = 1) -> Iterator[None]:
    """Make the collector run every ``threshold`` tracked allocations inside the block,
    so that finalizers run inside area operations (mmap, munmap, close, a pool's locked
    code)."""
    old = gc.get_threshold()
    gc.set_threshold(threshold, 1, 1)
    try:
        yield
    finally:
        gc.set_threshold(*old)


class _Cycle:
    """An object in a reference cycle that holds a buffer: only the cyclic collector
    frees it, at whatever allocation it runs."""

    __slots__ = ("__weakref__", "buf", "me")

    def __init__(self, buf: Buffer) -> None:
        self.buf = buf
        self.me = self


def drop_hammer(
    area: Area, *, threads: int = 8, rounds: int = 100, unit: int = 64, sizes: int = 5
) -> AreaStats:
    """Run ``threads`` threads, started together, each making ``rounds`` buffers of
    ``area`` and dropping them without munmap: some at once (freed by their finalizer in
    that thread), some in reference cycles (freed by the collector, which runs every few
    allocations in whatever thread allocates: inside mmap, munmap and the area's locked
    code), some unmapped explicitly. Then every buffer must be freed: nothing live, as many
    unmaps as maps. Raises the first error a thread met; returns the stats."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)
    before = area.stats

    def work(seed: int) -> None:
        try:
            barrier.wait()
            for i in range(rounds):
                buf = area.mmap(unit * (1 + (i + seed) % sizes))
                way = (i + seed) % 3
                if way == 0:
                    _Cycle(buf)
                elif way == 1:
                    area.munmap(buf)
                del buf
        except BaseException as exc:
            errors.append(exc)

    with collect_often(7):
        workers = [threading.Thread(target=work, args=(seed,)) for seed in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    collect()
    if errors:
        raise errors[0]
    stats = area.stats
    assert (stats.live_mappings, stats.bytes_in_use) == (before.live_mappings, before.bytes_in_use), stats
    assert stats.total_maps - before.total_maps == stats.total_unmaps - before.total_unmaps, stats
    return stats
