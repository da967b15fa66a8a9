# The public names of aml_cuda, declared once: type checkers read this stub, and
# aml_cuda/__init__.py builds its lazy __getattr__, dir() and __all__ from it
# (aml_core.lazy.lazy_stub).

from aml_core.gpu import GpuArea, GpuFlags, GpuMmapOptions
from aml_core.gpu.exports import *  # noqa: F403 - the names of every CUDA/HIP backend: BACKEND and its functions

from .api import get_runtime as get_runtime
from .api import load_runtime as load_runtime
from .native import MIN_BINDINGS as MIN_BINDINGS

# AML's names for the area, its flags and mmap options (aml_area_cuda_*).
CudaArea = GpuArea
CudaFlags = GpuFlags
CudaMmapOptions = GpuMmapOptions

__version__: str
