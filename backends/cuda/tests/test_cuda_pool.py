"""Pools on a real CUDA GPU (marked ``gpu``: skipped elsewhere with the probe's reason):
the conformance kit over a pool of device, pinned and managed memory and over an
expandable pool, blocks of one slab seen by CuPy at their own addresses, and blocks
handed from one stream to another."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aml_cuda
import pytest

import aml_core
from aml_core.gpu import GpuFlags
from aml_core.testing import AreaConformance

pytestmark = pytest.mark.gpu
MiB = 1 << 20


class TestCudaPoolConformance(AreaConformance):
    @pytest.fixture(
        params=[GpuFlags.DEFAULT, GpuFlags.ALLOC_HOST, GpuFlags.ALLOC_UNIFIED],
        ids=["device", "pinned", "managed"],
    )
    def area(self, request: pytest.FixtureRequest) -> Iterator[Any]:
        under = aml_cuda.create(0, request.param)
        pool = aml_core.pool(under)
        yield pool
        pool.close()
        assert under.stats.live_mappings == 0
        under.close()


class TestCudaExpandablePoolConformance(AreaConformance):
    @pytest.fixture
    def area(self) -> Iterator[Any]:
        vm = aml_cuda.virtual_memory(0)
        pool = aml_core.pool(vm, expandable=True, capacity=4 << 30)
        yield pool
        pool.close()
        vm.close()


def test_blocks_of_one_slab_in_cupy() -> None:
    """CuPy issue 9436: each block is its own array, at its own address."""
    cupy = pytest.importorskip("cupy")
    with aml_cuda.create(0) as under, aml_core.pool(under) as pool:
        a, b = pool.mmap(4096), pool.mmap(4096)
        assert pool.slab_of(a)[0] is pool.slab_of(b)[0]
        xa, xb = cupy.asarray(a), cupy.asarray(b)
        assert xa.data.ptr == a.ptr
        assert xb.data.ptr == b.ptr == a.ptr + 4096
        xa.fill(1)
        xb.fill(2)
        assert int(xa.sum()) == 4096
        assert int(xb.sum()) == 2 * 4096
        del xa, xb
        pool.munmap(a)
        assert pool.read(b, 4) == b"\x02" * 4


def test_block_handed_to_another_stream() -> None:
    under = aml_cuda.create(0)
    pool = aml_core.pool(under, small_slab=MiB, small_max=MiB)  # one block per slab
    s1, s2 = aml_cuda.stream(non_blocking=True), aml_cuda.stream(non_blocking=True)
    try:
        a = pool.mmap(MiB, stream=s1)
        ptr = a.ptr
        pool.munmap(a)  # in s1's order
        b = pool.mmap(MiB, stream=s2)  # s2 waits for s1 through an event
        assert b.ptr == ptr
        assert pool.pool_stats.native_allocations == 1
        s2.synchronize()
        pool.write(b, b"\x07" * MiB)
        assert pool.read(b, 8) == b"\x07" * 8
        pool.munmap(b, stream=s2)
    finally:
        pool.close()
        under.close()
        s1.close()
        s2.close()
