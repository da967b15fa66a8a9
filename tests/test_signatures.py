"""Signature help and ``help()`` work on the whole public API, compiled code included.

Every name in the ``__all__`` of aml_core, its public modules and the four backends is
walked: ``inspect.signature`` works on each function, on each class (its constructor)
and on each public method the class gets from aml (the compiled ones of
aml_core._buffer and aml_core._os too: they are built with Cython's ``binding=True``).
Every area's ``mmap`` has its own docstring, as ``help()`` prints it: each option key
(the fields of the area's ``options_type``, also the keys of the TypedDict its signature
names) with what it means, and the errors it raises.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import pkgutil
import pydoc
import re
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import aml_core
from aml_core import backend_list
from aml_core.area import MMAP_ERRORS, Area, NoOptions

BACKENDS = tuple(b.package for b in backend_list.BACKENDS)
ROOT = Path(__file__).resolve().parent.parent


def _modules() -> list[types.ModuleType]:
    """aml_core, each of its public modules with an ``__all__``, and the backends."""
    found = [aml_core]
    for info in pkgutil.walk_packages(aml_core.__path__, "aml_core."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        module = importlib.import_module(info.name)
        if hasattr(module, "__all__"):
            found.append(module)
    found += [_backend(name) for name in BACKENDS]
    return found


def _backend(name: str) -> types.ModuleType:
    """A backend package: installed, else from the source tree (the core test run
    installs none; what is walked imports no GPU library)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        pass
    source = str(ROOT / "backends" / name.removeprefix("aml_"))
    sys.path.append(source)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(source)


MODULES = _modules()


def _public() -> Iterator[tuple[str, Any]]:
    """(qualified name, object) of every name in every walked ``__all__``."""
    for module in MODULES:
        for name in module.__all__:
            if not name.startswith("__"):
                yield f"{module.__name__}.{name}", getattr(module, name)


def _ours(cls: type) -> bool:
    return cls.__module__.split(".")[0] in ("aml_core", *BACKENDS)


def _methods(cls: type) -> Iterator[tuple[str, Any, Any]]:
    """(name, method, its object in the defining class's dict) of the public methods
    (functions, class and static methods) ``cls`` has from aml."""
    for name in dir(cls):
        if name.startswith("_"):
            continue
        for base in cls.__mro__:
            if name in vars(base):
                raw = vars(base)[name]
                break
        else:  # pragma: no cover - dir() lists what the MRO has
            continue
        if not _ours(base) or isinstance(raw, property) or not callable(getattr(cls, name)):
            continue
        if isinstance(raw, type) or (issubclass(cls, enum.Enum) and name in cls.__members__):
            continue  # a nested class, or an enum member that happens to be callable
        yield name, getattr(cls, name), raw


def _not_called(obj: Any) -> bool:
    """Names for annotations only (``dict[int, ...]`` aliases, TypedDicts), and exception
    classes whose constructor is BaseException's (which has no signature in Python)."""
    if typing.get_origin(obj) is not None or typing.is_typeddict(obj):
        return True
    return (
        isinstance(obj, type)
        and issubclass(obj, BaseException)
        and isinstance(obj.__init__, types.WrapperDescriptorType)
    )


def _callables() -> dict[str, Any]:
    """qualified name -> callable: each public function and class once, and each method
    once (under the first public class seen that has it)."""
    found: dict[str, Any] = {}
    seen: set[int] = set()
    for qualname, obj in _public():
        if id(obj) in seen or not callable(obj) or _not_called(obj):
            continue
        seen.add(id(obj))
        found[qualname] = obj
        if isinstance(obj, type):
            for name, method, raw in _methods(obj):
                if id(raw) not in seen:
                    seen.add(id(raw))
                    found[f"{qualname}.{name}"] = method
    return found


CALLABLES = _callables()


def _python_function(obj: Any) -> bool:
    """A function (or method) written in Python: ``inspect.signature`` reads it from its
    code object, so it cannot fail; what can is compiled code (Cython functions,
    builtins) and classes (a constructor from a compiled base)."""
    return inspect.isfunction(inspect.unwrap(getattr(obj, "__func__", obj)))


#: The callables whose signature can be missing: compiled functions and methods, classes.
COMPILED = {name: obj for name, obj in CALLABLES.items() if not _python_function(obj)}


def test_the_walk_sees_the_compiled_api() -> None:
    """The walk covers what this test is for (a guard against an empty walk)."""
    assert "aml_core.Area.mmap" in CALLABLES
    assert "aml_core.Area.munmap" in CALLABLES  # compiled: AreaBase.munmap
    assert "aml_core.host.HostArea.mmap" in CALLABLES
    assert len(CALLABLES) > 300, len(CALLABLES)


def test_the_walk_keeps_the_compiled_callables() -> None:
    """Only Python functions are left out of test_signature (they were 471 of its 614
    cases, which could not fail): compiled methods and every class stay."""
    assert "aml_core.Area.munmap" in COMPILED  # compiled: AreaBase.munmap
    assert "aml_core.Area.mmap" in COMPILED  # the compiled mmap under the area's signature
    assert "aml_core.host.HostArea" in COMPILED  # a class: its constructor
    assert all(_python_function(obj) for name, obj in CALLABLES.items() if name not in COMPILED)


