"""A pool's limit changed at run time (``set_limit``: bytes, a fraction of the memory the
area maps, None) and its out-of-memory callback (``on_oom``), over host areas: the
kernel's growth refused past a lowered limit with the memory kept, the callback asked
after the cache is released and before ENOMEM, its retry, its refusal and its own
error, the ENOMEM message, and bad input; PyTorch's entry point (the fake) reaches the
callback through its miss, and so does CuPy's."""

from __future__ import annotations

import ctypes
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest

import aml_core
from aml_core import Pool
from aml_core.errors import AMLMemoryError, AMLNotSupported, AMLTypeError, AMLValueError
from aml_core.gpu import hooks
from aml_core.host import HostArea, numa
from aml_core.pool import PoolStats
from aml_core.specs import format_size
from aml_core.testing.hook_fakes import FakeDeviceArea, faked, torch_entry_points
from tests.support.streams import StreamedHost

MiB = 1 << 20
KiB = 1 << 10


def _pool(area: Any, **kw: Any) -> Pool:
    """Small slabs: 1 MiB for requests up to 64 KiB, 4 MiB for larger ones under 10 MiB."""
    return aml_core.pool(area, small_max=64 * KiB, small_slab=MiB, medium_slab=4 * MiB, **kw)


def _sysfs_total(nodes: list[int]) -> int:
    """The MemTotal of NUMA nodes, read here from sysfs (not through aml)."""
    total = 0
    for node in nodes:
        with open(f"/sys/devices/system/node/node{node}/meminfo") as f:
            for line in f:
                if "MemTotal:" in line:
                    total += int(line.split()[-2]) * 1024
    return total


# -- set_limit ------------------------------------------------------------------------------
def test_lowering_the_limit_keeps_the_memory_and_refuses_growth(host: StreamedHost) -> None:
    with _pool(host) as p:
        assert p.limit is None
        a = p.mmap(4096)  # a 1 MiB small slab
        b = p.mmap(512 * KiB)  # a 4 MiB slab of the large heap
        assert p.pool_stats.bytes_reserved == 5 * MiB
        p.set_limit(2 * MiB)
        assert p.limit == 2 * MiB
        s = p.pool_stats
        assert (s.bytes_reserved, s.native_frees) == (5 * MiB, 0)  # nothing released now
        memoryview(a)[:4] = b"kept"  # the buffers stay usable
        assert bytes(memoryview(a)[:4]) == b"kept"
        p.munmap(p.mmap(8192))  # from the slabs held: no growth, served
        with pytest.raises(AMLMemoryError, match=r"limit of 2\.0 MiB") as info:
            p.mmap(8 * MiB)
        message = str(info.value)
        assert f"{format_size(8 * MiB, exact=True)} more asked" in message
        assert f"{format_size(5 * MiB, exact=True)} reserved" in message
        assert f"{format_size(4096 + 512 * KiB, exact=True)} in use" in message
        assert p.pool_stats.bytes_reserved == 5 * MiB  # both slabs in use: none could go
        p.munmap(b)  # its slab is wholly free: cached
        with pytest.raises(AMLMemoryError):
            p.mmap(8 * MiB)
        assert p.pool_stats.bytes_reserved == MiB  # the next growth released the cache first
        c = p.mmap(512 * KiB)  # 1 MiB + 512 KiB fits under 2 MiB: a slab of the request
        assert p.pool_stats.bytes_reserved == MiB + 512 * KiB
        p.set_limit(None)
        assert p.limit is None
        big = p.mmap(8 * MiB)  # no limit: grows
        for buf in (a, c, big):
            p.munmap(buf)


def test_raising_the_limit_lets_the_pool_grow_again(host: StreamedHost) -> None:
    with _pool(host, limit=2 * MiB) as p:
        keep = p.mmap(MiB + 512 * KiB)
        with pytest.raises(AMLMemoryError):
            p.mmap(MiB)
        p.limit = 4 * MiB  # the setter is set_limit
        assert p.limit == 4 * MiB
        more = p.mmap(MiB)
        assert p.pool_stats.bytes_reserved <= 4 * MiB
        p.munmap(more)
        p.munmap(keep)


