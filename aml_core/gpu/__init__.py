"""Shared GPU logic: AML's area flags, managed memory, IPC, virtual memory and streams,
written once over a :class:`~aml_core.gpu.runtime.Runtime` and its capability groups, which
each GPU backend implements, and the backend objects built on them (:mod:`.backend`).

The public names are declared once, in ``__init__.pyi``; each is imported from its
submodule on first use (:func:`aml_core.lazy.lazy_stub`), so that a plugin module can
import :mod:`aml_core.gpu.plugin` without loading the rest.
"""

from __future__ import annotations

from ..lazy import lazy_stub

__getattr__, __dir__ = lazy_stub(__name__)