@pytest.mark.parametrize("qualname", sorted(COMPILED))
def test_signature(qualname: str) -> None:
    inspect.signature(COMPILED[qualname])  # raises ValueError where there is none


def test_compiled_functions_have_signatures() -> None:
    """The compiled modules' own functions and methods, private ones too: what a
    traceback, a debugger or an IDE shows."""
    from aml_core import _buffer, _compiled, _os

    checked = 0
    for module in [importlib.import_module(name) for name in _compiled.COMPILED]:
        for name, obj in vars(module).items():
            if name.startswith("__") or getattr(obj, "__module__", None) != module.__name__:
                continue
            targets = [obj]
            if isinstance(obj, type):
                targets += [m for n, m in vars(obj).items() if not n.startswith("__") and callable(m)]
            for target in targets:
                inspect.signature(target)
                checked += 1
        # A compiled class's signature is written in its docstring: it must say what the
        # module's stub (what mypy checks callers against) says.
        stub_name = module.__name__.removeprefix("aml_core.") + ".pyi"
        stub = ast.parse((Path(module.__file__).parent / stub_name).read_text())
        for node in stub.body:
            if isinstance(node, ast.ClassDef) and isinstance(getattr(module, node.name, None), type):
                inits = [f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"]
                for init in inits:
                    a = init.args
                    expected = [p.arg for p in a.posonlyargs + a.args][1:] + [p.arg for p in a.kwonlyargs]
                    signature = inspect.signature(getattr(module, node.name))
                    assert list(signature.parameters) == expected, node.name
    assert checked > 40, checked
    assert str(inspect.signature(_os.mmap)) == "(length, prot, flags, fd, offset, alignment, /)"
    assert str(inspect.signature(_buffer.AreaBase.munmap)) == "(self, buffer, size=None, *, stream=None)"


def _areas() -> dict[str, type[Area]]:
    found: dict[str, type[Area]] = {}
    for _, obj in _public():
        if isinstance(obj, type) and issubclass(obj, Area):
            found.setdefault(obj.__qualname__, obj)
    return found


AREAS = _areas()


def test_every_area_is_walked() -> None:
    assert {
        "Area",
        "HostArea",
        "GpuArea",
        "VirtualMemory",
        "IpcImportArea",
        "Pool",
        "ZeArea",
        "PoolArea",
    } <= set(AREAS), sorted(AREAS)


def _options_dict(cls: type[Area]) -> Any:
    """The TypedDict that ``cls.mmap``'s ``options`` annotation names, or None."""
    module = sys.modules[cls.__module__]
    hints = typing.get_type_hints(cls.mmap, globalns=vars(module))
    for arg in typing.get_args(hints["options"]):
        if typing.is_typeddict(arg):
            return arg
    return None


@pytest.mark.parametrize("name", sorted(AREAS))
def test_mmap_help_lists_options_and_errors(name: str) -> None:
    cls = AREAS[name]
    documented_by: Any = next(base for base in cls.__mro__ if "mmap" in vars(base))
    assert documented_by.options_type is cls.options_type, f"{name} must document its own options"
    text = pydoc.plain(pydoc.render_doc(cls.mmap))  # what help() prints
    # help() shows the signature and the area's own docstring, then every area's errors.
    assert "mmap(self, size: 'int', options:" in text, text
    assert inspect.cleandoc(MMAP_ERRORS).splitlines()[0] in text
    for error in ("AMLTypeError", "AMLValueError", "AMLDomainError", "AMLMemoryError", "AMLFailure"):
        assert f"~aml_core.errors.{error}" in text, error
    assert "Options" in text, text
    fields = [f.name for f in attrs.fields(cls.options_type)]
    for field in fields:  # each key, as a list item saying what it means
        assert re.search(rf"- ``{field}``: \S", text), f"{name}.mmap does not explain the option {field!r}"
    if cls is not Area:
        assert "Errors of " in text, f"{name}.mmap does not say which errors its own backend adds"
        typed = _options_dict(documented_by)
        assert typed is not None, f"{name}.mmap's options are not typed by a TypedDict"
        assert set(typed.__annotations__) == set(fields), (typed, fields)
        if cls.options_type is NoOptions:
            assert "Options: none" in text


def test_mmap_is_the_compiled_one() -> None:
    """A documented mmap is the compiled body (a Cython function of aml_core._buffer),
    not a Python frame over it, and it maps."""
    from aml_core.host import HostArea

    assert type(HostArea.mmap) is type(aml_core._buffer.AreaBase.mmap)
    assert HostArea.mmap.__code__.co_filename.endswith("_buffer_map.pxi")  # a part of _buffer.pyx
    with HostArea() as area, area.mmap(4096, {"offset": 0}) as buf:
        assert buf.size == 4096
        assert area.stats.live_mappings == 1
