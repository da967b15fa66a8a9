"""The public API of aml-hip (imported on first use by :mod:`aml_hip`).

:data:`BACKEND` is the shared GPU logic of :mod:`aml_core.gpu` over
:class:`aml_hip.runtime.HipRuntime`; the package's functions are its bound methods:
AML's HIP area
API (``aml_area_hip_create``, ``aml_area_hip_destroy``, ``aml_area_hip``,
``aml_area_hip_unified``) plus IPC, virtual memory and streams. The public names are declared once, in
``aml_hip/__init__.pyi``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aml_core.gpu.backend import GpuBackend

from . import plugin

if TYPE_CHECKING:
    from .runtime import HipRuntime


def load_runtime() -> HipRuntime:
    """Load ``libamdhip64`` and build the runtime; ENOTSUP (with the reason) when no
    usable library is found. Touches no device."""
    from .native import load
    from .runtime import HipRuntime

    return HipRuntime(load())


#: The HIP backend (lazy: the library is loaded on first use; ``BACKEND.reset()``
#: forgets it, e.g. after changing ``AML_HIP_LIBRARY``).
BACKEND = GpuBackend(plugin.NAME, load_runtime, precheck=plugin.precheck, description=plugin.DESCRIPTION)


def get_runtime() -> HipRuntime:
    """The loaded :class:`~aml_hip.runtime.HipRuntime` (loads the library)."""
    return BACKEND.runtime
