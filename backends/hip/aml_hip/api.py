"""The public API of aml-hip (imported on first use by :mod:`aml_hip`).

:data:`BACKEND` is the shared GPU logic of :mod:`aml_core.gpu` over
:class:`aml_hip.runtime.HipRuntime`; the functions are its bound methods: AML's HIP area
API (``aml_area_hip_create``, ``aml_area_hip_destroy``, ``aml_area_hip``,
``aml_area_hip_unified``) plus IPC, virtual memory and streams.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from aml_core.gpu import GpuArea, GpuBackend, GpuFlags, GpuMmapOptions

from . import plugin

if TYPE_CHECKING:
    from .runtime import HipRuntime

__all__ = [
    "BACKEND",
    "HipArea",
    "HipFlags",
    "HipMmapOptions",
    "create",
    "default_area",
    "destroy",
    "get_runtime",
    "ipc_close",
    "ipc_open",
    "load_runtime",
    "pointer_attributes",
    "probe",
    "stream",
    "unified_area",
    "virtual_memory",
]

#: ``AML_AREA_HIP_FLAG_*`` with AML's names and values: DEFAULT 0, ALLOC_HOST 1,
#: ALLOC_UNIFIED 2, ALLOC_MAPPED 4, ALLOC_GLOBAL 8 (the shared :class:`aml_core.gpu.GpuFlags`).
HipFlags = GpuFlags
#: A HIP area (``struct aml_area`` of ``aml_area_hip_create``).
HipArea = GpuArea
#: ``struct aml_area_hip_mmap_options``: ``device`` and ``ptr``.
HipMmapOptions = GpuMmapOptions


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
    return cast("HipRuntime", BACKEND.runtime)


create = BACKEND.create
destroy = BACKEND.destroy
default_area = BACKEND.default_area
unified_area = BACKEND.unified_area
ipc_open = BACKEND.ipc_open
ipc_close = BACKEND.ipc_close
virtual_memory = BACKEND.virtual_memory
stream = BACKEND.stream
probe = BACKEND.probe
pointer_attributes = BACKEND.pointer_attributes
