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
``AML_HIP_LIBRARY`` names another file). The public names are aml-cuda's (both
include ``aml_core/gpu/exports.pyi``), with ``HipArea``, ``HipFlags`` and
``HipMmapOptions`` for AML's HIP names: the area logic is :mod:`aml_core.gpu`, written
once for both. ``use_with_cupy(area)`` / ``use_with_torch(area)`` make CuPy or PyTorch (their
ROCm builds) allocate from an aml_hip area or pool, as aml_cuda's do (``BACKEND``'s methods,
:mod:`aml_core.gpu.hooks`).
"""

from __future__ import annotations

from aml_core.lazy import lazy_stub

# The public names are declared once, in __init__.pyi (what type checkers read).
__getattr__, __dir__ = lazy_stub(__name__, distribution="aml-hip")
