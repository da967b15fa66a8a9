"""Lazy module attributes: a package lists its public names and the modules that define
them, and each is imported on first use. GPU plugin modules import their package on every
``aml_core.backends()`` call, GPU or not, so packages stay cheap to import this way."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, where: Mapping[str, str], *, distribution: str | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: each name of ``where`` is read from
    its module (relative to the package) on first use, or from a dotted path in it
    (``"module:BACKEND.create"``, ``"aml_core.gpu:GpuFlags"`` for an alias), and then
    cached in the package; ``__version__`` is the installed ``distribution``'s version."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        if name == "__version__" and distribution is not None:
            from importlib.metadata import PackageNotFoundError, version

            try:
                value: Any = version(distribution)
            except PackageNotFoundError:  # an uninstalled source tree
                value = "0+unknown"
        else:
            module = where.get(name)
            if module is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            module, _, path = module.partition(":")
            value = importlib.import_module(module, package)
            for attribute in (path or name).split("."):
                value = getattr(value, attribute)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__
