# The public names of aml_core.gpu, declared once: type checkers read this stub, and
# aml_core/gpu/__init__.py builds its lazy __getattr__, dir() and __all__ from it
# (aml_core.lazy.lazy_stub).

from .area import GpuAllocation as GpuAllocation
from .area import GpuArea as GpuArea
from .area import GpuMmapOptions as GpuMmapOptions
from .backend import BackendBase as BackendBase
from .backend import GpuBackend as GpuBackend
from .flags import AllocMode as AllocMode
from .flags import GpuFlags as GpuFlags
from .flags import check_flags as check_flags
from .flags import flags_for_kind as flags_for_kind
from .flags import kind_of_flags as kind_of_flags
from .flags import mode_of_flags as mode_of_flags
from .groups import Group as Group
from .groups import capabilities as capabilities
from .ipc import IpcExport as IpcExport
from .ipc import IpcHandle as IpcHandle
from .ipc import IpcImportArea as IpcImportArea
from .managed import CPU as CPU
from .managed import INVALID as INVALID
from .managed import Advice as Advice
from .managed import AttachFlags as AttachFlags
from .managed import CoherencyMode as CoherencyMode
from .managed import LocationType as LocationType
from .managed import RangeAttribute as RangeAttribute
from .runtime import AllocationOps as AllocationOps
from .runtime import AllocationProperties as AllocationProperties
from .runtime import IpcOps as IpcOps
from .runtime import ManagedOps as ManagedOps
from .runtime import PeerOps as PeerOps
from .runtime import PointerAttributes as PointerAttributes
from .runtime import Runtime as Runtime
from .runtime import RuntimeTraits as RuntimeTraits
from .runtime import StreamOps as StreamOps
from .runtime import StreamOrderedOps as StreamOrderedOps
from .runtime import VirtualMemoryOps as VirtualMemoryOps
from .runtime import device_capabilities as device_capabilities
from .stream import Stream as Stream
from .stream import as_stream_handle as as_stream_handle
from .vmm import Access as Access
from .vmm import GrowableBuffer as GrowableBuffer
from .vmm import Physical as Physical
from .vmm import Reservation as Reservation
from .vmm import VirtualMemory as VirtualMemory
