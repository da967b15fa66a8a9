"""Real CuPy and Numba on aml_cuda pools (issue 33 items 3-5), GPU only: a CuPy scope over a
pool (its arrays compute, the limit raises in CuPy, the scope is gone after the block),
CuPy's pinned memory from a pinned pool, and Numba's EMM plugin with one pool shared by
Numba, CuPy and PyTorch in a child process (Numba takes its memory manager before its first
CUDA use, PyTorch its allocator before its first allocation: a fresh interpreter each).
Without a GPU these skip with the probe's reason (conftest.py); the same logic is tested on
the CPU against the HIP double (backends/hip/tests/test_hip_cupy_scope.py, test_hip_numba.py,
test_hip_shared_pool.py, test_hip_pinned_pool.py)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from typing import Any

import aml_cuda
import pytest

import aml_core

MiB = 1 << 20
pytestmark = pytest.mark.gpu


def test_cupy_scope_over_a_pool(cupy: Any) -> None:
    with aml_cuda.create(0) as area, aml_core.pool(area, limit=256 * MiB) as pool:
        scope = aml_cuda.cupy_scope(pool)
        with scope:
            x = cupy.arange(1 << 20, dtype=cupy.float32)
            assert pool.pool_stats.bytes_in_use >= x.nbytes
            with pytest.raises(MemoryError):
                cupy.empty(512 * MiB, dtype=cupy.uint8)  # past the limit: raised in CuPy
        in_pool = pool.pool_stats.bytes_in_use
        y = cupy.zeros(1 << 20, dtype=cupy.float32)  # outside the scope: CuPy's own pool
        assert pool.pool_stats.bytes_in_use == in_pool
        assert float(x.sum()) == float((1 << 20) * ((1 << 20) - 1) / 2)
        del x, y
        gc.collect()
        assert scope.live == 0
        assert pool.pool_stats.bytes_in_use == 0


def test_cupy_pinned_memory_from_a_pinned_pool(cupy: Any) -> None:
    with aml_cuda.pinned_pool(0) as pinned, aml_cuda.use_pinned_with_cupy(pinned) as hook:
        mem = cupy.cuda.alloc_pinned_memory(10_000)
        assert pinned.pinned_stats.bytes_reserved == 12_288
        assert aml_cuda.pointer_attributes(mem.ptr).memory_type == "host"  # registered
        del mem
        gc.collect()
        assert hook.live == 0


_CHILD = r"""
import gc, json
import numpy as np
import aml_core, aml_cuda
import numba.cuda as nc

pool = aml_core.pool(aml_cuda.create(0), limit=64 << 20)
aml_cuda.use_with_numba(pool)
out = {}
d = nc.to_device(np.arange(1000, dtype=np.float32))
out["numba_in_pool"] = pool.pool_stats.bytes_in_use
out["numba_roundtrip"] = bool((d.copy_to_host() == np.arange(1000, dtype=np.float32)).all())
try:
    nc.device_array(128 << 20, dtype=np.uint8)
except MemoryError as exc:
    out["numba_refused"] = type(exc).__name__
handle = d.get_ipc_handle()  # Numba's IpcArrayHandle around the memory manager's handle
out["ipc_handle"] = [type(handle).__name__, type(getattr(handle, "_ipc_handle", None)).__name__]
try:
    import cupy
    with aml_cuda.cupy_scope(pool):
        c = cupy.ones(1000, dtype=cupy.float32)
    shared = cupy.asarray(d)  # Numba's array in CuPy through CAI: no copy
    out["cai_zero_copy"] = shared.data.ptr == d.__cuda_array_interface__["data"][0]
    out["cupy_sum"] = float((shared + c).sum())
except ImportError:
    pass
out["numba_has_dlpack"] = hasattr(d, "__dlpack__")
try:
    import torch
    aml_cuda.use_with_torch(pool)
    t = torch.ones(1000, device="cuda")
    address = d.__cuda_array_interface__["data"][0]
    # Numba exports through CUDA Array Interface (numba-cuda 0.30 has no __dlpack__)
    out["torch_cai_zero_copy"] = torch.as_tensor(d, device="cuda").data_ptr() == address
    if "cai_zero_copy" in out:  # CuPy's view of Numba's array, into PyTorch by DLPack
        out["torch_from_dlpack_zero_copy"] = torch.from_dlpack(shared).data_ptr() == address
    out["all_in_pool"] = pool.pool_stats.bytes_in_use
except ImportError:
    pass
print(json.dumps(out))
"""


def test_numba_cupy_and_torch_share_one_pool() -> None:
    pytest.importorskip("numba.cuda")
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["numba_in_pool"] == 4000
    assert out["numba_roundtrip"] is True
    assert out["numba_refused"] == "AMLMemoryError"
    assert out["ipc_handle"] == ["IpcArrayHandle", "AmlIpcHandle"]
    if "cai_zero_copy" in out:
        assert out["cai_zero_copy"] is True
        assert out["cupy_sum"] == float(sum(range(1000)) + 1000)
    if "all_in_pool" in out:
        assert out["torch_cai_zero_copy"] is True
        if "cai_zero_copy" in out:
            assert out["torch_from_dlpack_zero_copy"] is True
        assert out["all_in_pool"] >= 4000 + 4000 + 4000