def test_fraction_of_the_nodes_memory(host: StreamedHost) -> None:
    total = _sysfs_total(sorted(numa.allowed_nodes()))
    assert host.total_memory() == total
    with _pool(host) as p:
        p.set_limit(fraction=0.5)
        assert p.limit == int(total * 0.5)
        p.set_limit(0.25)  # a float limit is a fraction too
        assert p.limit == int(total * 0.25)
        p.set_limit(fraction=1)
        assert p.limit == total
    with _pool(host, limit=0.125) as p:
        assert p.limit == int(total * 0.125)
    node = min(numa.allowed_nodes())
    with HostArea(policy=numa.Policy.BIND, nodes=[node]) as bound, _pool(bound, limit=0.5) as p:
        assert p.limit == int(_sysfs_total([node]) * 0.5)


def test_a_fraction_needs_an_area_that_tells_its_size(host: StreamedHost) -> None:
    with _pool(host) as inner, _pool(inner) as outer:  # a pool is no MemoryCapacity
        with pytest.raises(AMLNotSupported, match="in bytes"):
            outer.set_limit(fraction=0.5)
        assert outer.limit is None


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        ((), {}, AMLValueError, "not neither"),
        ((MiB,), {"fraction": 0.5}, AMLValueError, "not both"),
        ((None,), {"fraction": 0.5}, AMLValueError, "not both"),
        ((), {"fraction": 0.0}, AMLValueError, r"\(0, 1\]"),
        ((), {"fraction": -0.5}, AMLValueError, r"\(0, 1\]"),
        ((), {"fraction": 1.5}, AMLValueError, r"\(0, 1\]"),
        ((), {"fraction": math.nan}, AMLValueError, r"\(0, 1\]"),
        ((2.0,), {}, AMLValueError, "in bytes is an int"),
        ((), {"fraction": "half"}, AMLTypeError, "fraction"),
        ((), {"fraction": True}, AMLTypeError, "fraction"),
        (("1 GiB",), {}, AMLTypeError, "limit"),
        ((100,), {}, AMLValueError, "smaller than one block"),
        ((0,), {}, AMLValueError, None),
        ((-1,), {}, AMLValueError, None),
    ],
)
def test_bad_limits_are_refused_and_change_nothing(
    host: StreamedHost,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    error: type[Exception],
    message: str | None,
) -> None:
    with _pool(host, limit=8 * MiB) as p:
        with pytest.raises(error, match=message):
            p.set_limit(*args, **kwargs)
        assert p.limit == 8 * MiB


def test_a_closed_pool_takes_no_limit(host: StreamedHost) -> None:
    p = _pool(host)
    p.close()
    with pytest.raises(AMLValueError):
        p.set_limit(8 * MiB)


# -- on_oom ---------------------------------------------------------------------------------
def test_on_oom_frees_a_buffer_and_the_retry_takes_its_block(host: StreamedHost) -> None:
    calls: list[tuple[int, PoolStats]] = []
    with _pool(host, limit=4 * MiB) as p:
        keep = p.mmap(3 * MiB)  # a 4 MiB slab, its last 1 MiB free

        def on_oom(requested: int, stats: PoolStats) -> bool:
            calls.append((requested, stats))
            p.munmap(keep)  # this pool, from inside the callback
            return True

        p.on_oom = on_oom
        assert p.on_oom is on_oom
        got = p.mmap(2 * MiB - 100)  # 4 + 2 MiB > 4 MiB: the callback frees 3 MiB
        ((requested, stats),) = calls
        assert requested == 2 * MiB  # the request rounded up to the granule
        assert (stats.bytes_in_use, stats.bytes_reserved, stats.bytes_cached) == (3 * MiB, 4 * MiB, MiB)
        s = p.pool_stats
        assert (s.bytes_in_use, s.bytes_reserved, s.native_allocations) == (2 * MiB - 100, 4 * MiB, 1)
        assert p.slab_of(got)[0] is not None
        p.munmap(got)


