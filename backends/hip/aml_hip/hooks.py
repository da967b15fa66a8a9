"""Allocator hooks of aml-hip: CuPy and PyTorch allocate from an aml_hip area or a pool
over one.

The hooks are :mod:`aml_core.gpu.hooks`, written once for the GPU backends (aml-cuda has the
same two functions), bound here to the ``hip`` backend. The ROCm builds of CuPy and PyTorch
keep the CUDA names (``cupy.cuda.set_allocator``, ``torch.cuda.memory.CUDAPluggableAllocator``,
tensors on ``device="cuda"``), and a HIP device pointer is what they allocate, so the hooks
are the same code; the rules (one CuPy hook at a time, whatever its backend; ``uninstall``
while CuPy holds memory; PyTorch's one allocator per process) are there::

    pool = aml_core.pool(aml_hip.create(0))
    with aml_hip.use_with_cupy(pool):
        x = cupy.zeros(1 << 20)             # from the pool (CuPy for ROCm)
"""

from __future__ import annotations

from aml_core.area import Area
from aml_core.gpu import hooks as _hooks
from aml_core.gpu import torch_pool as _torch_pool
from aml_core.gpu.hooks import CupyHook, TorchHook
from aml_core.gpu.torch_pool import TorchMemPool
from aml_core.pool import Pool

__all__ = ["CupyHook", "TorchHook", "TorchMemPool", "torch_mem_pool", "use_with_cupy", "use_with_torch"]

#: The backend the hooks take areas of.
BACKEND_NAME = "hip"


def use_with_cupy(area: Area, *, pinned: Area | None = None) -> CupyHook:
    """Make CuPy (its ROCm build) allocate device memory from ``area`` (an aml_hip device or
    managed area, or a pool over one) and pinned host memory from ``pinned`` (a host-kind
    area), if given (:func:`aml_core.gpu.hooks.use_with_cupy`). ``hook.uninstall()``, or
    leaving it as a context manager, restores CuPy's previous allocators."""
    return _hooks.use_with_cupy(area, pinned=pinned, backend=BACKEND_NAME)


def use_with_torch(area: Area) -> TorchHook:
    """Make PyTorch (its ROCm build) allocate GPU memory from ``area`` (an aml_hip device
    area or a pool over one) through ``torch.cuda.memory.CUDAPluggableAllocator``, before
    PyTorch's first GPU allocation, once per process
    (:func:`aml_core.gpu.hooks.use_with_torch`)."""
    return _hooks.use_with_torch(area, backend=BACKEND_NAME)


def torch_mem_pool(pool: Pool, *, device: int | None = None) -> TorchMemPool:
    """A ``torch.cuda.MemPool`` over ``pool`` (an aml_hip device or managed pool), for
    ``with mp.use():`` / ``torch.cuda.use_mem_pool(mp.mempool)`` at any time, several at
    once; ``mp.close()`` gives its memory back to the pool
    (:mod:`aml_core.gpu.torch_pool`)."""
    return _torch_pool.torch_mem_pool(pool, device=device, backend=BACKEND_NAME)
