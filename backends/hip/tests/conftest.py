"""Fixtures of the aml-hip tests.

The tests run the backend against the HIP driver double (``tests/native/hip/double.c``):

* ``AML_HIP_TEST_DOUBLE=host`` (default): the double over host memory, built with gcc;
  tests that need it skip with the reason when gcc is missing.
* ``AML_HIP_TEST_DOUBLE=forward``: the double forwarding every hip* call to CUDA, as
  HIP's NVIDIA platform does; every test that uses the double is then marked ``gpu``,
  and tests that need the host mode (emulated devices, AMD-only advice) skip.

The ``hip`` fixture points ``AML_HIP_LIBRARY`` at the double, resets it and
``aml_hip.BACKEND``, and after the test checks that nothing leaked (the double's live
counts are back to 0).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
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
    path = REPO / "tests" / "native" / "hip" / "build.py"
    spec = importlib.util.spec_from_file_location("aml_hip_tests_double_build", path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


build = _load_build()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "gpu: needs a real GPU and its driver (skipped elsewhere with the reason)"
    )
    config.addinivalue_line("markers", "double: runs against the HIP driver double (needs gcc)")
    config.addinivalue_line(
        "markers", "host_double: needs the double's host mode (emulated devices or AMD-only behaviour)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "hip" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.double)
            if MODE == "forward":
                item.add_marker(pytest.mark.gpu)
        if MODE == "forward" and item.get_closest_marker("host_double"):
            item.add_marker(
                pytest.mark.skip(
                    reason="needs the double's host mode (AML_HIP_TEST_DOUBLE=forward runs CUDA)"
                )
            )


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


@pytest.fixture(scope="session")
def double_library() -> Path:
    return build_double()


def _enter(path: Path, monkeypatch: pytest.MonkeyPatch) -> HipDouble:
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


def _leave(double: HipDouble) -> None:
    aml_hip.BACKEND.reset()
    leaks = {kind: n for kind, n in double.live().items() if n}
    double.ctl.reset()
    aml_hip.BACKEND.reset()
    assert not leaks, f"the test leaked native objects: {leaks}"


@pytest.fixture
def hip(double_library: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HipDouble]:
    """aml_hip running on the double (reset before, leak-checked after)."""
    double = _enter(double_library, monkeypatch)
    yield double
    _leave(double)


@pytest.fixture
def hip_built(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int | None], HipDouble]]:
    """aml_hip running on a double built for one version (its file name and symbols
    follow that version: ``libamdhip64.so.5`` without hipExtHostAlloc for 5.2)."""
    used: list[HipDouble] = []

    def make(version: int | None) -> HipDouble:
        double = _enter(build_double(version), monkeypatch)
        used.append(double)
        return double

    yield make
    for double in used:
        _leave(double)


@pytest.fixture
def areas(hip: HipDouble) -> Iterator[Callable[..., aml_hip.HipArea]]:
    """``areas(device, flags)`` creates an area that is closed after the test."""
    made: list[aml_hip.HipArea] = []

    def make(device: int = 0, flags: int = 0) -> aml_hip.HipArea:
        area = aml_hip.create(device, flags)
        made.append(area)
        return area

    yield make
    for area in made:
        area.close()
