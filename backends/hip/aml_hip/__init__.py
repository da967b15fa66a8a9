"""aml-hip: AML's HIP areas , managed memory , IPC  and
HIP virtual memory, over ``libamdhip64`` through ctypes.

Quick start::

    import aml_hip
    from aml_hip import HipFlags

    area = aml_hip.create(0, HipFlags.ALLOC_UNIFIED | HipFlags.ALLOC_GLOBAL)  # aml_area_hip_create
    buf = area.mmap(1 << 20)                       # hipMallocManaged(..., hipMemAttachGlobal)
    area.advise(buf, aml_hip.Advice.SET_READ_MOSTLY, 0)
    area.prefetch(buf, 0)
    area.munmap(buf)
    aml_hip.destroy(area)                          # aml_area_hip_destroy (= area.close())

Importing this package loads no native library: the API is loaded on first use, and the
library when the runtime is first needed (``libamdhip64.so.7``, ``.so.6``, ``.so.5``;
``AML_HIP_LIBRARY`` names another file). The public names are aml-cuda's (see
:data:`aml_core.gpu.plugin.GPU_FUNCTIONS`), with ``HipArea``, ``HipFlags`` and
``HipMmapOptions`` for AML's HIP names: the area logic is :mod:`aml_core.gpu`, written
once for both. ``use_with_cupy(area)`` / ``use_with_torch(area)`` make CuPy or PyTorch (their
ROCm builds) allocate from an aml_hip area or pool, as aml_cuda's do (:mod:`aml_hip.hooks`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aml_core.gpu.plugin import GPU_FUNCTIONS, GPU_HOOKS, GPU_TYPES, gpu_exports
from aml_core.lazy import lazy_exports

if TYPE_CHECKING:
    # AML's names for the area, its flags and mmap options (aml_area_hip_*).
    from aml_core.gpu import GpuArea as HipArea
    from aml_core.gpu import GpuFlags as HipFlags
    from aml_core.gpu import GpuMmapOptions as HipMmapOptions
    from aml_core.gpu.exports import *  # noqa: F403  (the names every GPU backend exports)

    from .api import get_runtime as get_runtime
    from .api import load_runtime as load_runtime
    from .hooks import CupyHook as CupyHook
    from .hooks import TorchHook as TorchHook
    from .hooks import use_with_cupy as use_with_cupy
    from .hooks import use_with_torch as use_with_torch

__all__ = [  # noqa: PLE0604  (the shared names, then this backend's own)
    *GPU_TYPES,
    *GPU_FUNCTIONS,
    *GPU_HOOKS,
    "HipArea",
    "HipFlags",
    "HipMmapOptions",
]
__getattr__, __dir__ = lazy_exports(
    __name__, gpu_exports("Hip") | dict.fromkeys(GPU_HOOKS, ".hooks"), distribution="aml-hip"
)
