"""aml-cuda: aml's backend for NVIDIA GPUs (AML's CUDA area, after ``aml_area_cuda``).

Quick start::

    import aml_cuda
    from aml_cuda import CudaFlags

    with aml_cuda.create(0, CudaFlags.ALLOC_UNIFIED | CudaFlags.ALLOC_GLOBAL) as area:
        buf = area.mmap(1 << 20)
        area.prefetch(buf, 0)                 # managed memory to device 0
        ...
        area.munmap(buf)

Public API (the same names as aml-hip's: both include ``aml_core/gpu/exports.pyi``):
``create(device, flags)`` / ``destroy(area)``, ``CudaFlags`` (DEFAULT, ALLOC_HOST,
ALLOC_UNIFIED, ALLOC_MAPPED, ALLOC_GLOBAL), ``default_area()``, ``unified_area()``,
``ipc_open(handle)`` / ``ipc_close(buffer)``, ``virtual_memory(device)``, ``stream()``,
``probe()``, ``pointer_attributes(ptr)``, ``get_runtime()``, ``load_runtime()``,
``BACKEND`` and the managed-memory, IPC and virtual-memory types of :mod:`aml_core.gpu`;
``MIN_BINDINGS`` is aml-cuda's own (the oldest cuda-bindings it runs on);
``use_with_cupy(area)`` / ``use_with_torch(area)`` (CuPy or PyTorch allocates from an
aml area or pool, :mod:`aml_core.gpu.hooks`) are also aml-hip's, each bound to its backend.

Importing this package is cheap: the API (and aml_core.gpu) is loaded on first use,
cuda-bindings only when the runtime is first needed, so that the registry can import
the plugin on machines without CUDA.
"""

from __future__ import annotations

from aml_core.lazy import lazy_stub

# The public names are declared once, in __init__.pyi (what type checkers read).
__getattr__, __dir__ = lazy_stub(__name__, distribution="aml-cuda")
