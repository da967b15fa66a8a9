# The public names of aml_hsa, declared once: type checkers read this stub, and
# aml_hsa/__init__.py builds its lazy __getattr__, dir() and __all__ from it
# (aml_core.lazy.lazy_stub).

from aml_core.gpu.vmm_exports import *  # noqa: F403 - the virtual-memory and IPC types of every GPU backend

from .api import BACKEND as BACKEND
from .api import HsaBackend as HsaBackend
from .api import get_runtime as get_runtime
from .api import load_runtime as load_runtime
from .area import PoolArea as PoolArea
from .topology import Agent as Agent
from .topology import AgentType as AgentType
from .topology import MemoryType as MemoryType
from .topology import Permission as Permission
from .topology import Pool as Pool
from .topology import PoolLocation as PoolLocation
from .topology import Segment as Segment
from .vmem import address_free as address_free
from .vmem import address_reserve as address_reserve
from .vmem import address_reserve_align as address_reserve_align
from .vmem import agents as agents
from .vmem import device_pool as device_pool
from .vmem import export_shareable_handle as export_shareable_handle
from .vmem import get_access as get_access
from .vmem import get_alloc_properties_from_handle as get_alloc_properties_from_handle
from .vmem import handle_create as handle_create
from .vmem import handle_release as handle_release
from .vmem import host_pool as host_pool
from .vmem import import_shareable_handle as import_shareable_handle
from .vmem import map as map
from .vmem import pools as pools
from .vmem import retain_alloc_handle as retain_alloc_handle
from .vmem import set_access as set_access
from .vmem import unmap as unmap

# BACKEND's methods, as functions: pool areas, IPC, virtual memory, the probe.
create = BACKEND.create
default_area = BACKEND.default_area
destroy = BACKEND.destroy
host_area = BACKEND.host_area
ipc_close = BACKEND.ipc_close
ipc_open = BACKEND.ipc_open
probe = BACKEND.probe
virtual_memory = BACKEND.virtual_memory

__version__: str
