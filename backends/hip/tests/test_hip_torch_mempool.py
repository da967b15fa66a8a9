"""aml_hip.torch_mem_pool over the HIP double's device pools: one MemPool per device, the
device a pool is bound to checked, against the fake ``torch`` whose MemPool models
PyTorch's caching allocator (aml_core.testing.hook_fakes). The ROCm build of PyTorch keeps
the ``torch.cuda`` names; real PyTorch on a GPU is backends/cuda/tests (not run here)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import aml_hip
import pytest
from hip_helpers import HipDouble

import aml_core
from aml_core.errors import AMLValueError
from aml_core.gpu import torch_pool
from aml_core.testing.hook_fakes import faked

MiB = 1 << 20


@pytest.fixture
def torch() -> Iterator[Any]:
    with faked("torch") as fake:
        yield fake
    gc.collect()
    torch_pool._reclaim()
    assert torch_pool._bound == {}


@pytest.mark.gpu2
def test_one_mempool_per_device(hip: HipDouble, torch: Any) -> None:
    hip.need_devices(2)  # host mode: two emulated devices
    with (
        aml_hip.create(0, 0) as a0,
        aml_hip.create(1, 0) as a1,
        aml_core.pool(a0) as p0,
        aml_core.pool(a1) as p1,
    ):
        m0, m1 = aml_hip.torch_mem_pool(p0), aml_hip.torch_mem_pool(p1)
        assert (m0.device, m1.device) == (0, 1)
        assert "HIP device 1" in repr(m1)
        with m0.use():
            x = torch.cuda.empty(MiB)
        with torch.cuda.device(1), m1.use():
            y = torch.cuda.empty(3 * MiB)
        assert (p0.pool_stats.bytes_in_use, p1.pool_stats.bytes_in_use) == (2 * MiB, 4 * MiB)
        with pytest.raises(AMLValueError, match="MemPool of device 0 over a pool of device 1"):
            aml_hip.torch_mem_pool(p1, device=0)
        del x, y
        m0.close()
        m1.close()
        assert (p0.pool_stats.bytes_in_use, p1.pool_stats.bytes_in_use) == (0, 0)
        assert p0.trim() > 0
        assert p1.trim() > 0


def test_a_cuda_pool_is_refused(hip: HipDouble, torch: Any) -> None:
    with (
        aml_hip.create(0, 0) as area,
        aml_core.pool(area) as pool,
        pytest.raises(AMLValueError, match=r"aml_cuda\.torch_mem_pool takes a cuda area"),
    ):
        torch_pool.torch_mem_pool(pool, backend="cuda")
