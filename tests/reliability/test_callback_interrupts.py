"""An interrupt anywhere in a callback a pool calls never strands a block (issue 32, root
cause 10): a ``log_to`` callable or an ``on_oom`` callback that raises
``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit`` or any other ``BaseException``
at its n-th call, under every pool operation that calls it (mmap, munmap, trim, close,
the framework hooks' slow path, growth past the limit). The interrupt reaches the caller;
afterwards the pool's statistics agree with the live buffers, every live buffer reads back
its bytes, and once they are freed the pool gives every slab back (the bytes used to stay
"in use" with no Buffer to free them, and ``trim()`` could not release the slab)."""

from __future__ import annotations

import contextlib
import warnings

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import aml_core
from aml_core.pool import _callbacks
from tests.support.streams import S1, S2, StreamedHost

MiB = 1 << 20


class Custom(BaseException):
    """An interrupt of the caller's own kind."""


INTERRUPTS = [KeyboardInterrupt, SystemExit, GeneratorExit, Custom]

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("mmap"), st.sampled_from([64, 4096, 100_000, 3 * MiB])),
        st.tuples(st.just("munmap"), st.integers(0, 7)),
        st.tuples(st.just("munmap_on"), st.integers(0, 7)),
        st.tuples(st.just("stream_mmap"), st.sampled_from([512, 4096])),
        st.tuples(st.just("trim"), st.just(0)),
        st.tuples(st.just("hook"), st.sampled_from([512, 2 * MiB])),
        st.tuples(st.just("oom"), st.just(0)),
    ),
    min_size=1,
    max_size=12,
)


class Thrower:
    """A callback that raises ``kind`` at its ``at``-th call (and every ``every``-th after)."""

    def __init__(self, kind: type[BaseException], at: int, every: int) -> None:
        self.kind, self.at, self.every, self.calls, self.raised = kind, at, every, 0, 0

    def _maybe(self) -> None:
        self.calls += 1
        n = self.calls - self.at
        if n == 0 or (n > 0 and self.every and n % self.every == 0):
            self.raised += 1
            raise self.kind()

    def log(self, record: object) -> None:
        self._maybe()

    def on_oom(self, requested: int, stats: object) -> bool:
        self._maybe()
        return True


def _check(pool: aml_core.pool.Pool, live: dict[int, tuple[aml_core.Buffer, int]], hooked: set[int]) -> None:
    stats = pool.pool_stats
    assert stats.bytes_in_use == sum(b.size for b, _ in live.values()) + sum(hooked_sizes(hooked))
    for buf, stamp in live.values():
        assert bytes(memoryview(buf)[:1]) == bytes([stamp])


_HOOK_SIZES: dict[int, int] = {}


def hooked_sizes(hooked: set[int]) -> list[int]:
    return [_HOOK_SIZES[a] for a in hooked]


