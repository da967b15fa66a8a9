# The typed public names every GPU backend package exports (aml_core.gpu.plugin.GPU_TYPES
# and GPU_FUNCTIONS, less get_runtime and load_runtime, which each package types with its
# own runtime class). A package's __init__.py imports this under TYPE_CHECKING; at run
# time its lazy __getattr__ resolves the same names (aml_core.gpu.plugin.gpu_exports).
# tests/test_groups.py checks that the two lists agree.

from aml_core.gpu import CPU as CPU
from aml_core.gpu import INVALID as INVALID
from aml_core.gpu import Access as Access
from aml_core.gpu import Advice as Advice
from aml_core.gpu import AllocationProperties as AllocationProperties
from aml_core.gpu import AttachFlags as AttachFlags
from aml_core.gpu import CoherencyMode as CoherencyMode
from aml_core.gpu import GrowableBuffer as GrowableBuffer
from aml_core.gpu import IpcExport as IpcExport
from aml_core.gpu import IpcHandle as IpcHandle
from aml_core.gpu import LocationType as LocationType
from aml_core.gpu import Physical as Physical
from aml_core.gpu import PointerAttributes as PointerAttributes
from aml_core.gpu import RangeAttribute as RangeAttribute
from aml_core.gpu import Reservation as Reservation
from aml_core.gpu import Stream as Stream
from aml_core.gpu import VirtualMemory as VirtualMemory
from aml_core.gpu.backend import GpuBackend

BACKEND: GpuBackend
can_access_peer = BACKEND.can_access_peer
copy_peer = BACKEND.copy_peer
create = BACKEND.create
default_area = BACKEND.default_area
destroy = BACKEND.destroy
disable_peer_access = BACKEND.disable_peer_access
enable_peer_access = BACKEND.enable_peer_access
ipc_close = BACKEND.ipc_close
ipc_open = BACKEND.ipc_open
pointer_attributes = BACKEND.pointer_attributes
probe = BACKEND.probe
stream = BACKEND.stream
unified_area = BACKEND.unified_area
virtual_memory = BACKEND.virtual_memory