def test_on_oom_is_asked_after_the_cache_is_released(host: StreamedHost) -> None:
    seen: list[PoolStats] = []

    def on_oom(requested: int, stats: PoolStats) -> bool:
        seen.append(stats)
        return False

    with _pool(host, limit=6 * MiB, on_oom=on_oom) as p:
        p.munmap(p.mmap(4096))  # a cached 1 MiB slab
        keep = p.mmap(2 * MiB)  # a 4 MiB slab: 5 MiB reserved
        with pytest.raises(AMLMemoryError, match=r"limit of 6\.0 MiB"):
            p.mmap(3 * MiB)  # 5 + 3 MiB > 6 MiB: the cached slab goes, 4 + 3 MiB still does not fit
        ((stats,),) = [seen]
        assert (stats.bytes_reserved, stats.slabs, stats.native_frees) == (4 * MiB, 1, 1)
        p.munmap(keep)


def test_on_oom_false_raises_enomem_once(host: StreamedHost) -> None:
    calls: list[int] = []
    with _pool(host, limit=2 * MiB, on_oom=lambda n, s: bool(calls.append(n))) as p:
        with pytest.raises(AMLMemoryError) as info:
            p.mmap(3 * MiB)
        assert calls == [3 * MiB]
        assert "on_oom" not in "".join(getattr(info.value, "__notes__", []))
        assert p.pool_stats.native_allocations == 0


def test_on_oom_raising_is_enomem_from_its_error(host: StreamedHost) -> None:
    def on_oom(requested: int, stats: PoolStats) -> bool:
        raise RuntimeError("the callback broke")

    with _pool(host, limit=2 * MiB, on_oom=on_oom) as p:
        with pytest.raises(AMLMemoryError, match=r"limit of 2\.0 MiB") as info:
            p.mmap(3 * MiB)
        assert isinstance(info.value.__cause__, RuntimeError)
        assert any(
            "on_oom callback raised RuntimeError: the callback broke" in n for n in info.value.__notes__
        )
        p.munmap(p.mmap(4096))  # the pool goes on


def test_on_oom_interrupted_propagates_and_the_pool_goes_on(host: StreamedHost) -> None:
    def on_oom(requested: int, stats: PoolStats) -> bool:
        raise KeyboardInterrupt

    with _pool(host, limit=2 * MiB, on_oom=on_oom) as p:
        with pytest.raises(KeyboardInterrupt):
            p.mmap(3 * MiB)
        assert not p._kernel.held
        p.on_oom = None
        with pytest.raises(AMLMemoryError):
            p.mmap(3 * MiB)


def test_an_allocation_inside_on_oom_does_not_call_it_again(host: StreamedHost) -> None:
    calls: list[int] = []
    inner: list[BaseException] = []
    with _pool(host, limit=2 * MiB) as p:

        def on_oom(requested: int, stats: PoolStats) -> bool:
            calls.append(requested)
            try:
                p.mmap(requested)  # fails the same way: raised at once
            except AMLMemoryError as exc:
                inner.append(exc)
            return False

        p.set_on_oom(on_oom)
        with pytest.raises(AMLMemoryError):
            p.mmap(3 * MiB)
        assert calls == [3 * MiB]
        assert len(inner) == 1
        p.set_on_oom(None)
        assert p.on_oom is None


def test_on_oom_after_the_areas_enomem(host: StreamedHost) -> None:
    calls: list[int] = []

    def on_oom(requested: int, stats: PoolStats) -> bool:
        calls.append(requested)
        return True

    with _pool(host, on_oom=on_oom) as p:
        host.fail_allocs = 1  # the area fails once, nothing cached: the callback, the retry
        buf = p.mmap(4096)
        assert calls == [4096]
        assert host.fail_allocs == 0
        p.munmap(buf)
        host.fail_allocs = 3  # the retry fails too: ENOMEM, the callback asked once
        with pytest.raises(AMLMemoryError, match=r"no memory for a slab of 4\.0 MiB") as info:
            p.mmap(MiB)
        assert "(injected)" in str(info.value)  # the area's own words
        assert isinstance(info.value.__cause__, AMLMemoryError)
        assert calls == [4096, MiB]
        host.fail_allocs = 0


