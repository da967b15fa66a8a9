"""Helpers of the aml-hsa tests (a unique module name: every package's tests run in one
pytest session).

The tests run the backend against the HSA driver double (``native/double.c``) in the mode
named by ``AML_HSA_TEST_DOUBLE`` (``host``, the default, or ``forward``: memory forwarded to
CUDA on an NVIDIA GPU).
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

for _root, _module in ((REPO, "aml_core"), (BACKEND_ROOT, "aml_hsa")):
    if importlib.util.find_spec(_module) is None:
        sys.path.insert(0, str(_root))

import aml_hsa  # noqa: E402
import aml_hsa.native  # noqa: E402

MODE = os.environ.get("AML_HSA_TEST_DOUBLE", "host").strip() or "host"
if MODE not in ("host", "forward"):
    raise pytest.UsageError(f"AML_HSA_TEST_DOUBLE must be 'host' or 'forward', not {MODE!r}")

#: Environment variables of the double that must not leak in from the caller.
DOUBLE_ENV = ("HSADOUBLE_GPUS", "HSADOUBLE_NO_KFD", "HSADOUBLE_FAULTS")


def _load_build() -> ModuleType:
    path = HERE / "native" / "hsa_double.py"
    spec = importlib.util.spec_from_file_location("aml_hsa_tests_double_build", path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


build = _load_build()
_built: dict[tuple[str, tuple[int, int]], Path | str] = {}


def build_double(interface: tuple[int, int] = (1, 6)) -> Path:
    """The double in this session's mode (cached); skip with the reason if it cannot be built."""
    key = (MODE, interface)
    if key not in _built:
        try:
            _built[key] = build.build_double(MODE, interface)
        except build.DoubleBuildError as exc:
            _built[key] = f"the HSA driver double cannot be built in {MODE} mode: {exc}"
    found = _built[key]
    if isinstance(found, str):
        pytest.skip(found)
    return found


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process that imports aml_hsa from this checkout."""
    env = dict(os.environ)
    paths = [str(REPO), str(BACKEND_ROOT), str(HERE), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.update(extra)
    return env


def open_fds() -> set[int]:
    """This process's open file descriptors (``/proc/self/fd``)."""
    return {int(name) for name in os.listdir("/proc/self/fd")} - {-1}


class HsaDouble:
    """The double a test runs against."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mode = MODE
        self.ctl: Any = build.DoubleControl(path)

    def inject(self, function: str, status: int, skip: int = 0, times: int = 1) -> None:
        self.ctl.inject(function, status, skip, times)

    def calls(self, function: str) -> int:
        return int(self.ctl.calls(function))

    def live(self) -> dict[str, int]:
        return {kind: int(self.ctl.live(kind)) for kind in build.LIVE_KINDS}

    def objects(self) -> dict[str, int]:
        """Live native objects other than the hsa_init count."""
        return {k: v for k, v in self.live().items() if k != "init" and v}

    def env(self, **extra: str) -> dict[str, str]:
        return child_env(AML_HSA_LIBRARY=str(self.path), AML_HSA_TEST_DOUBLE=MODE, **extra)

    def need_gpus(self, count: int) -> None:
        """Host mode: emulate ``count`` GPU agents; forward mode: skip if there are fewer."""
        if self.mode == "host":
            forget()
            self.ctl.set_gpus(count)
            return
        have = aml_hsa.get_runtime().device_count()
        if have < count:
            pytest.skip(f"needs {count} GPUs, this machine has {have}")


def forget() -> None:
    """Drop aml-hsa's runtime and library (hsa_shut_down included)."""
    aml_hsa.BACKEND.reset()
    aml_hsa.native.shutdown_all()


def enter_double(path: Path, monkeypatch: pytest.MonkeyPatch) -> HsaDouble:
    forget()
    monkeypatch.setenv("AML_HSA_LIBRARY", str(path))
    for var in DOUBLE_ENV:
        monkeypatch.delenv(var, raising=False)
    double = HsaDouble(path)
    double.ctl.reset()
    if MODE == "forward":
        try:
            aml_hsa.get_runtime()
        except Exception as exc:
            pytest.skip(f"forward mode needs a CUDA GPU: {exc}")
    return double


def leave_double(double: HsaDouble) -> None:
    rt = aml_hsa.BACKEND._runtime
    tracked = rt.live() if rt is not None else {}  # type: ignore[attr-defined]
    forget()
    live = double.live()
    double.ctl.reset()
    assert not {k: v for k, v in tracked.items() if v}, f"aml-hsa still tracks objects: {tracked}"
    assert live == dict.fromkeys(live, 0), f"the test leaked native objects or hsa_init counts: {live}"
