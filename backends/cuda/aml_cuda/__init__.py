"""aml-cuda: aml's backend for NVIDIA GPUs (AML's CUDA area, after ``aml_area_cuda``).

Quick start::

    import aml_cuda
    from aml_cuda import CudaFlags

    with aml_cuda.create(0, CudaFlags.ALLOC_UNIFIED | CudaFlags.ALLOC_GLOBAL) as area:
        buf = area.mmap(1 << 20)
        area.prefetch(buf, 0)                 # managed memory to device 0
        ...
        area.munmap(buf)

Public API (the same names as aml-hip's, see :data:`aml_core.gpu.plugin.GPU_FUNCTIONS`):
``create(device, flags)`` / ``destroy(area)``, ``CudaFlags`` (DEFAULT, ALLOC_HOST,
ALLOC_UNIFIED, ALLOC_MAPPED, ALLOC_GLOBAL), ``default_area()``, ``unified_area()``,
``ipc_open(handle)`` / ``ipc_close(buffer)``, ``virtual_memory(device)``, ``stream()``,
``probe()``, ``pointer_attributes(ptr)``, ``get_runtime()``, ``load_runtime()``,
``BACKEND`` and the managed-memory, IPC and virtual-memory types of :mod:`aml_core.gpu`;
``MIN_BINDINGS`` is aml-cuda's own (the oldest cuda-bindings it runs on);
``use_with_cupy(area)`` / ``use_with_torch(area)`` (CuPy or PyTorch allocates from an
aml area or pool, :mod:`aml_cuda.hooks`) are also aml-hip's, each bound to its backend.

Importing this package is cheap: the API (and aml_core.gpu) is loaded on first use,
cuda-bindings only when the runtime is first needed, so that the registry can import
the plugin on machines without CUDA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aml_core.gpu.plugin import GPU_FUNCTIONS, GPU_HOOKS, GPU_TYPES, gpu_exports
from aml_core.lazy import lazy_exports

if TYPE_CHECKING:
    # AML's names for the area, its flags and mmap options (aml_area_cuda_*).
    from aml_core.gpu import GpuArea as CudaArea
    from aml_core.gpu import GpuFlags as CudaFlags
    from aml_core.gpu import GpuMmapOptions as CudaMmapOptions
    from aml_core.gpu.exports import *  # noqa: F403  (the names every GPU backend exports)

    from .api import get_runtime as get_runtime
    from .api import load_runtime as load_runtime
    from .hooks import CupyHook as CupyHook
    from .hooks import TorchHook as TorchHook
    from .hooks import use_with_cupy as use_with_cupy
    from .hooks import use_with_torch as use_with_torch
    from .native import MIN_BINDINGS as MIN_BINDINGS

__all__ = [  # noqa: PLE0604  (the shared names, then this backend's own)
    *GPU_TYPES,
    *GPU_FUNCTIONS,
    *GPU_HOOKS,
    "CudaArea",
    "CudaFlags",
    "CudaMmapOptions",
    "MIN_BINDINGS",
]
_HOOKS = dict.fromkeys(GPU_HOOKS, ".hooks")
__getattr__, __dir__ = lazy_exports(
    __name__, gpu_exports("Cuda") | {"MIN_BINDINGS": ".native"} | _HOOKS, distribution="aml-cuda"
)
