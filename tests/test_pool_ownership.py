"""A slab a pool holds belongs to the pool (aml_core.area, "Pools"; issue 20, item 1): its
area refuses to free it by every entry point (EINVAL), slab_of gives nothing that frees
it, and the area's close() closes the pools over it first. The crashes the rule prevents
run in a child process."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Callable

import pytest

import aml_core
from aml_core import Buffer
from aml_core.area import Area
from aml_core.errors import AMLValueError, ErrorCode
from aml_core.host import HostArea
from tests.support.pool_ownership import FREEING, assert_slab_refused

MiB = 1 << 20

# The issue's cases: each wrote through a pooled buffer over unmapped memory (SIGSEGV).
_CHILD = """
import aml_core
from aml_core.errors import AMLValueError
from aml_core.host import HostArea
a = HostArea(); p = aml_core.pool(a); b = p.mmap(1000)
case = {case!r}
if case == "close":
    a.close()
    assert p.closed and b.freed
    try:
        memoryview(b)[0] = 1
    except BufferError:
        print("refused")
else:
    target = b.ptr if case == "ptr" else p.slab_of(b)[0]
    try:
        a.munmap(target)
    except AMLValueError as exc:
        print("refused", int(exc.code))
    memoryview(b)[0] = 1
    p.munmap(b); p.close(); a.close()
print("ok")
"""


@pytest.mark.parametrize("case", ["ptr", "slab", "close"])
def test_the_issues_crash_is_an_error(case: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD.format(case=case)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, (out.returncode, out.stderr)
    expected = "refused" if case == "close" else f"refused {int(ErrorCode.EINVAL)}"
    assert out.stdout.split("\n")[:2] == [expected, "ok"], out.stdout


@pytest.mark.parametrize("live", [True, False], ids=["block live", "block cached"])
@pytest.mark.parametrize("free", FREEING.values(), ids=FREEING.keys())
def test_every_freeing_entry_point_refuses_a_held_slab(
    free: Callable[[Area, Buffer], None], live: bool
) -> None:
    with HostArea() as host:
        pool = aml_core.pool(host)
        assert_slab_refused(host, pool, free, live=live)
        pool.close()
        assert host.stats.live_mappings == 0


def test_a_slab_given_back_is_the_areas_again() -> None:
    """release_threshold gives a wholly free slab back at munmap; the area then frees it
    as any buffer (here: it is gone already, so munmap is 'already unmapped')."""
    with HostArea() as host:
        pool = aml_core.pool(host, release_threshold=0)
        buf = pool.mmap(1000)
        slab = pool.slab_of(buf)[0]
        assert slab is not None
        assert host._held(slab)
        pool.munmap(buf)
        assert slab.freed
        assert not host._held(slab)
        with pytest.raises(AMLValueError, match="already unmapped"):
            host.munmap(slab)
        pool.close()


def test_a_pool_over_a_pool_holds_its_slabs_too() -> None:
    with HostArea() as host:
        inner = aml_core.pool(host)
        outer = aml_core.pool(inner, small_slab=64 * 1024, small_max=64 * 1024)
        assert_slab_refused(inner, outer, FREEING["munmap(ptr)"], live=True)
        outer.close()
        inner.close()


@pytest.mark.parametrize("how", ["trim", "close"])
def test_a_failed_give_back(how: str) -> None:
    """A slab whose free the area refuses (here: the caller views it) stays the pool's
    after trim(); after close() it is the area's (a closed pool holds only the slabs of
    its viewed buffers), which then frees it."""
    with HostArea() as host:
        pool = aml_core.pool(host)
        pool.munmap(pool.mmap(1000))
        (slab,) = host.buffers()
        view = memoryview(slab)
        with pytest.raises(aml_core.AMLBusyError):
            getattr(pool, how)()
        assert not slab.freed
        assert host._held(slab) is (how == "trim")
        if how == "trim":
            with pytest.raises(AMLValueError, match="pool holds"):
                host.munmap(slab)
        view.release()
        if how == "trim":
            assert pool.trim() == 2 * MiB
            pool.close()
        else:
            host.munmap(slab)
        assert slab.freed
        assert not host._held(slab)


# -- the area's close() with a live pool over it --------------------------------------------
def test_closing_the_area_closes_its_pools_first() -> None:
    host = HostArea()
    pool = aml_core.pool(host)
    live = pool.mmap(1000)
    cached = pool.mmap(5 * MiB)
    pool.munmap(cached)
    host.close()
    assert pool.closed
    assert live.freed
    with pytest.raises(BufferError):
        memoryview(live)
    assert host.stats.live_mappings == 0
    assert pool.pool_stats.bytes_reserved == 0
    with pytest.raises(AMLValueError, match="closed") as info:
        pool.mmap(1000)
    assert info.value.code is ErrorCode.EINVAL
    pool.close()  # idempotent
    host.close()


def test_closing_the_area_under_a_viewed_pooled_buffer_keeps_its_slab() -> None:
    """A pooled buffer still viewed keeps its slab past the area's close, as the pool's
    close keeps it: the slab is freed once the view and the buffer are gone."""
    host = HostArea()
    pool = aml_core.pool(host)
    buf = pool.mmap(1000)
    slab = pool.slab_of(buf)[0]
    assert slab is not None
    slab_ref = weakref.ref(slab)
    del slab
    view = memoryview(buf)
    view[:4] = b"kept"
    with pytest.warns(ResourceWarning, match="still viewed"):
        host.close()
    assert host.closed
    assert pool.closed
    assert host.stats.live_mappings == 0
    assert len(host._orphans) == 1
    assert bytes(view[:4]) == b"kept"  # the memory is still there
    view.release()
    del buf, view
    gc.collect()
    assert slab_ref() is None
    assert host._orphans == {}  # the slab was freed


def test_the_pools_of_a_closed_area_are_forgotten() -> None:
    host = HostArea()
    pool = aml_core.pool(host)
    ref = weakref.ref(pool)
    pool.close()
    del pool
    gc.collect()
    assert ref() is None
    assert list(host._pools) == []
    host.close()
