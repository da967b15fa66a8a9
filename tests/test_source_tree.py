"""Importing aml_core without its compiled modules: from an unbuilt source tree (a clone's
root), the installed aml-core of the same version takes over silently; with none, the
error gives the fix, not a bare ModuleNotFoundError (numpy's "you are importing from the
source tree" is the model)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import aml_core
import aml_core._buffer

ROOT = Path(__file__).resolve().parents[1]
UNBUILT = shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", "*.c", "*.html")
BUILT = Path(aml_core._buffer.__file__).resolve().parent  # the package these tests run, built
VERSION = (ROOT / "VERSION").read_text().strip()

# Which aml_core modules came from where, and a host buffer through the package's API.
REPORT = """
import sys, aml_core
from aml_core.host import HostArea
with HostArea() as area:
    buf = area.mmap(4096)
    memoryview(buf)[:2] = b"ok"
    assert bytes(memoryview(buf)[:2]) == b"ok"
    area.munmap(buf)
print(aml_core.__version__)
print(sorted({getattr(m, "__file__", None) and str(m.__file__).rsplit("/aml_core/", 1)[0]
              for n, m in sys.modules.items() if n == "aml_core" or n.startswith("aml_core.")} - {None}))
"""


def _import_in(
    where: Path, *flags: str, path: Path | None = None, code: str = "import aml_core"
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return subprocess.run(
        [sys.executable, *flags, "-c", code],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _clone(root: Path) -> Path:
    """An unbuilt source tree as a clone has it: aml_core/ without compiled modules, setup.py, VERSION."""
    shutil.copytree(ROOT / "aml_core", root / "aml_core", ignore=UNBUILT)
    for name in ("setup.py", "pyproject.toml", "VERSION"):
        shutil.copy(ROOT / name, root)
    return root


def _installed(site: Path, version: str, *, built: bool = True) -> Path:
    """aml-core installed in ``site`` as pip lays it out: the built package and its dist-info."""
    ignore = shutil.ignore_patterns("__pycache__", "*.c", "*.html", *(() if built else ("*.so",)))
    shutil.copytree(BUILT, site / "aml_core", ignore=ignore)
    info = site / f"aml_core-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.4\nName: aml-core\nVersion: {version}\n")
    return site


def test_an_unbuilt_source_tree_hands_over_to_the_installed_aml_core(tmp_path: Path) -> None:
    clone = _clone(tmp_path / "clone")
    site = _installed(tmp_path / "site", VERSION)
    out = _import_in(clone, path=site)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")  # silently
    out = _import_in(clone, path=site, code=REPORT)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    version, origins = out.stdout.splitlines()
    assert version == VERSION  # the installed distribution's, not "+source"
    assert origins == repr([str(site)])  # every aml_core module, the package included, is the installed one


@pytest.mark.parametrize("case", ["another version", "not built"])
def test_an_unbuilt_source_tree_keeps_its_error_without_a_matching_installation(
    tmp_path: Path, case: str
) -> None:
    clone = _clone(tmp_path / "clone")
    if case == "another version":
        site = _installed(tmp_path / "site", "0.0.1")
    else:
        site = _installed(tmp_path / "site", VERSION, built=False)
    out = _import_in(clone, path=site)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: aml_core._buffer is not built"), out.stderr
    assert f"source tree at {(clone / 'aml_core').resolve()}" in last


def test_an_unbuilt_source_tree_says_how_to_build(tmp_path: Path) -> None:
    _clone(tmp_path)
    out = _import_in(tmp_path, "-S")  # -S: no site-packages, so no installed aml-core to hand over to
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: aml_core._buffer is not built"), out.stderr
    assert f"source tree at {(tmp_path / 'aml_core').resolve()}" in last
    assert "`pip install .`" in last
    assert "`python setup.py build_ext --inplace`" in last
    assert "No module named" not in out.stderr


def test_an_incomplete_installation_says_to_reinstall(tmp_path: Path) -> None:
    no_sources = shutil.ignore_patterns(
        "*.pyx", "*.pxd", "*.pxi", "*.so", "*.pyd", "__pycache__", "*.c", "*.html"
    )
    shutil.copytree(ROOT / "aml_core", tmp_path / "aml_core", ignore=no_sources)
    out = _import_in(tmp_path, "-S")
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: aml_core._buffer cannot be loaded"), out.stderr
    assert "reinstall" in last
    assert "No module named" not in out.stderr
