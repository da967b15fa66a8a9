"""The backend object of aml-ze (imported on first use by :mod:`aml_ze`).

:data:`BACKEND` is a :class:`aml_ze.area.ZeBackend` over :class:`aml_ze.runtime.ZeRuntime`;
the package's functions are its bound methods: AML's Level Zero area API
(``aml_area_ze_device_create``, ``aml_area_ze_host_create``, ``aml_area_ze_destroy``,
``aml_area_ze_device``, ``aml_area_ze_host``) plus IPC, virtual memory and the probe. The
public names are declared once, in ``aml_ze/__init__.pyi``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import plugin
from .area import ZeBackend

if TYPE_CHECKING:
    from .runtime import ZeRuntime


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
    return BACKEND.runtime
