# The types of aml_core.gpu's virtual-memory and IPC API that every GPU backend package
# re-exports (aml_cuda, aml_hip, aml_ze, aml_hsa): its __init__.pyi includes them with
# `from aml_core.gpu.vmm_exports import *` (aml_core.lazy reads the inclusion too).

from aml_core.gpu import Access as Access
from aml_core.gpu import AllocationProperties as AllocationProperties
from aml_core.gpu import GrowableBuffer as GrowableBuffer
from aml_core.gpu import IpcExport as IpcExport
from aml_core.gpu import IpcHandle as IpcHandle
from aml_core.gpu import Physical as Physical
from aml_core.gpu import Reservation as Reservation
from aml_core.gpu import VirtualMemory as VirtualMemory
