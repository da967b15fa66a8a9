# The public names every CUDA/HIP backend package (aml_cuda, aml_hip) exports, declared
# once for both: its __init__.pyi includes them with `from aml_core.gpu.exports import *`.
# They are the types of aml_core.gpu it re-exports, its BACKEND (a GpuBackend; declared
# without a value, so aml_core.lazy reads the including package's api.BACKEND) and
# BACKEND's bound methods as functions (`aml_hip.create is aml_hip.BACKEND.create`).

from typing import Any

from aml_core.gpu import CPU as CPU
from aml_core.gpu import INVALID as INVALID
from aml_core.gpu import Advice as Advice
from aml_core.gpu import AttachFlags as AttachFlags
from aml_core.gpu import CoherencyMode as CoherencyMode
from aml_core.gpu import LocationType as LocationType
from aml_core.gpu import PointerAttributes as PointerAttributes
from aml_core.gpu import RangeAttribute as RangeAttribute
from aml_core.gpu import Stream as Stream
from aml_core.gpu.backend import GpuBackend
from aml_core.gpu.cupy_scope import CupyPinnedHook as CupyPinnedHook
from aml_core.gpu.cupy_scope import CupyScope as CupyScope
from aml_core.gpu.hooks import CupyHook as CupyHook
from aml_core.gpu.hooks import TorchHook as TorchHook
from aml_core.gpu.pinned_pool import PinnedPool as PinnedPool
from aml_core.gpu.pinned_pool import PinnedPoolStats as PinnedPoolStats
from aml_core.gpu.torch_pool import TorchMemPool as TorchMemPool
from aml_core.gpu.vmm_exports import *  # noqa: F403

BACKEND: GpuBackend[Any]

can_access_peer = BACKEND.can_access_peer
copy_peer = BACKEND.copy_peer
create = BACKEND.create
cupy_scope = BACKEND.cupy_scope
default_area = BACKEND.default_area
destroy = BACKEND.destroy
disable_peer_access = BACKEND.disable_peer_access
enable_peer_access = BACKEND.enable_peer_access
ipc_close = BACKEND.ipc_close
ipc_open = BACKEND.ipc_open
numba_manager = BACKEND.numba_manager
pinned_pool = BACKEND.pinned_pool
pointer_attributes = BACKEND.pointer_attributes
probe = BACKEND.probe
stream = BACKEND.stream
torch_mem_pool = BACKEND.torch_mem_pool
unified_area = BACKEND.unified_area
use_pinned_with_cupy = BACKEND.use_pinned_with_cupy
use_with_cupy = BACKEND.use_with_cupy
use_with_numba = BACKEND.use_with_numba
use_with_torch = BACKEND.use_with_torch
virtual_memory = BACKEND.virtual_memory
