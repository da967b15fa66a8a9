"""The five distributions' metadata: one version (VERSION at the root), the backends' aml-core
bound following it, and the license of each. install_tests/ builds and installs them."""

from __future__ import annotations

import importlib.util
import tomllib
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from aml_core import backend_list

ROOT = Path(__file__).resolve().parents[1]
VERSION = (ROOT / "VERSION").read_text().strip()
BACKENDS = tuple(b.name for b in backend_list.BACKENDS)
DISTRIBUTIONS = {"aml-core": ROOT, **{f"aml-{name}": ROOT / "backends" / name for name in BACKENDS}}


def _project(folder: Path) -> dict[str, Any]:
    with open(folder / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


@pytest.fixture(scope="module")
def backend_setup() -> ModuleType:
    spec = importlib.util.spec_from_file_location("backend_setup", ROOT / "backends" / "_setup.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not as __main__: defines the functions, builds nothing
    return module


def test_the_version_is_written_once() -> None:
    assert Version(VERSION).release == tuple(int(p) for p in VERSION.split("."))  # X.Y.Z, nothing else
    for name, folder in DISTRIBUTIONS.items():
        project = _project(folder)["project"]
        assert "version" not in project, f"{name} writes its version by hand"
        assert "version" in project["dynamic"], name
    assert _project(ROOT)["tool"]["setuptools"]["dynamic"]["version"] == {"file": "VERSION"}


@pytest.mark.parametrize("name", BACKENDS)
def test_a_backend_takes_the_version_and_requires_the_aml_core_of_its_minor(
    name: str, backend_setup: ModuleType
) -> None:
    folder = ROOT / "backends" / name
    assert (folder / "setup.py").is_symlink()
    assert (folder / "setup.py").resolve() == (ROOT / "backends" / "_setup.py").resolve()
    assert sorted(_project(folder)["project"]["dynamic"]) == ["dependencies", "version"]
    assert backend_setup.version(folder) == VERSION
    requirements = [Requirement(r) for r in backend_setup.requirements(folder, VERSION)]
    (core,) = [r for r in requirements if r.name == "aml-core"]
    major, minor, patch = (int(p) for p in VERSION.split("."))
    assert VERSION in core.specifier
    assert f"{major}.{minor}.{patch + 1}" in core.specifier
    assert f"{major}.{minor + 1}.0" not in core.specifier
    if minor:
        assert f"{major}.{minor - 1}.0" not in core.specifier
    others = [r for r in requirements if r.name != "aml-core"]
    assert others == [Requirement(r) for r in _project(folder)["tool"]["aml"]["dependencies"]]


def test_an_sdist_takes_the_version_from_its_pkg_info(tmp_path: Path, backend_setup: ModuleType) -> None:
    sdist = tmp_path / "aml_hip-9.8.7"  # unpacked, far from any VERSION
    sdist.mkdir()
    (sdist / "PKG-INFO").write_text("Metadata-Version: 2.4\nName: aml-hip\nVersion: 9.8.7\n")
    assert backend_setup.version(sdist) == "9.8.7"
    assert backend_setup.aml_core_requirement("9.8.7") == "aml-core>=9.8.7,<9.9"


def test_cuda_bindings_bound_names_the_verified_version(backend_setup: ModuleType) -> None:
    folder = ROOT / "backends" / "cuda"
    (bindings,) = [
        Requirement(r) for r in backend_setup.requirements(folder, VERSION) if r.startswith("cuda-bindings")
    ]
    assert "13.3.1" in bindings.specifier  # every GPU run was verified with it
    assert "13.2.0" not in bindings.specifier
    assert "14.0.0" not in bindings.specifier


def test_installed_distributions_agree_with_version() -> None:
    installed = {}
    for name in DISTRIBUTIONS:
        try:
            installed[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    if not installed:
        pytest.skip("no aml distribution is installed here (a bare source tree)")
    assert installed == dict.fromkeys(installed, VERSION)


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_each_distribution_has_its_bsd_3_clause_license(name: str) -> None:
    folder = DISTRIBUTIONS[name]
    project = _project(folder)["project"]
    assert project["license"] == "BSD-3-Clause"
    assert project["license-files"] == ["LICENSE"]
    text = (folder / "LICENSE").read_text()
    assert text == (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License\n\nCopyright (c) 2026, aml developers\n")
    assert "Neither the name of the copyright holder nor the names of its" in text


def test_every_included_part_ships_as_package_data() -> None:
    """A compiled module's ``include``d parts (``_kernel_*.pxi``, ``_buffer_*.pxi``) are
    package data of aml-core, so that an sdist (and a wheel's sources) build: each file a
    ``.pyx`` includes exists and matches a package-data pattern that no exclusion takes."""
    import fnmatch
    import re

    tool = _project(ROOT)["tool"]["setuptools"]
    shipped, excluded = tool["package-data"]["aml_core"], tool["exclude-package-data"]["aml_core"]
    included = {
        name
        for pyx in sorted((ROOT / "aml_core").glob("*.pyx"))
        for name in re.findall(r'^include "([^"]+)"$', pyx.read_text(), re.MULTILINE)
    }
    assert {"_kernel_heaps.pxi", "_buffer_table.pxi"} <= included
    for name in sorted(included):
        assert (ROOT / "aml_core" / name).is_file(), name
        assert any(fnmatch.fnmatch(name, p) for p in shipped), f"{name} is not package data"
        assert not any(fnmatch.fnmatch(name, p) for p in excluded), f"{name} is excluded"
