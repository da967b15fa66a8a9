"""Importing aml_core without its compiled modules gives the fix, not a bare
ModuleNotFoundError (numpy's "you are importing from the source tree" is the model)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNBUILT = shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", "*.c", "*.html")


def _import_in(where: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", "import aml_core"],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_an_unbuilt_source_tree_says_how_to_build(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "aml_core", tmp_path / "aml_core", ignore=UNBUILT)
    shutil.copy(ROOT / "setup.py", tmp_path)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    out = _import_in(tmp_path)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: aml_core._buffer is not built"), out.stderr
    assert f"source tree at {(tmp_path / 'aml_core').resolve()}" in last
    assert "`pip install .`" in last
    assert "`python setup.py build_ext --inplace`" in last
    assert "No module named" not in out.stderr


def test_an_incomplete_installation_says_to_reinstall(tmp_path: Path) -> None:
    no_sources = shutil.ignore_patterns("*.pyx", "*.pxd", "*.so", "*.pyd", "__pycache__", "*.c", "*.html")
    shutil.copytree(ROOT / "aml_core", tmp_path / "aml_core", ignore=no_sources)
    out = _import_in(tmp_path)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: aml_core._buffer cannot be loaded"), out.stderr
    assert "reinstall" in last
    assert "No module named" not in out.stderr
