"""aml-hsa: AMD GPUs through HSA/ROCr (``libhsa-runtime64``, ctypes): agents and memory
pools, pool areas, the ``hsa_amd_vmem_*`` virtual-memory API and HSA IPC.

Two APIs for virtual memory:

* the one aml-cuda and aml-hip share: ``aml_hsa.virtual_memory(device)`` is an
  :class:`aml_core.gpu.VirtualMemory` (reserve, create, map, access, export/import an fd,
  retain, properties, one-step and growable buffers) over the device's coarse-grained pool;
* the vendor's calls under the vendor's names, **HSA-only** (:mod:`aml_hsa.vmem`):
  ``address_reserve``, ``address_reserve_align`` (ROCm 6.2+), ``address_free``,
  ``handle_create``, ``handle_release``, ``map``, ``unmap``, ``set_access``, ``get_access``,
  ``export_shareable_handle``, ``import_shareable_handle``, ``retain_alloc_handle``,
  ``get_alloc_properties_from_handle``, with ``agents``, ``pools``, ``device_pool``,
  ``host_pool`` and the enums ``Permission``, ``MemoryType``, ``Segment``, ``AgentType``.

Areas: ``aml_hsa.create(device)`` (device memory from the GPU's coarse-grained pool),
``aml_hsa.host_area()`` (a CPU fine-grained pool), or ``aml_core.area(kind=...,
backend="hsa")``. Unlike aml-cuda and aml-hip there is no managed memory, no stream and no
``pointer_attributes``; areas take no flags.

Importing this package loads no native library. The library is ``libhsa-runtime64.so.1``
(``AML_HSA_LIBRARY`` names another file); ``hsa_init`` is called once per process on first
use and ``hsa_shut_down`` at exit. Debian 12's ROCr 5.2 has no ``hsa_amd_vmem_*``: there the
virtual-memory group is absent and says why (ROCm 6.0+ needed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aml_core.gpu.plugin import GPU_VMM_TYPES
from aml_core.lazy import lazy_exports

if TYPE_CHECKING:
    from aml_core.gpu.vmm_exports import *  # noqa: F403  (GPU_VMM_TYPES)

    from .api import (
        BACKEND as BACKEND,
    )
    from .api import (
        HsaBackend as HsaBackend,
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
        host_area as host_area,
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
        probe as probe,
    )
    from .api import (
        virtual_memory as virtual_memory,
    )
    from .area import PoolArea as PoolArea
    from .runtime import (
        Agent as Agent,
    )
    from .runtime import (
        AgentType as AgentType,
    )
    from .runtime import (
        MemoryType as MemoryType,
    )
    from .runtime import (
        Permission as Permission,
    )
    from .runtime import (
        Pool as Pool,
    )
    from .runtime import (
        PoolLocation as PoolLocation,
    )
    from .runtime import (
        Segment as Segment,
    )
    from .vmem import (
        address_free as address_free,
    )
    from .vmem import (
        address_reserve as address_reserve,
    )
    from .vmem import (
        address_reserve_align as address_reserve_align,
    )
    from .vmem import (
        agents as agents,
    )
    from .vmem import (
        device_pool as device_pool,
    )
    from .vmem import (
        export_shareable_handle as export_shareable_handle,
    )
    from .vmem import (
        get_access as get_access,
    )
    from .vmem import (
        get_alloc_properties_from_handle as get_alloc_properties_from_handle,
    )
    from .vmem import (
        handle_create as handle_create,
    )
    from .vmem import (
        handle_release as handle_release,
    )
    from .vmem import (
        host_pool as host_pool,
    )
    from .vmem import (
        import_shareable_handle as import_shareable_handle,
    )
    from .vmem import (
        map as map,
    )
    from .vmem import (
        pools as pools,
    )
    from .vmem import (
        retain_alloc_handle as retain_alloc_handle,
    )
    from .vmem import (
        set_access as set_access,
    )
    from .vmem import (
        unmap as unmap,
    )

_API = (
    "BACKEND",
    "HsaBackend",
    "create",
    "default_area",
    "destroy",
    "get_runtime",
    "host_area",
    "ipc_close",
    "ipc_open",
    "load_runtime",
    "probe",
    "virtual_memory",
)
_RUNTIME = ("Agent", "AgentType", "MemoryType", "Permission", "Pool", "PoolLocation", "Segment")
_VMEM = (
    "address_free",
    "address_reserve",
    "address_reserve_align",
    "agents",
    "device_pool",
    "export_shareable_handle",
    "get_access",
    "get_alloc_properties_from_handle",
    "handle_create",
    "handle_release",
    "host_pool",
    "import_shareable_handle",
    "map",
    "pools",
    "retain_alloc_handle",
    "set_access",
    "unmap",
)
_WHERE = (
    dict.fromkeys(GPU_VMM_TYPES, "aml_core.gpu")
    | dict.fromkeys(_API, ".api")
    | {"PoolArea": ".area"}
    | dict.fromkeys(_RUNTIME, ".runtime")
    | dict.fromkeys(_VMEM, ".vmem")
)
__all__ = [*_WHERE, "__version__"]  # noqa: PLE0604, F405
__getattr__, __dir__ = lazy_exports(__name__, _WHERE, distribution="aml-hsa")
