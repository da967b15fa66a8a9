"""aml_hip.pinned_pool: the exact-size, NUMA-placed pinned host pool
(:mod:`aml_core.gpu.pinned_pool`) over the HIP double, which records every
``hipHostRegister`` / ``hipHostUnregister`` and injects their failures.

Checked on the host: block sizes rounded only to the granule, what the pool holds against
what was asked (the cache's bound, over random traces too), the pages on the bound node,
NumPy (and PyTorch's CPU wheel, where it loads) over the blocks without a copy, the
registration's arguments, injected registration failures leaving nothing behind, and the
node checks (an absent node; a CPU-less one, as sysfs would describe it). Placement on a
second node is tests/numa/test_pinned_pool_numa.py (the NUMA lab); pinning by a real
driver (``is_pinned()``, asynchronous copies) needs a GPU: not run here."""

from __future__ import annotations

import ctypes
import gc
import importlib.util
from collections.abc import Iterator
from typing import Any

import aml_hip
import pytest
from aml_hip import abi as C
from hip_helpers import HipDouble
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aml_core.errors import AMLDomainError, AMLMemoryError, AMLTypeError, AMLValueError
from aml_core.gpu import pinned_pool as pinned_module
from aml_core.gpu.pinned_pool import PinnedPool
from aml_core.testing import AreaConformance
from aml_core.topology import NumaNode

PAGE = pinned_module.PAGE_SIZE
PORTABLE = 0x1  # hipHostRegisterPortable (docs/native-abi.md)
MAPPED = 0x2  # hipHostRegisterMapped


def _rounded(size: int, granule: int = PAGE) -> int:
    return -(-size // granule) * granule


def test_blocks_are_the_size_asked_rounded_to_the_granule(hip: HipDouble) -> None:
    sizes = [1, PAGE, PAGE + 1, 3 * PAGE + 17, 1 << 20]
    with aml_hip.pinned_pool(0, max_cached=0) as pool:
        assert pool.kind.value == "host"
        assert pool.backend == "hip"
        bufs = [pool.mmap(n) for n in sizes]
        stats = pool.pinned_stats
        assert stats.bytes_requested == sum(sizes)
        assert stats.bytes_reserved == sum(_rounded(n) for n in sizes)
        assert (stats.live_blocks, stats.registrations) == (len(sizes), len(sizes))
        # The last registration: the block's own address and its rounded length, portable.
        assert hip.last("hipHostRegister") == (bufs[-1].ptr, 1 << 20, PORTABLE)
        assert [b.size for b in bufs] == sizes
        assert hip.live()["registered"] == len(sizes)
        for b in bufs:
            pool.munmap(b)
        assert hip.calls("hipHostUnregister") == len(sizes)
        assert pool.pinned_stats.bytes_reserved == 0
    assert hip.live()["registered"] == 0


def test_a_larger_granule_and_the_mapped_flag(hip: HipDouble) -> None:
    with aml_hip.pinned_pool(0, granule=64 << 10, mapped=True, portable=False) as pool:
        buf = pool.mmap(70_000)
        assert hip.last("hipHostRegister") == (buf.ptr, 128 << 10, MAPPED)
        assert pool.pinned_stats.bytes_reserved == 128 << 10


def test_a_freed_block_serves_the_next_request_of_its_size(hip: HipDouble) -> None:
    with aml_hip.pinned_pool(0, max_cached=1 << 20) as pool:
        first = pool.mmap(10_000)
        addr = first.ptr
        pool.munmap(first)
        assert pool.pinned_stats.cached_blocks == 1
        again = pool.mmap(3 * PAGE)  # 10,000 bytes rounded: 3 pages, the same block
        assert again.ptr == addr
        assert hip.calls("hipHostRegister") == 1
        other = pool.mmap(5 * PAGE)  # another size: a new block
        assert other.ptr != addr
        assert hip.calls("hipHostRegister") == 2
        s = pool.pinned_stats
        assert (s.hits, s.misses) == (1, 2)
        assert pool.trim() == 0  # nothing cached now
        pool.munmap(again)
        pool.munmap(other)
        assert pool.trim() == 8 * PAGE
        assert hip.calls("hipHostUnregister") == 2


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=st.lists(st.tuples(st.booleans(), st.integers(1, 24), st.integers(0, 1 << 30)), max_size=60))
def test_what_the_pool_holds_is_bounded_by_what_is_used(
    hip: HipDouble, trace: list[tuple[bool, int, int]]
) -> None:
    """Over any trace of allocations (sizes of 1..24 pages less a remainder) and frees,
    the pool holds at most 1.05x the bytes its live blocks take (rounded to the granule)."""
    pool = aml_hip.pinned_pool(0)
    live: list[Any] = []
    rounded = 0
    for alloc, pages, pick in trace:
        if alloc or not live:
            size = pages * PAGE - (pick % PAGE)
            live.append(pool.mmap(size))
            rounded += _rounded(size)
        else:
            buf = live.pop(pick % len(live))
            rounded -= _rounded(buf.size)
            pool.munmap(buf)
        s = pool.pinned_stats
        assert s.bytes_reserved - s.bytes_cached == rounded
        assert s.bytes_reserved <= 1.05 * rounded
        assert s.bytes_requested == sum(b.size for b in live)
    del live
    pool.close()
    s = pool.pinned_stats
    assert s.registrations == s.unregistrations
    assert s.bytes_reserved == 0