@settings(max_examples=300, deadline=None)
@given(
    ops=OPS,
    kind=st.sampled_from(INTERRUPTS),
    at=st.integers(1, 10),
    every=st.integers(0, 3),
    site=st.sampled_from(["log", "on_oom"]),
)
def test_an_interrupt_in_a_callback_never_strands_a_block(
    ops: list[tuple[str, int]], kind: type[BaseException], at: int, every: int, site: str
) -> None:
    area = StreamedHost()  # a host area with a recording stream runtime: munmap_on works
    thrower = Thrower(kind, at, every)
    pool = aml_core.pool(area, limit=8 * MiB, on_oom=thrower.on_oom if site == "on_oom" else None)
    if site == "log":
        pool.log_to(thrower.log, segments=True)
    live: dict[int, tuple[aml_core.Buffer, int]] = {}
    hooked: set[int] = set()
    stamp = 0
    oom_hold: list[aml_core.Buffer] = []
    try:
        for op, arg in ops:
            stamp = (stamp + 1) % 256
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    if op == "mmap":
                        b = pool.mmap(arg)
                        memoryview(b)[:1] = bytes([stamp])
                        live[b.ptr] = (b, stamp)
                    elif op == "munmap" and live:
                        ptr = sorted(live)[arg % len(live)]
                        b, _ = live[ptr]
                        try:
                            pool.munmap(b)
                        finally:
                            if b.freed:
                                del live[ptr]
                    elif op == "munmap_on" and live:
                        ptr = sorted(live)[arg % len(live)]
                        b, _ = live[ptr]
                        try:
                            pool.munmap(b, stream=S1 if arg % 2 else S2)
                        finally:
                            if b.freed:
                                del live[ptr]
                    elif op == "stream_mmap":
                        b = pool.mmap(arg, stream=S2)
                        memoryview(b)[:1] = bytes([stamp])
                        live[b.ptr] = (b, stamp)
                    elif op == "trim":
                        pool.trim()
                    elif op == "hook":
                        addr = pool._hook_alloc(arg, None)
                        _HOOK_SIZES[addr] = arg
                        hooked.add(addr)
                    elif op == "oom":
                        # Past the limit: growth fails, on_oom is asked (it frees nothing).
                        b = pool.mmap(7 * MiB)
                        oom_hold.append(b)
                        live[b.ptr] = (b, 0)
                        memoryview(b)[:1] = b"\0"
            except kind:
                event(f"interrupted: {site} during {op}")
            except aml_core.AMLMemoryError:
                event(f"ENOMEM: {site} during {op}")
            assert _callbacks.held() is None, "an interrupt was held and never raised"
            _check(pool, live, hooked)
        # Free everything (interrupts may come still: each free is done before it).
        for ptr in list(live):
            b, _ = live.pop(ptr)
            with contextlib.suppress(kind):
                pool.munmap(b)
            assert b.freed
        for addr in list(hooked):
            with contextlib.suppress(kind):
                pool._hook_free(addr, None)
            hooked.discard(addr)
        with contextlib.suppress(kind):
            pool.trim()
        stats = pool.pool_stats
        assert stats.bytes_in_use == 0
        assert stats.block_bytes == 0
        assert stats.bytes_reserved == 0, "a slab could not be released: a block was stranded"
        event(f"{site}: the callback raised {min(thrower.raised, 3)}+ times")
    finally:
        with contextlib.suppress(kind):
            pool.close()
        assert _callbacks.held() is None
        area.close()


@pytest.mark.parametrize("kind", INTERRUPTS)
def test_an_interrupted_log_callback_in_mmap_gives_the_block_back(kind: type[BaseException]) -> None:
    """The issue's case: KeyboardInterrupt in a log_to callback after the kernel handed
    out the block, before any Buffer existed."""
    with aml_core.area("host") as area:
        pool = aml_core.pool(area)

        def callback(record: object) -> None:
            raise kind()

        pool.log_to(callback)
        with pytest.raises(kind):
            pool.mmap(1000)
        assert pool.pool_stats.bytes_in_use == 0
        pool.log_to(None)
        assert pool.trim() == 2 * MiB  # the slab is free again
        assert pool.pool_stats.bytes_reserved == 0
        pool.close()


def test_an_interrupted_log_callback_in_munmap_frees_the_buffer_once() -> None:
    with aml_core.area("host") as area:
        pool = aml_core.pool(area)
        buf = pool.mmap(1000)
        pool.log_to(lambda record: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            pool.munmap(buf)
        assert buf.freed  # not tracked again as a buffer whose free failed
        pool.log_to(None)
        with pytest.raises(aml_core.AMLValueError, match="already unmapped"):
            pool.munmap(buf)
        assert pool.trim() == 2 * MiB
        pool.close()


def test_an_interrupted_on_oom_raises_the_interrupt_and_takes_nothing() -> None:
    with aml_core.area("host") as area:

        def on_oom(requested: int, stats: object) -> bool:
            raise KeyboardInterrupt

        pool = aml_core.pool(area, limit=4 * MiB, on_oom=on_oom)
        assert pool.on_oom is on_oom
        with pytest.raises(KeyboardInterrupt):
            pool.mmap(5 * MiB)
        assert pool.pool_stats.bytes_in_use == 0
        assert _callbacks.held() is None
        pool.close()
