"""A bound area's small mappings are pieces of one mapping bound once (aml_core.host.stock):
what each piece is (the area's policy at every page, pages on the node, zeros, its own
munmap that unmaps it), when the area carves and when it maps on its own, rebind and close
releasing the stock, a stock that cannot be made, and carving from several threads. On
this machine's nodes (one is enough); page by page across nodes in the NUMA lab
(tests/numa/test_placement.py)."""

from __future__ import annotations

import errno
import gc
import itertools
import mmap
import threading
import weakref
from typing import Any

import numpy as np
import pytest

from aml_core import _os
from aml_core.host import HostArea, Policy, allowed_nodes, policy_of
from aml_core.host.stock import CARVE_MAX, STOCK_SIZE
from tests.support.smaps import vm_flags

NODES = sorted(allowed_nodes())
NODE = NODES[0]
PAGE = mmap.PAGESIZE


def _mapped(ptr: int) -> tuple[int, int] | None:
    """The /proc/self/maps range holding ``ptr``, None where nothing is mapped."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            low, high = (int(x, 16) for x in line.split()[0].split("-"))
            if low <= ptr < high:
                return low, high
    return None


@pytest.fixture
def mbind_lengths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    lengths: list[int] = []
    real = _os.mbind

    def spy(address: int, length: int, mode: int, nodes: list[int], flags: int) -> None:
        lengths.append(length)
        real(address, length, mode, nodes, flags)

    monkeypatch.setattr(_os, "mbind", spy)
    return lengths


@pytest.mark.parametrize(
    ("policy", "nodes"),
    [(Policy.BIND, [NODE]), (Policy.PREFERRED, [NODE]), (Policy.INTERLEAVE, NODES), (Policy.BIND, NODES)],
)
def test_small_mappings_are_pieces_of_one_bound_mapping(
    mbind_lengths: list[int], policy: Policy, nodes: list[int]
) -> None:
    sizes = [CARVE_MAX, 1, PAGE + 1, 100_000] * 10  # 40 mappings, 10 MiB and more: 1 stock
    with HostArea(policy, nodes) as area:
        bufs = [area.mmap(n) for n in sizes]
        assert mbind_lengths == [STOCK_SIZE]  # one mbind for all, of the stock
        ends = sorted((b.ptr, b.ptr + -(-b.size // PAGE) * PAGE) for b in bufs)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(ends))
        for buf in bufs:
            for offset in (0, buf.size // 2, buf.size - 1):
                assert policy_of(buf.ptr + offset) == (policy, tuple(nodes))
            arr = np.frombuffer(buf, dtype=np.uint8)
            assert not arr.any()  # fresh: zeros
            arr[:] = 0xA5
            counts = area.page_nodes(buf, summary=True)
            assert set(counts) <= set(nodes)
            assert sum(counts.values()) == -(-buf.size // PAGE)
            del arr
        for buf in bufs[::2]:
            ptr = buf.ptr
            area.munmap(buf)
            assert _mapped(ptr) is None  # its own munmap: the range is gone (a use faults)
        again = [area.mmap(CARVE_MAX) for _ in range(25)]
        assert not any(np.frombuffer(b, dtype=np.uint8).any() for b in again)
        assert len(mbind_lengths) == 2  # the first stock's 32 MiB are carved: a second one


def test_what_a_bound_area_maps_on_its_own(mbind_lengths: list[int]) -> None:
    """Larger mappings, mappings with options, aligned, shared and unbound areas' mappings
    are mappings of their own, each bound by one mbind of its length."""
    with HostArea("bind", [NODE]) as bound:
        bound.mmap(CARVE_MAX + 1)
        bound.mmap(PAGE, {"flags": 0})
        bound.mmap(PAGE, {"alignment": 1 << 16})
        assert mbind_lengths == [CARVE_MAX + 1, PAGE, PAGE]
    mbind_lengths.clear()
    with (
        HostArea("bind", [NODE], alignment=1 << 16) as aligned,
        HostArea("bind", [NODE], shared=True) as shared,
    ):
        assert aligned.mmap(PAGE).ptr % (1 << 16) == 0
        shared.mmap(PAGE)
        assert mbind_lengths == [PAGE, PAGE]
    with HostArea() as unbound:
        unbound.mmap(PAGE)
        assert len(mbind_lengths) == 2


def test_pieces_are_not_huge_page_backed() -> None:
    """A huge page would span neighbouring pieces: the stock is advised MADV_NOHUGEPAGE."""
    with HostArea("interleave", NODES) as area:
        buf = area.mmap(CARVE_MAX)
        if "nh" not in vm_flags(buf.ptr):
            pytest.skip("this kernel has no transparent huge pages (the advice is refused)")


def test_rebind_and_close_release_the_stock() -> None:
    with HostArea("bind", [NODE]) as area:
        old = area.mmap(PAGE)
        stock = area._placed.stock
        assert stock is not None
        rest = old.ptr + PAGE
        assert _mapped(rest) is not None  # the stock's remainder, bound and untouched
        area.rebind("preferred", NODE)
        assert _mapped(rest) is None  # released
        assert stock.carve(PAGE) is None
        new = area.mmap(PAGE)
        assert area.policy_of(old) == (Policy.BIND, (NODE,))  # live pieces keep their policy
        assert area.policy_of(new) == (Policy.PREFERRED, (NODE,))
        area.rebind("default")
        assert area._placed.stock is None
        plain = area.mmap(PAGE)
        assert area.policy_of(plain) == (Policy.DEFAULT, ())
        area.rebind("bind", [NODE])
        last = area.mmap(PAGE)
        tail = last.ptr + PAGE
    assert _mapped(tail) is None  # close released it, and the pieces are unmapped
    assert _mapped(last.ptr) is None


def test_an_area_dropped_without_close_releases_its_stock() -> None:
    area = HostArea("bind", [NODE])
    buf = area.mmap(PAGE)
    tail = buf.ptr + PAGE
    stock = weakref.ref(area._placed.stock)  # type: ignore[arg-type]
    area.munmap(buf)
    del area, buf
    gc.collect()
    assert stock() is None
    assert _mapped(tail) is None


def test_a_stock_that_cannot_be_made_maps_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Strict overcommit refusing the stock's 32 MiB: the buffer is a mapping of its own."""
    real = _os.mmap

    def no_stock(length: int, *args: Any) -> int:
        if length == STOCK_SIZE:
            raise OSError(errno.ENOMEM, "Cannot allocate memory", "mmap")
        return int(real(length, *args))

    monkeypatch.setattr(_os, "mmap", no_stock)
    with HostArea("bind", [NODE]) as area:
        buf = area.mmap(PAGE)
        assert _mapped(buf.ptr) is not None
        assert area.policy_of(buf) == (Policy.BIND, (NODE,))
        assert area._placed.stock is not None
        assert area._placed.stock.remaining == 0


def test_threads_carve_pieces_that_do_not_overlap() -> None:
    with HostArea("bind", [NODE]) as area:
        bufs: list[Any] = []
        lock = threading.Lock()

        def work() -> None:
            mine = [area.mmap(64 << 10) for _ in range(200)]
            with lock:
                bufs.extend(mine)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got = sorted((b.ptr, b.ptr + b.size) for b in bufs)
        assert len(got) == 800
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(got))
        assert area.stats.live_mappings == 800
