"""Deprecated in 0.3 (removed in 0.4): the hooks are aml_hip's own names, its BACKEND's
methods; each old name reads with a DeprecationWarning (:data:`aml_core.gpu.backend.HOOKS_MODULE_NAMES`)."""

from __future__ import annotations

from aml_core.gpu.backend import HOOKS_MODULE_NAMES
from aml_core.lazy import moved_names

__getattr__ = moved_names(__name__, "aml_hip", HOOKS_MODULE_NAMES, deprecated="0.3", removed="0.4")
