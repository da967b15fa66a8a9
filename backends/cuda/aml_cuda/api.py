"""The public API of aml-cuda (imported on first use by :mod:`aml_cuda`).

:data:`BACKEND` is the shared GPU logic of :mod:`aml_core.gpu` over
:class:`aml_cuda.runtime.CudaRuntime`; the package's functions are its bound methods:
AML's CUDA
area API (``aml_area_cuda_create``, ``aml_area_cuda_destroy``, ``aml_area_cuda``,
``aml_area_cuda_unified``) plus IPC, virtual memory and streams. The public names are declared once, in
``aml_cuda/__init__.pyi``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aml_core.errors import AMLNotSupported
from aml_core.gpu.backend import GpuBackend

from . import plugin

if TYPE_CHECKING:
    from .runtime import CudaRuntime


def load_runtime() -> CudaRuntime:
    """Import cuda-bindings and build the runtime; ENOTSUP (with the reason) when
    cuda-bindings is missing, too old or broken. Touches no device."""
    try:
        from . import native
    except AMLNotSupported:
        raise
    except Exception as exc:
        raise AMLNotSupported(f"cuda-bindings could not be loaded: {type(exc).__name__}: {exc}") from exc
    native.bindings()  # checked at each load: the installed binding may have changed
    try:
        from .runtime import CudaRuntime
    except AMLNotSupported:
        raise
    except Exception as exc:
        raise AMLNotSupported(
            f"cuda-bindings {native.bindings_version()} could not be loaded: {type(exc).__name__}: {exc}"
        ) from exc
    return CudaRuntime()


BACKEND = GpuBackend(plugin.NAME, load_runtime, precheck=plugin.precheck, description=plugin.DESCRIPTION)


def get_runtime() -> CudaRuntime:
    """The loaded :class:`~aml_cuda.runtime.CudaRuntime` (ENOTSUP without cuda-bindings)."""
    return BACKEND.runtime
