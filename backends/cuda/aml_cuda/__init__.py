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
``MIN_BINDINGS`` is aml-cuda's own (the oldest cuda-bindings it runs on), and so are
``use_with_cupy(area)`` / ``use_with_torch(area)`` (CuPy or PyTorch allocates from an
aml area or pool).

Importing this package is cheap: the API (and aml_core.gpu) is loaded on first use,
cuda-bindings only when the runtime is first needed, so that the registry can import
the plugin on machines without CUDA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aml_core.gpu.plugin import GPU_FUNCTIONS, GPU_TYPES, gpu_exports
from aml_core.lazy import lazy_exports

if TYPE_CHECKING:
    from aml_core.gpu import (
        CPU as CPU,
    )
    from aml_core.gpu import (
        INVALID as INVALID,
    )
    from aml_core.gpu import (
        Access as Access,
    )
    from aml_core.gpu import (
        Advice as Advice,
    )
    from aml_core.gpu import (
        AllocationProperties as AllocationProperties,
    )
    from aml_core.gpu import (
        AttachFlags as AttachFlags,
    )
    from aml_core.gpu import (
        CoherencyMode as CoherencyMode,
    )
    from aml_core.gpu import (
        GrowableBuffer as GrowableBuffer,
    )
    from aml_core.gpu import (
        IpcExport as IpcExport,
    )
    from aml_core.gpu import (
        IpcHandle as IpcHandle,
    )
    from aml_core.gpu import (
        LocationType as LocationType,
    )
    from aml_core.gpu import (
        Physical as Physical,
    )
    from aml_core.gpu import (
        PointerAttributes as PointerAttributes,
    )
    from aml_core.gpu import (
        RangeAttribute as RangeAttribute,
    )
    from aml_core.gpu import (
        Reservation as Reservation,
    )
    from aml_core.gpu import (
        Stream as Stream,
    )
    from aml_core.gpu import (
        VirtualMemory as VirtualMemory,
    )

    from .api import (
        BACKEND as BACKEND,
    )
    from .api import (
        MIN_BINDINGS as MIN_BINDINGS,
    )
    from .api import (
        CudaArea as CudaArea,
    )
    from .api import (
        CudaFlags as CudaFlags,
    )
    from .api import (
        CudaMmapOptions as CudaMmapOptions,
    )
    from .api import (
        create as create,
    )
    from .api import (
        default_area as default_area,
    )
    from .api import (
        destroy as destroy,
    )
    from .api import (
        get_runtime as get_runtime,
    )
    from .api import (
        ipc_close as ipc_close,
    )
    from .api import (
        ipc_open as ipc_open,
    )
    from .api import (
        load_runtime as load_runtime,
    )
    from .api import (
        pointer_attributes as pointer_attributes,
    )
    from .api import (
        probe as probe,
    )
    from .api import (
        stream as stream,
    )
    from .api import (
        unified_area as unified_area,
    )
    from .api import (
        virtual_memory as virtual_memory,
    )
    from .hooks import (
        CupyHook as CupyHook,
    )
    from .hooks import (
        TorchHook as TorchHook,
    )
    from .hooks import (
        use_with_cupy as use_with_cupy,
    )
    from .hooks import (
        use_with_torch as use_with_torch,
    )

_OWN = ("CudaArea", "CudaFlags", "CudaMmapOptions", "MIN_BINDINGS")
_HOOKS = ("CupyHook", "TorchHook", "use_with_cupy", "use_with_torch")
__all__ = [*GPU_TYPES, *GPU_FUNCTIONS, *_OWN, *_HOOKS, "__version__"]  # noqa: PLE0604
__getattr__, __dir__ = lazy_exports(
    __name__, gpu_exports(*_OWN) | dict.fromkeys(_HOOKS, ".hooks"), distribution="aml-cuda"
)
