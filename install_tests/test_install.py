"""The front door as a new user meets it: a fresh clone, a fresh venv, the README's commands.

Slow (pip downloads, a Cython build, five wheels): run by ``tox -e install`` (so by
``./run-tests`` and CI), never by the core suite. Each test clones the repository's
committed HEAD into a temporary folder, so no in-place build of this checkout is seen.

- :func:`test_readme_install_from_the_clone_root`: the README's venv and install commands,
  run as written from the clone's root, whose ``aml_core/`` is the unbuilt source tree;
  ``aml info`` and ``python -c "import aml_core"`` give the same answer there and in another
  folder.
- :func:`test_wheels_install_and_pass_the_kit_without_a_compiler`: the README's wheel route:
  ``python -m build`` makes the five wheels (no build warnings, one version, a LICENSE
  each), pip installs them from the folder into a venv whose PATH has no C compiler, at
  the lowest attrs and pluggy that aml-core's metadata allows, and ``aml info`` and the
  conformance kit on the host backend pass there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
VERSION = (ROOT / "VERSION").read_text().strip()


def _shipped_backends() -> tuple[str, ...]:
    """The backends' names from aml_core/backend_list.py, the one list, loaded from its file:
    this runner's aml_core (an unbuilt source tree) is never imported."""
    spec = importlib.util.spec_from_file_location("_backend_list", ROOT / "aml_core" / "backend_list.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses looks the module up while making the class
    spec.loader.exec_module(module)
    return tuple(b.name for b in module.BACKENDS)


GPU_BACKENDS = _shipped_backends()
BASH = shutil.which("bash") or "/bin/bash"  # found now: some commands run with a bare PATH


def _lowest() -> dict[str, str]:
    """aml-core's run-time dependencies at the lower bounds its pyproject.toml states."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        deps = [Requirement(d) for d in tomllib.load(f)["project"]["dependencies"]]
    return {d.name: next(s.version for s in d.specifier if s.operator == ">=") for d in deps}


LOWEST = _lowest()

KIT_MODULE = """
from collections.abc import Iterator

import pytest

from aml_core.host import HostArea
from aml_core.testing import AreaConformance


class TestHost(AreaConformance):
    @pytest.fixture
    def area(self) -> Iterator[HostArea]:
        area = HostArea()
        yield area
        area.close()
"""


def _env(path: str | None = None, **extra: str) -> dict[str, str]:
    """This environment without what would leak this test run's Python into the children."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "VIRTUAL_ENV", "TOX_", "_TOX", "PYTEST_")) and k != "CONDA_PREFIX"
    }
    if path is not None:
        env["PATH"] = path
    env["PIP_REQUIRE_VIRTUALENV"] = "1"  # never install into the Python running the tests
    env.update(extra)
    return env


def _run(
    cmd: list[str], cwd: Path, env: dict[str, str], *, ok: bool = True
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False)
    if ok:
        assert out.returncode == 0, f"{cmd} in {cwd} exited {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


def _clone(tmp_path: Path) -> Path:
    dest = tmp_path / "aml"
    _run(["git", "clone", "--quiet", str(ROOT), str(dest)], tmp_path, _env())
    return dest


def _readme_block(after: str) -> list[str]:
    """The lines of the README's first ``sh`` block after the text ``after``."""
    text = (ROOT / "README.md").read_text()
    start = text.index(after)
    match = re.search(r"^ *```sh\n(.*?)^ *```", text[start:], re.M | re.S)
    assert match, f"no sh block after {after!r} in the README"
    return [line.strip() for line in match.group(1).splitlines() if line.strip()]


