# The public names of aml_hip, declared once: type checkers read this stub, and
# aml_hip/__init__.py builds its lazy __getattr__, dir() and __all__ from it
# (aml_core.lazy.lazy_stub).

from aml_core.gpu import GpuArea, GpuFlags, GpuMmapOptions
from aml_core.gpu.exports import *  # noqa: F403 - the names of every CUDA/HIP backend: BACKEND and its functions

from .api import get_runtime as get_runtime
from .api import load_runtime as load_runtime

# AML's names for the area, its flags and mmap options (aml_area_hip_*).
HipArea = GpuArea
HipFlags = GpuFlags
HipMmapOptions = GpuMmapOptions

__version__: str
