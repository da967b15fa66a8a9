"""Lazy module attributes: a package declares its public names once, in its typing stub
(``__init__.pyi``), and each is imported from the module that defines it on first use.

GPU plugin modules import their package on every ``aml_core.backends()`` call, GPU or
not, so packages stay cheap to import this way. After scientific Python's SPEC 1
(``lazy_loader.attach_stub``): the stub is what type checkers read, and the package's
``__init__.py`` is only::

    __getattr__, __dir__ = lazy_stub(__name__, distribution="aml-hip")

so the lazy ``__getattr__``, ``dir()``, ``__all__`` and the types all follow from the one
declaration (read on first use: importing the package parses nothing). A stub may hold,
at top level, only what :func:`read_stub` reads:

* ``from M import name as name`` (the typing spec's explicit re-export): a public name,
  read from ``M`` (relative to the package, or absolute); ``from M import name`` and
  ``from M import name as other`` bind a name for the lines below without exporting it;
* ``public = bound.attribute.path``: a public name read from a bound one
  (``CudaArea = GpuArea``, ``create = BACKEND.create``: BACKEND's bound method);
* ``NAME: Type`` without a value: the package's own ``api.NAME`` (how a shared stub names
  the including package's backend); ``__version__: str`` is the installed
  ``distribution``'s version;
* ``from M import *`` of another stub ``M.pyi`` (``aml_core/gpu/exports.pyi``, the names
  every CUDA/HIP backend exports): its public names, read as that stub says;
* docstrings. Anything else is refused when the package is imported (:class:`TypeError`).

Not ``lazy_loader`` itself (0.6, checked for issue 31): its ``attach_stub`` takes only
relative imports (the backends' ``from aml_core.gpu.exports import *`` is "ValueError:
Only within-module imports are supported"), has no ``public = bound.attribute`` or
``__version__`` declarations, and parses the stub when the package is imported.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping
from importlib.util import resolve_name
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ast

__all__ = ["lazy_exports", "lazy_stub", "moved_names", "read_stub"]

#: A declared name's place: "module:attribute.path" (module absolute).
_VERSION = "__version__"


def lazy_stub(
    package: str, *, distribution: str | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` of ``package`` from its ``__init__.pyi`` (see the
    module doc); ``__all__`` (the stub's public names, and ``__version__`` when the stub
    declares it) is one of the names ``__getattr__`` gives. The stub is read on first
    use, not when the package is imported."""
    module = sys.modules[package]
    stub = os.path.join(os.path.dirname(module.__file__ or ""), "__init__.pyi")
    made: list[tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]] = []

    def exports() -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
        if not made:  # two threads may both read the stub: the same table either way
            where, public = read_stub(stub, package, package)
            made.append((*lazy_exports(package, where, distribution=distribution), public))
        return made[0]

    def __getattr__(name: str) -> Any:
        getattr_, _, public = exports()
        if name == "__all__":
            module.__dict__[name] = public
            return public
        return getattr_(name)

    def __dir__() -> list[str]:
        return exports()[1]()

    return __getattr__, __dir__


def read_stub(path: str, base: str, home: str) -> tuple[dict[str, str], list[str]]:
    """The declarations of the stub at ``path``: each public name's place
    (``"module:attribute.path"``), and the public names in ``__all__`` order (sorted;
    ``__version__`` last). Relative imports are relative to package ``base``; a name
    declared without a value is ``home``'s ``api`` module's."""
    import ast  # here: importing a package reads no stub

    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except OSError as exc:
        raise ImportError(
            f"{home}: its typing stub, which declares its names, cannot be read: {exc}"
        ) from exc
    bound: dict[str, str] = {}
    public: set[str] = set()

    def refuse(node: ast.AST, why: str) -> TypeError:
        line = getattr(node, "lineno", 0)
        return TypeError(f"{path}:{line}: {why} (a lazy stub only declares names: aml_core.lazy)")

    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        if isinstance(node, ast.ImportFrom):
            module = resolve_name("." * node.level + (node.module or ""), base) if node.level else node.module
            if module is None or not node.module:
                raise refuse(node, "a submodule is not a name")
            for alias in node.names:
                if alias.name == "*":
                    where, names = _included(module, home)
                    bound.update(where)
                    public.update(names)
                    continue
                name = alias.asname or alias.name
                bound[name] = f"{module}:{alias.name}"
                if alias.asname == alias.name:
                    public.add(name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is None:
            name = node.target.id
            if name != _VERSION:
                bound[name] = f"{home}.api:{name}"
            public.add(name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) != 1 or not isinstance(targets[0], ast.Name) or node.value is None:
                raise refuse(node, "assign one name")
            name = targets[0].id
            place = _place(node.value, bound)
            if place is None:
                raise refuse(node, "a value must be a name declared above, or an attribute of one")
            bound[name] = place
            if not name.startswith("_"):
                public.add(name)
        else:
            raise refuse(node, f"a {type(node).__name__} statement")
    where = {name: bound[name] for name in public if name in bound}
    return where, sorted(public - {_VERSION}) + sorted(public & {_VERSION})


def _place(value: ast.expr, bound: Mapping[str, str]) -> str | None:
    """The place of ``bound.attribute.path``, or None for another expression."""
    import ast

    path: list[str] = []
    while isinstance(value, ast.Attribute):
        path.append(value.attr)
        value = value.value
    if not isinstance(value, ast.Name) or value.id not in bound:
        return None
    return ".".join([bound[value.id], *reversed(path)])


def _included(module: str, home: str) -> tuple[dict[str, str], list[str]]:
    """The public names of the stub ``module`` (``aml_core.gpu.exports`` is
    ``aml_core/gpu/exports.pyi``), included by a stub of ``home``."""
    parent, _, leaf = module.rpartition(".")
    directory = os.path.dirname(importlib.import_module(parent).__file__ or "")
    return read_stub(os.path.join(directory, f"{leaf}.pyi"), parent, home)


def lazy_exports(
    package: str, where: Mapping[str, str], *, distribution: str | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: each name of ``where`` is read from
    its module (relative to the package) on first use, or from a dotted path in it
    (``"module:BACKEND.create"``, ``"aml_core.gpu:GpuFlags"`` for an alias), and then
    cached in the package; ``__version__`` is the installed ``distribution``'s version."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        if name == _VERSION and distribution is not None:
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
        version = {_VERSION} if distribution is not None else set()
        return sorted(set(namespace) | set(where) | version)

    return __getattr__, __dir__


def moved_names(
    module: str, package: str, names: Mapping[str, str], *, deprecated: str, removed: str
) -> Callable[[str], Any]:
    """The ``__getattr__`` of a deprecated module whose public names moved into ``package``:
    ``names`` maps each old name to its dotted place there (``"use_with_cupy"``,
    ``"BACKEND.name"``). Reading one (``from module import name`` too) warns with a
    :class:`DeprecationWarning` naming the new place and the versions, and returns the value
    found there; any other name is an AttributeError."""

    def __getattr__(name: str) -> Any:
        place = names.get(name)
        if place is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        import warnings

        warnings.warn(
            f"{module}.{name} is deprecated since aml {deprecated} (removed in {removed}): "
            f"use {package}.{place}",
            DeprecationWarning,
            stacklevel=2,
        )
        value: Any = importlib.import_module(package)
        for part in place.split("."):
            value = getattr(value, part)
        return value

    return __getattr__
