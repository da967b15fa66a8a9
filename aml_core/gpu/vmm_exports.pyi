# The typed names of aml_core.gpu.plugin.GPU_VMM_TYPES: the virtual-memory and IPC types a GPU
# backend package without all of GPU_TYPES (aml_ze, aml_hsa) re-exports. Its __init__.py
# imports this under TYPE_CHECKING; at run time its lazy __getattr__ resolves the same
# names from aml_core.gpu. tests/test_groups.py checks that the two lists agree.

from aml_core.gpu import Access as Access
from aml_core.gpu import AllocationProperties as AllocationProperties
from aml_core.gpu import GrowableBuffer as GrowableBuffer
from aml_core.gpu import IpcExport as IpcExport
from aml_core.gpu import IpcHandle as IpcHandle
from aml_core.gpu import Physical as Physical
from aml_core.gpu import Reservation as Reservation
from aml_core.gpu import VirtualMemory as VirtualMemory
