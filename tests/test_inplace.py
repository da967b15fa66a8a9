"""tests/support/inplace.py, which every tox environment runs before its tests: it builds the
source tree's extensions only when they are missing, older than their sources or sanitized,
and copies the tree without its build products for the asan environment."""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

import pytest

from aml_core import _compiled
from tests.support import inplace

SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


def test_the_modules_are_setup_pys_and_the_import_checks() -> None:
    names = inplace.compiled_modules()
    assert names == tuple(n.removeprefix("aml_core.") for n in _compiled.COMPILED)
    for name in names:
        assert (inplace.ROOT / "aml_core" / f"{name}.pyx").is_file()


def test_a_setup_py_without_the_list_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text("OTHER = ('_a',)\n")
    with pytest.raises(LookupError, match="no COMPILED"):
        inplace.compiled_modules(tmp_path / "setup.py")


def _tree(tmp_path: Path, names: tuple[str, ...] = ("_a", "_b")) -> Path:
    package = tmp_path / "aml_core"
    package.mkdir(parents=True)
    (tmp_path / "setup.py").write_text(f"COMPILED = {names!r}\n")
    for name in names:
        (package / f"{name}.pyx").write_text("# source\n")
    (package / "_a.pxd").write_text("# declarations\n")
    return tmp_path


def _age(path: Path, seconds: float) -> None:
    stat = path.stat()
    os.utime(path, (stat.st_atime - seconds, stat.st_mtime - seconds))


def _build(root: Path, name: str, content: bytes = b"\x7fELF built") -> Path:
    built = root / "aml_core" / f"{name}{SUFFIX}"
    built.write_bytes(content)
    return built


def test_missing_extensions_are_stale(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    _build(root, "_a")
    assert inplace.stale(root) == [f"_b{SUFFIX} is not built"]


def test_extensions_newer_than_every_source_are_up_to_date(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    for source in [root / "setup.py", *(root / "aml_core").iterdir()]:
        _age(source, 60)
    _build(root, "_a")
    _build(root, "_b")
    assert inplace.stale(root) == []


@pytest.mark.parametrize("source", ["setup.py", "aml_core/_a.pxd", "aml_core/_b.pyx"])
def test_a_source_newer_than_an_extension_makes_it_stale(tmp_path: Path, source: str) -> None:
    root = _tree(tmp_path)
    built = [_build(root, "_a"), _build(root, "_b")]
    for path in built:
        _age(path, 60)
    changed = root / source
    changed.write_text(changed.read_text() + "# changed\n")
    assert inplace.stale(root) == [f"{p.name} is older than its sources" for p in built]


def test_a_sanitized_extension_is_stale(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    for source in [root / "setup.py", *(root / "aml_core").iterdir()]:
        _age(source, 60)
    _build(root, "_a", b"\x7fELF ... libasan.so.8\x00 ...")
    _build(root, "_b")
    assert inplace.stale(root) == [f"_a{SUFFIX} is built with AddressSanitizer"]


def test_this_tree_is_built_and_up_to_date() -> None:
    """The environment running this test ran the script first: nothing is left to build."""
    assert inplace.stale() == []


def test_the_copy_leaves_out_build_products_and_keeps_the_sources(tmp_path: Path) -> None:
    root = _tree(tmp_path / "tree")
    package = root / "aml_core"
    for generated in ("_a.c", "_b.cpp", f"_a{SUFFIX}", "_a.html"):
        (package / generated).write_text("generated\n")
    native = root / "backends" / "x" / "tests" / "native"
    native.mkdir(parents=True)
    (native / "double.c").write_text("int x;\n")  # a C source outside aml_core/ is a source
    (root / "backends" / "x" / "setup.py").symlink_to("../../setup.py")
    for left_out in (".tox/env", ".git/objects", "build/lib", "aml_core/__pycache__", ".pytest_cache/v"):
        (root / left_out).mkdir(parents=True)
        (root / left_out / "file").write_text("x\n")
    dest = tmp_path / "copy"
    inplace.copy_tree(dest, root)
    copied = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    assert copied == [
        "aml_core",
        "aml_core/_a.pxd",
        "aml_core/_a.pyx",
        "aml_core/_b.pyx",
        "backends",
        "backends/x",
        "backends/x/setup.py",
        "backends/x/tests",
        "backends/x/tests/native",
        "backends/x/tests/native/double.c",
        "setup.py",
    ]
    assert (dest / "backends" / "x" / "setup.py").is_symlink()
    assert (package / "_a.pyx").stat().st_mtime == (dest / "aml_core" / "_a.pyx").stat().st_mtime
