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
once for both.
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
        HipArea as HipArea,
    )
    from .api import (
        HipFlags as HipFlags,
    )
    from .api import (
        HipMmapOptions as HipMmapOptions,
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

_OWN = ("HipArea", "HipFlags", "HipMmapOptions")
__all__ = [*GPU_TYPES, *GPU_FUNCTIONS, *_OWN, "__version__"]  # noqa: PLE0604
__getattr__, __dir__ = lazy_exports(__name__, gpu_exports(*_OWN), distribution="aml-hip")
