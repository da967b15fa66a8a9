"""The public API of aml-ze (imported on first use by :mod:`aml_ze`).

:data:`BACKEND` is a :class:`aml_ze.area.ZeBackend` over :class:`aml_ze.runtime.ZeRuntime`;
the functions are its bound methods: AML's Level Zero area API
(``aml_area_ze_device_create``, ``aml_area_ze_host_create``, ``aml_area_ze_destroy``,
``aml_area_ze_device``, ``aml_area_ze_host``) plus IPC, virtual memory and the probe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from . import plugin
from .area import ZeArea, ZeBackend, ZeDeviceFlags, ZeFlags, ZeHostFlags
from .runtime import AllocProperties

if TYPE_CHECKING:
    from .runtime import ZeRuntime

__all__ = [
    "BACKEND",
    "AllocProperties",
    "ZeArea",
    "ZeDeviceFlags",
    "ZeFlags",
    "ZeHostFlags",
    "alloc_properties",
    "default_device_area",
    "default_host_area",
    "destroy",
    "device_area",
    "get_runtime",
    "host_area",
    "ipc_close",
    "ipc_open",
    "load_runtime",
    "pointer_attributes",
    "probe",
    "virtual_memory",
]


def load_runtime() -> ZeRuntime:
    """Load the Level Zero loader and initialise the first driver; ENOTSUP (with the
    reason) when there is no loader or no driver. Creates no context."""
    from .native import load
    from .runtime import ZeRuntime

    return ZeRuntime(load())


#: The Level Zero backend (lazy: the loader is loaded on first use; ``BACKEND.reset()``
#: forgets it, e.g. after changing ``AML_ZE_LIBRARY``).
BACKEND = ZeBackend(plugin.NAME, load_runtime, precheck=plugin.precheck, description=plugin.DESCRIPTION)


def get_runtime() -> ZeRuntime:
    """The loaded :class:`~aml_ze.runtime.ZeRuntime` (loads the loader)."""
    return cast("ZeRuntime", BACKEND.runtime)


device_area = BACKEND.device_area
host_area = BACKEND.host_area
destroy = BACKEND.destroy
default_device_area = BACKEND.default_device_area
default_host_area = BACKEND.default_host_area
ipc_open = BACKEND.ipc_open
ipc_close = BACKEND.ipc_close
virtual_memory = BACKEND.virtual_memory
probe = BACKEND.probe
pointer_attributes = BACKEND.pointer_attributes
alloc_properties = BACKEND.alloc_properties