def test_numpy_sees_the_block_without_a_copy(hip: HipDouble) -> None:
    np = pytest.importorskip("numpy")
    with aml_hip.pinned_pool(0) as pool:
        buf = pool.mmap(4 * PAGE)
        arr = np.frombuffer(buf, dtype=np.float32)
        arr[:] = np.arange(arr.size, dtype=np.float32)
        assert arr.ctypes.data == buf.ptr
        assert (ctypes.c_float * 4).from_address(buf.ptr + 4 * 4)[0] == 4.0
        via_dlpack = np.from_dlpack(buf)
        assert via_dlpack.ctypes.data == buf.ptr
        assert via_dlpack.nbytes == 4 * PAGE
        del arr, via_dlpack
        pool.munmap(buf)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed")
def test_a_pytorch_cpu_tensor_over_a_block(hip: HipDouble) -> None:
    import torch

    with aml_hip.pinned_pool(0) as pool:
        buf = pool.mmap(1 << 16)
        t = torch.from_dlpack(buf)
        assert t.device.type == "cpu"
        assert t.data_ptr() == buf.ptr
        assert t.numel() == 1 << 16
        t.view(torch.int32).fill_(7)
        assert ctypes.c_int32.from_address(buf.ptr).value == 7
        del t
        pool.munmap(buf)


def test_pages_are_on_the_bound_node(hip: HipDouble) -> None:
    with aml_hip.pinned_pool(0) as pool:
        buf = pool.mmap(8 * PAGE)
        assert pool.page_nodes(buf) == {0: 8}  # populated before registration
        pool.munmap(buf)


def test_a_viewed_block_outlives_close(hip: HipDouble) -> None:
    pool = aml_hip.pinned_pool(0)
    buf = pool.mmap(PAGE)
    view = memoryview(buf)
    view[0] = 42
    with pytest.warns(ResourceWarning):
        pool.close()
    assert hip.live()["registered"] == 1  # still pinned: the view reads it
    assert view[0] == 42
    del view, buf
    gc.collect()
    assert hip.live()["registered"] == 0
    assert pool._host.closed


@pytest.mark.parametrize(
    ("code", "error"), [(C.hipErrorOutOfMemory, AMLMemoryError), (C.hipErrorInvalidValue, AMLValueError)]
)
def test_a_failed_registration_leaves_nothing(hip: HipDouble, code: int, error: type[Exception]) -> None:
    with aml_hip.pinned_pool(0) as pool:
        hip.inject("hipHostRegister", code)
        with pytest.raises(error) as info:
            pool.mmap(3 * PAGE)
        assert info.value.native is not None
        assert info.value.native.function == "hipHostRegister"
        s = pool.pinned_stats
        assert (s.bytes_reserved, s.live_blocks, s.registrations) == (0, 0, 0)
        assert pool.stats.live_mappings == 0
        assert pool._host.stats.live_mappings == 0
        buf = pool.mmap(3 * PAGE)  # the next one works
        assert pool.pinned_stats.registrations == 1
        pool.munmap(buf)
    assert hip.live()["registered"] == 0