def test_on_oom_that_closes_the_pool_gets_no_retry(host: StreamedHost) -> None:
    p = _pool(host, limit=2 * MiB)

    def on_oom(requested: int, stats: PoolStats) -> bool:
        p.close()
        return True

    p.on_oom = on_oom
    with pytest.raises(AMLMemoryError) as info:
        p.mmap(3 * MiB)
    assert any("closed the pool" in note for note in info.value.__notes__)
    assert p.closed


def test_bad_on_oom_is_refused(host: StreamedHost) -> None:
    with pytest.raises(AMLTypeError, match="on_oom"):
        _pool(host, on_oom=42)
    with _pool(host) as p:
        with pytest.raises(AMLTypeError, match="on_oom"):
            p.on_oom = "call me"  # type: ignore[assignment]
        assert p.on_oom is None


# -- the ENOMEM message ---------------------------------------------------------------------
def test_enomem_names_the_free_memory_where_the_area_tells(host: StreamedHost) -> None:
    with _pool(host, limit=2 * MiB) as p:
        with pytest.raises(AMLMemoryError) as info:
            p.mmap(3 * MiB)
        assert re.search(r"[\d.]+ [KMGT]iB \(\d+ bytes\) free on the device", str(info.value))
        with _pool(p) as over, pytest.raises(AMLMemoryError) as info:  # a pool tells no free memory
            over.mmap(3 * MiB)
        message = str(info.value)  # the inner pool's words, then the outer's figures
        assert "no memory for a slab of 4.0 MiB" in message
        assert message.endswith("0 bytes in use")


# -- PyTorch's entry point: the miss runs the slow path and the callback ---------------------
@pytest.fixture
def torch() -> Iterator[Any]:
    with faked("torch") as fake:
        yield fake


def test_pytorch_miss_asks_on_oom_and_the_retry_serves_it(torch: Any) -> None:
    with FakeDeviceArea() as area, _pool(area, limit=4 * MiB) as pool:
        hook = hooks.use_with_torch(pool, backend="cuda")
        malloc, free = torch_entry_points(torch)
        tensors = [malloc(3 * MiB, 0, None)]
        assert tensors[0]
        calls: list[int] = []

        def on_oom(requested: int, stats: PoolStats) -> bool:
            calls.append(requested)
            free(tensors.pop(), 3 * MiB, 0, None)  # PyTorch frees a tensor it let go
            return True

        pool.on_oom = on_oom
        got = malloc(2 * MiB, 0, None)
        assert got
        assert calls == [2 * MiB]
        ctypes.memset(got, 1, 2 * MiB)
        assert hook.errors == []
        pool.on_oom = lambda n, s: False
        with pytest.raises(RuntimeError, match="out of memory"):
            malloc(3 * MiB, 0, None)  # refused: PyTorch raises, the error kept
        assert isinstance(hook.errors[-1], AMLMemoryError)
        free(got, 2 * MiB, 0, None)
        assert pool.pool_stats.bytes_in_use == 0


def test_cupy_allocation_asks_on_oom_and_a_dropped_array_makes_room() -> None:
    with faked("cupy") as cupy, FakeDeviceArea() as area, _pool(area, limit=4 * MiB) as pool:
        hook = hooks.use_with_cupy(pool, backend="cuda")
        allocate = cupy.state["allocator"]
        arrays = [allocate(3 * MiB)]
        calls: list[int] = []

        def on_oom(requested: int, stats: PoolStats) -> bool:
            calls.append(requested)
            arrays.clear()  # CuPy frees the memory of a dropped array at once
            return True

        pool.on_oom = on_oom
        got = allocate(2 * MiB)
        assert calls == [2 * MiB]
        assert (hook.live, pool.pool_stats.bytes_in_use) == (1, 2 * MiB)
        del got
        assert hook.live == 0
        hook.uninstall()
