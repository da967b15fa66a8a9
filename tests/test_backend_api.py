"""The public surface for backends (``aml_core.backend_api``, issue 31 item 4): no backend
of this repository imports a private core module, and the public module re-exports the
very objects the core uses (a backend that uses it gets the same classes, not copies)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import aml_core.backend_api as api
from aml_core import _buffer, buffer
from aml_core.backend_list import BACKENDS
from aml_core.gpu import _device_area

ROOT = Path(__file__).resolve().parent.parent
#: A dotted name under aml_core with a private part: aml_core._buffer, aml_core.gpu._device_area.
PRIVATE = re.compile(r"\baml_core(?:\.[A-Za-z]\w*)*\._[A-Za-z]\w*")
SOURCES = sorted(
    p
    for b in BACKENDS
    for suffix in ("*.py", "*.pyi", "*.pyx", "*.pxd")
    for p in (ROOT / b.folder / b.package).rglob(suffix)
)


def _imported(path: Path) -> list[str]:
    """The modules a Python file imports (``import x``, ``from x import y``)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return found


def test_there_are_backend_sources_to_check() -> None:
    assert {p.relative_to(ROOT).parts[1] for p in SOURCES} == {b.name for b in BACKENDS}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_backend_imports_a_private_core_module(path: Path) -> None:
    text = path.read_text()
    named = PRIVATE.findall(text)  # any spelling: import, cimport, importlib, a docstring
    assert not named, f"{path.relative_to(ROOT)} names private core modules {named}: use aml_core.backend_api"
    if path.suffix in (".py", ".pyi"):
        private = [m for m in _imported(path) if m.startswith("aml_core") and PRIVATE.search(m)]
        assert not private, private


def test_the_check_catches_a_private_import(tmp_path: Path) -> None:
    """The test above is not vacuous: the old spelling is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("from aml_core._buffer import NativeAllocator\nimport aml_core.gpu._device_area\n")
    assert PRIVATE.findall(bad.read_text()) == ["aml_core._buffer", "aml_core.gpu._device_area"]
    assert [m for m in _imported(bad) if PRIVATE.search(m)] == [
        "aml_core._buffer",
        "aml_core._buffer.NativeAllocator",
        "aml_core.gpu._device_area",
    ]


def test_the_public_module_re_exports_the_core_s_own_objects() -> None:
    assert api.NativeAllocator is _buffer.NativeAllocator
    assert api.AreaLock is _buffer.AreaLock
    assert api.BufferBase is _buffer.BufferBase
    assert api.Buffer is buffer.Buffer
    assert issubclass(api.Buffer, api.BufferBase)
    assert api.RuntimeMemory is _device_area.RuntimeMemory
    assert sorted(api.__all__) == api.__all__
    for name in api.__all__:
        assert not name.startswith("_")
        assert getattr(api, name).__doc__, f"{name} has no docstring"


def test_the_compatibility_rule_and_every_name_are_documented() -> None:
    doc = api.__doc__ or ""
    assert "Compatibility rule" in doc
    guide = (ROOT / "docs" / "backend-authoring.md").read_text()
    assert "aml_core.backend_api" in guide
    for name in api.__all__:
        assert f"`{name}`" in guide, f"docs/backend-authoring.md does not name {name}"
    assert not PRIVATE.search(guide.split("## A sixth GPU backend", 1)[1]), (
        "the walk-through names a private module"
    )