def _bash(lines: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return _run([BASH, "-euo", "pipefail", "-c", "\n".join(lines)], cwd, env)


def _states(info: dict[str, Any]) -> dict[str, tuple[str, str | None, str]]:
    return {b["name"]: (b["state"], b["reason"], b["version"]) for b in info["backends"]}


def _check_info(info: dict[str, Any], venv: Path) -> None:
    """Host available; every GPU backend installed, unavailable, with its reason; all from ``venv``."""
    assert info["aml_core"] == VERSION
    assert Path(info["aml_core_path"]).resolve().is_relative_to(venv.resolve()), info["aml_core_path"]
    states = _states(info)
    assert states["host"] == ("available", None, VERSION)
    for name in GPU_BACKENDS:
        state, reason, version = states[name]
        assert (state, version) == ("unavailable", VERSION), (name, states[name])
        assert reason, f"{name} is unavailable without a reason"


def _aml_info_json(venv: Path, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    out = _run([str(venv / "bin" / "aml"), "info", "--json"], cwd, env)
    info: dict[str, Any] = json.loads(out.stdout)
    return info


def _import_from(venv: Path, cwd: Path, env: dict[str, str]) -> Path:
    out = _run([str(venv / "bin" / "python"), "-c", "import aml_core; print(aml_core.__file__)"], cwd, env)
    assert out.stderr == ""  # silently, also where the unbuilt source tree hands over
    return Path(out.stdout.strip())


def test_readme_install_from_the_clone_root(tmp_path: Path) -> None:
    clone = _clone(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    commands = _readme_block("## The two commands")
    assert commands[0].startswith("python3 -m venv .venv"), commands
    assert commands[-1].endswith("&& aml info"), commands
    out = _bash(commands, clone, _env())
    venv = clone / ".venv"
    # The premise: the clone's aml_core/ is the unbuilt source tree, first on python -c's path.
    assert not list((clone / "aml_core").glob("*.so")), "the install built aml_core in place"
    table = out.stdout
    assert re.search(rf"^host +\(aml-core {re.escape(VERSION)}\) +\d+ +available$", table, re.M), table
    for name in GPU_BACKENDS:
        row = rf"^{name} +\(aml-{name} {re.escape(VERSION)}\) +\d+ +unavailable\n {{4}}\S"
        assert re.search(row, table, re.M), f"{name} not unavailable with a reason:\n{table}"

    env = _env()
    at_root, at_other = _aml_info_json(venv, clone, env), _aml_info_json(venv, elsewhere, env)
    _check_info(at_root, venv)
    assert _states(at_root) == _states(at_other)
    for where in (clone, elsewhere):
        assert _import_from(venv, where, env).resolve().is_relative_to(venv.resolve())


def test_wheels_install_and_pass_the_kit_without_a_compiler(tmp_path: Path) -> None:
    clone = _clone(tmp_path)
    route = _readme_block("**Wheels, no compiler needed.**")
    assert route[-1].startswith("python3 -m pip install --find-links dist aml-core"), route
    build, install = route[:-1], route[-1]

    # Build, with this test run's Python (it has `build`) first on PATH, as a developer would.
    # pip's own notices (running as root outside a venv, a newer pip) are not the build's.
    here = str(Path(sys.executable).parent)
    quiet_pip = {"PIP_ROOT_USER_ACTION": "ignore", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    out = _bash(build, clone, _env(f"{here}:{os.environ['PATH']}", **quiet_pip))
    warnings = [line for line in (out.stdout + out.stderr).splitlines() if "warning" in line.lower()]
    assert warnings == [], "the build warned:\n" + "\n".join(warnings)
    dist = clone / "dist"
    wheels = {w.name.split("-")[0]: w for w in dist.glob("*.whl")}
    assert sorted(wheels) == sorted(["aml_core", *(f"aml_{name}" for name in GPU_BACKENDS)])
    assert re.fullmatch(
        rf"aml_core-{re.escape(VERSION)}-cp3\d+-cp3\d+-linux_\w+\.whl", wheels["aml_core"].name
    )
    license_text = (ROOT / "LICENSE").read_bytes()
    for name, wheel in wheels.items():
        if name != "aml_core":
            assert wheel.name == f"{name}-{VERSION}-py3-none-any.whl"
        with zipfile.ZipFile(wheel) as z:
            info = f"{name}-{VERSION}.dist-info"
            meta = Parser().parsestr(z.read(f"{info}/METADATA").decode())
            assert z.read(f"{info}/licenses/LICENSE") == license_text
        assert (meta["Version"], meta["License-Expression"]) == (VERSION, "BSD-3-Clause")
        if name != "aml_core":
            (core,) = [
                Requirement(r) for r in meta.get_all("Requires-Dist") or [] if r.startswith("aml-core")
            ]
            major, minor = (int(p) for p in VERSION.split(".")[:2])
            assert VERSION in core.specifier, core
            assert f"{major}.{minor + 1}.0" not in core.specifier, core

    # A venv whose bin/ (its python, pip and, once installed, the scripts) is the whole PATH:
    # no C compiler anywhere, CC and CXX failing too.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, _env())
    bare = str(venv / "bin")
    for compiler in ("gcc", "cc", "c++", "g++", "clang"):
        assert shutil.which(compiler, path=bare) is None
    nocc = _env(bare, CC="false", CXX="false")
    prefix = _run(["python", "-c", "import sys; print(sys.prefix)"], tmp_path, nocc).stdout.strip()
    assert Path(prefix) == venv  # pip below installs there, and nowhere else
    _bash([install], clone, nocc)  # the README's line: aml-core and aml-hip from the folder
    backends = [f"aml-{name}" for name in GPU_BACKENDS]
    extras = ["aml-core[test]", *backends, *(f"{name}=={v}" for name, v in LOWEST.items())]
    _run(["python", "-m", "pip", "install", "--find-links", str(dist), *extras], tmp_path, nocc)
    versions = _run(["python", "-m", "pip", "list", "--format=json"], tmp_path, nocc).stdout
    installed = {d["name"].lower(): d["version"] for d in json.loads(versions)}
    assert all(installed[name] == VERSION for name in ("aml-core", *backends)), installed
    assert all(Version(installed[name]) == Version(v) for name, v in LOWEST.items()), installed

    _check_info(_aml_info_json(venv, tmp_path, nocc), venv)
    kit = tmp_path / "kit"
    kit.mkdir()
    (kit / "test_host_kit.py").write_text(KIT_MODULE)
    cmd = [
        "python",
        "-m",
        "pytest",
        "-p",
        "aml_core.testing",
        "-p",
        "no:cacheprovider",
        "-q",
        "test_host_kit.py",
    ]
    out = _run(cmd, kit, nocc)
    summary = out.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ passed in [\d.]+s", summary), out.stdout
