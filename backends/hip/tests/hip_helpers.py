"""Helpers of the aml-hip tests (imported by conftest.py and the test modules; a unique
module name, so that these tests can run in one pytest session with other packages').

The tests run the backend against the HIP driver double (``backends/hip/tests/native/double.c``),
in the mode named by ``AML_HIP_TEST_DOUBLE`` (``host``, the default, or ``forward``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
BACKEND_ROOT = HERE.parent

# A checkout without aml-core / aml-hip installed: import them from the tree.
for _root, _module in ((REPO, "aml_core"), (BACKEND_ROOT, "aml_hip")):
    if importlib.util.find_spec(_module) is None:
        sys.path.insert(0, str(_root))

import aml_hip  # noqa: E402

from aml_core.errors import AMLError  # noqa: E402

MODE = os.environ.get("AML_HIP_TEST_DOUBLE", "host").strip() or "host"
if MODE not in ("host", "forward"):
    raise pytest.UsageError(f"AML_HIP_TEST_DOUBLE must be 'host' or 'forward', not {MODE!r}")

__all__ = [
    "BACKEND_ROOT",
    "DOUBLE_ENV",
    "LIVE_KINDS",
    "MODE",
    "REPO",
    "HipDouble",
    "aml_hip",
    "build",
    "build_double",
    "child_env",
    "enter_double",
    "leave_double",
]

#: Kinds of live objects the double counts (DoubleControl.live).
LIVE_KINDS = (
    "device",
    "host",
    "managed",
    "registered",
    "ipc",
    "vmm_handle",
    "vmm_reservation",
    "vmm_mapping",
    "stream",
)
#: Environment variables of the double that must not leak in from the caller.
DOUBLE_ENV = ("HIPDOUBLE_VERSION", "HIPDOUBLE_FAULTS", "HIPDOUBLE_DEVICES", "HIPDOUBLE_DEVICE_MEMORY")


def _load_build() -> ModuleType:
    path = BACKEND_ROOT / "tests" / "native" / "hip_double.py"
    spec = importlib.util.spec_from_file_location("aml_hip_tests_double_build", path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


build = _load_build()


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process that imports aml_hip from this checkout."""
    env = dict(os.environ)
    paths = [str(REPO), str(BACKEND_ROOT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.update(extra)
    return env


_built: dict[tuple[str, int | None], Path | str] = {}


def build_double(version: int | None = None) -> Path:
    """Build the double in the session's mode (cached); skip with the reason if it cannot be."""
    key = (MODE, version)
    if key not in _built:
        try:
            _built[key] = build.build_double(MODE, version=version)
        except build.DoubleBuildError as exc:
            _built[key] = f"the HIP driver double cannot be built in {MODE} mode: {exc}"
    found = _built[key]
    if isinstance(found, str):
        pytest.skip(found)
    return found


class HipDouble:
    """The double a test runs against, and helpers to drive it."""

    def __init__(self, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.path = path
        self.mode = MODE
        self._monkeypatch = monkeypatch
        self.ctl: Any = build.DoubleControl(path)
        self.version: int = self.ctl.version

    # -- control --------------------------------------------------------------------------
    def use_version(self, version: int) -> None:
        """Emulate ``version`` (HIP_VERSION encoding) and reload the backend."""
        self.ctl.set_version(version)
        self.version = version
        aml_hip.BACKEND.reset()

    def need_devices(self, count: int, memory: int = 1 << 30) -> None:
        """Host mode: emulate ``count`` devices; forward mode: skip if the machine has fewer."""
        if self.mode == "host":
            self.ctl.set_devices(count, memory)
            aml_hip.BACKEND.reset()
            return
        have = aml_hip.get_runtime().device_count()
        if have < count:
            pytest.skip(f"needs {count} GPUs, this machine has {have}")

    def inject(self, function: str, error: int, skip: int = 0, times: int = 1) -> None:
        self.ctl.inject(function, error, skip, times)

    def calls(self, function: str) -> int:
        return int(self.ctl.calls(function))

    def last(self, function: str) -> tuple[int, ...] | None:
        result: tuple[int, ...] | None = self.ctl.last_args(function)
        return result

    def live(self) -> dict[str, int]:
        return {kind: int(self.ctl.live(kind)) for kind in LIVE_KINDS}

    def env(self, **extra: str) -> dict[str, str]:
        """A child process's environment: the same double, emulating the same version."""
        return child_env(AML_HIP_LIBRARY=str(self.path), HIPDOUBLE_VERSION=str(self.version), **extra)


def enter_double(path: Path, monkeypatch: pytest.MonkeyPatch) -> HipDouble:
    monkeypatch.setenv("AML_HIP_LIBRARY", str(path))
    for var in DOUBLE_ENV:
        monkeypatch.delenv(var, raising=False)
    double = HipDouble(path, monkeypatch)
    double.ctl.reset()
    double.version = double.ctl.version
    aml_hip.BACKEND.reset()
    if MODE == "forward":
        try:
            aml_hip.get_runtime().device_count()
        except AMLError as exc:
            pytest.skip(f"forward mode needs a CUDA GPU: {exc}")
    return double


def leave_double(double: HipDouble) -> None:
    aml_hip.BACKEND.reset()
    leaks = {kind: n for kind, n in double.live().items() if n}
    double.ctl.reset()
    aml_hip.BACKEND.reset()
    assert not leaks, f"the test leaked native objects: {leaks}"
