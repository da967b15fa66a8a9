"""Helpers of the aml-ze tests (imported by conftest.py and the test modules; a unique
module name, so that these tests can run in one pytest session with other packages').

The tests run the backend against the Level Zero driver double
(``backends/ze/tests/native/double.c``) in the mode named by ``AML_ZE_TEST_DOUBLE``
(``host``, the default, or ``forward``), against Debian's real loader without a driver,
and against the loader with Level Zero's own null driver and validation layer (in child
processes: the loader reads its environment once).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
BACKEND_ROOT = HERE.parent

# A checkout without aml-core / aml-ze installed: import them from the tree.
for _root, _module in ((REPO, "aml_core"), (BACKEND_ROOT, "aml_ze")):
    if importlib.util.find_spec(_module) is None:
        sys.path.insert(0, str(_root))

import aml_ze  # noqa: E402

from aml_core.errors import AMLError  # noqa: E402

MODE = os.environ.get("AML_ZE_TEST_DOUBLE", "host").strip() or "host"
if MODE not in ("host", "forward"):
    raise pytest.UsageError(f"AML_ZE_TEST_DOUBLE must be 'host' or 'forward', not {MODE!r}")

__all__ = [
    "BACKEND_ROOT",
    "LOADER_ENV",
    "MODE",
    "REPO",
    "ZeDouble",
    "aml_ze",
    "build",
    "build_double",
    "child_env",
    "enter_double",
    "leave_double",
    "run_python",
]

#: Environment variables of the loader and the double that must not leak in from the caller.
LOADER_ENV = (
    "ZE_ENABLE_NULL_DRIVER",
    "ZE_ENABLE_ALT_DRIVERS",
    "ZE_ENABLE_VALIDATION_LAYER",
    "ZE_ENABLE_PARAMETER_VALIDATION",
    "ZEDOUBLE_NO_DRIVER",
    "AML_ZE_LIBRARY",
)


def _load_build() -> ModuleType:
    path = BACKEND_ROOT / "tests" / "native" / "ze_double.py"
    spec = importlib.util.spec_from_file_location("aml_ze_tests_double_build", path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


build = _load_build()


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process that imports aml_ze from this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in LOADER_ENV}
    paths = [str(REPO), str(BACKEND_ROOT), str(HERE), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.update(extra)
    return env


def run_python(code: str, env: dict[str, str], timeout: float = 120) -> dict[str, Any]:
    """Run ``code`` in a child Python; it prints one JSON object as its last line."""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


_built: dict[tuple[str, bool], Path | str] = {}


def build_double(put: bool = True) -> Path:
    """Build the double in the session's mode (cached); skip with the reason if it cannot be."""
    key = (MODE, put)
    if key not in _built:
        try:
            _built[key] = build.build_double(MODE, put=put)
        except build.DoubleBuildError as exc:
            _built[key] = f"the Level Zero double cannot be built in {MODE} mode: {exc}"
    found = _built[key]
    if isinstance(found, str):
        pytest.skip(found)
    return found


class ZeDouble:
    """The double a test runs against, and helpers to drive it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mode = MODE
        self.ctl: Any = build.DoubleControl(path)

    def need_devices(self, count: int, memory: int = 1 << 30) -> None:
        """Host mode: emulate ``count`` devices; forward mode: skip if the machine has fewer."""
        if self.mode == "host":
            self.ctl.set_devices(count, memory)
            aml_ze.BACKEND.reset()
            return
        have = aml_ze.get_runtime().device_count()
        if have < count:
            pytest.skip(f"needs {count} GPUs, this machine has {have}")

    def inject(self, function: str, error: int, skip: int = 0, times: int = 1) -> None:
        self.ctl.inject(function, error, skip, times)

    def calls(self, function: str) -> int:
        return int(self.ctl.calls(function))

    def live(self) -> dict[str, int]:
        lives: dict[str, int] = self.ctl.lives()
        return lives

    def env(self, **extra: str) -> dict[str, str]:
        """A child process's environment: the same double."""
        return child_env(AML_ZE_LIBRARY=str(self.path), **extra)


def enter_double(path: Path, monkeypatch: pytest.MonkeyPatch) -> ZeDouble:
    for var in LOADER_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AML_ZE_LIBRARY", str(path))
    double = ZeDouble(path)
    double.ctl.reset()
    aml_ze.BACKEND.reset()
    if MODE == "forward":
        try:
            aml_ze.get_runtime().device_count()
        except AMLError as exc:
            pytest.skip(f"forward mode needs a CUDA GPU: {exc}")
    return double


def leave_double(double: ZeDouble) -> None:
    aml_ze.BACKEND.reset()
    leaks = {kind: n for kind, n in double.live().items() if n}
    double.ctl.reset()
    aml_ze.BACKEND.reset()
    assert not leaks, f"the test leaked native objects: {leaks}"