def test_a_failed_unregistration_keeps_the_block(hip: HipDouble) -> None:
    with aml_hip.pinned_pool(0, max_cached=0) as pool:
        buf = pool.mmap(PAGE)
        hip.inject("hipHostUnregister", C.hipErrorInvalidValue)
        with pytest.raises(AMLValueError):
            pool.munmap(buf)
        assert pool.stats.live_mappings == 1
        assert pool.pinned_stats.live_blocks == 1
        pool.munmap(buf)  # again: freed
        assert pool.pinned_stats.bytes_reserved == 0


def test_the_limit_releases_the_cache_then_refuses(hip: HipDouble) -> None:
    with aml_hip.pinned_pool(0, limit=4 * PAGE, max_cached=1.0) as pool:
        a = pool.mmap(2 * PAGE)
        pool.munmap(a)  # cached
        b = pool.mmap(4 * PAGE)  # needs the cached 2 pages released first
        assert pool.pinned_stats.bytes_cached == 0
        assert hip.calls("hipHostUnregister") == 1
        with pytest.raises(AMLMemoryError, match="limit"):
            pool.mmap(1)
        assert pool.pinned_stats.bytes_reserved == 4 * PAGE
        pool.munmap(b)


def test_an_absent_node_is_edom(hip: HipDouble) -> None:
    with pytest.raises(AMLDomainError, match="does not exist"):
        aml_hip.pinned_pool(999)
    with pytest.raises(AMLTypeError):
        aml_hip.pinned_pool("0")  # type: ignore[arg-type]


def test_a_cpu_less_node_is_refused_unless_allowed(hip: HipDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    # Node 0 described as sysfs describes a CPU-less (CXL-like) node: memory, no CPUs.
    monkeypatch.setattr(pinned_module, "numa_nodes", lambda: (NumaNode(node=0, memory=1 << 30),))
    with pytest.raises(AMLValueError, match="no CPUs"):
        aml_hip.pinned_pool(0)
    with aml_hip.pinned_pool(0, allow_cpu_less=True) as pool:
        pool.munmap(pool.mmap(PAGE))


@pytest.mark.parametrize(
    ("settings_", "error"),
    [
        ({"granule": 3000}, AMLValueError),
        ({"granule": 1024}, AMLValueError),
        ({"max_cached": 1.5}, AMLValueError),
        ({"max_cached": -1}, AMLValueError),
        ({"limit": 0}, AMLValueError),
        ({"portable": 1}, AMLTypeError),
        ({"colour": 1}, TypeError),
    ],
)
def test_bad_settings(hip: HipDouble, settings_: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        aml_hip.pinned_pool(0, **settings_)


def test_cupy_pinned_memory_from_the_pinned_pool(hip: HipDouble) -> None:
    from aml_core.testing.hook_fakes import faked

    with (
        faked("cupy") as cupy,
        aml_hip.create(0, 0) as area,
        aml_hip.pinned_pool(0) as pinned,
        aml_hip.use_with_cupy(area, pinned=pinned),
    ):
        ptr = cupy.state["pinned"](5000)
        assert ptr.mem.buf.area is pinned
        assert ptr.size == 5000
        assert pinned.pinned_stats.bytes_reserved == 2 * PAGE
        del ptr
        gc.collect()
        assert pinned.pinned_stats.live_blocks == 0


class TestPinnedPoolConformance(AreaConformance):
    """aml_core's conformance kit on the pinned pool (every area's rules: sizes, bad input,
    double munmap, views, garbage collection), with the double's live count of registered
    memory as the kit's leak check (the cache empty: ``max_cached=0``, so a freed block is
    unregistered at once)."""

    rounds = 20

    @pytest.fixture
    def area(self, hip: HipDouble) -> Iterator[PinnedPool]:
        self.double = hip
        pool = aml_hip.pinned_pool(0, max_cached=0)
        yield pool
        pool.close()

    def native_live(self, area: Any) -> int | None:
        return self.double.live()["registered"]
