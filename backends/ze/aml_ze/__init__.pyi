# The public names of aml_ze, declared once: type checkers read this stub, and
# aml_ze/__init__.py builds its lazy __getattr__, dir() and __all__ from it
# (aml_core.lazy.lazy_stub).

from aml_core.gpu import PointerAttributes as PointerAttributes
from aml_core.gpu.vmm_exports import *  # noqa: F403 - the virtual-memory and IPC types of every GPU backend

from .api import BACKEND as BACKEND
from .api import get_runtime as get_runtime
from .api import load_runtime as load_runtime
from .area import ZeArea as ZeArea
from .area import ZeDeviceFlags as ZeDeviceFlags
from .area import ZeFlags as ZeFlags
from .area import ZeHostFlags as ZeHostFlags
from .runtime import AllocProperties as AllocProperties

# BACKEND's methods, as functions: AML's Level Zero area API, IPC, virtual memory, the probe.
alloc_properties = BACKEND.alloc_properties
default_device_area = BACKEND.default_device_area
default_host_area = BACKEND.default_host_area
destroy = BACKEND.destroy
device_area = BACKEND.device_area
host_area = BACKEND.host_area
ipc_close = BACKEND.ipc_close
ipc_open = BACKEND.ipc_open
pointer_attributes = BACKEND.pointer_attributes
probe = BACKEND.probe
virtual_memory = BACKEND.virtual_memory

__version__: str
