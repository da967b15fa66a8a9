"""Helpers of the aml-hip tests (imported by conftest.py and the test modules; a unique
module name, so that these tests can run in one pytest session with other packages').

The tests run the backend against the HIP driver double (``backends/hip/tests/native/double.c``),
in the mode named by ``AML_HIP_TEST_DOUBLE`` (``host``, the default, or ``forward``).
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("aml_core") is None:  # a checkout without aml-core installed
    sys.path.insert(0, str(HERE.parents[2]))

from aml_core.errors import AMLError  # noqa: E402
from aml_core.testing.double_fixtures import DoubleSuite, DriverDouble  # noqa: E402

# the suite first: it puts aml_hip on sys.path when it is not installed
SUITE = DoubleSuite(__file__, "aml_hip", "AML_HIP_TEST_DOUBLE", "hip_double.py", "the HIP driver double")
REPO, BACKEND_ROOT, MODE, build = SUITE.repo, SUITE.backend_root, SUITE.mode, SUITE.build

import aml_hip  # noqa: E402

__all__ = [
    "BACKEND_ROOT",
    "DOUBLE_ENV",
    "LIVE_KINDS",
    "MODE",
    "REPO",
    "SUITE",
    "HipDouble",
    "aml_hip",
    "build",
    "build_double",
    "child_env",
]

#: Kinds of live objects the double counts (DoubleControl.live) and a test must leave at 0.
#: Not among them: ``async`` (hipMallocAsync memory, counted under ``device`` too) and
#: ``free_pending`` (a hipFreeAsync queued on a stream that has not run it: freed for the
#: caller, released by the stream later, as on a GPU).
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
    "event",
    "peer",
)
#: Environment variables of the double that must not leak in from the caller.
DOUBLE_ENV = ("HIPDOUBLE_VERSION", "HIPDOUBLE_FAULTS", "HIPDOUBLE_DEVICES", "HIPDOUBLE_DEVICE_MEMORY")


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process that imports aml_hip from this checkout."""
    return SUITE.child_env(**extra)


def build_double(version: int | None = None) -> Path:
    """Build the double in the session's mode (cached); skip with the reason if it cannot be."""
    return SUITE.build_double(version=version)


class HipDouble(DriverDouble):
    """The double a test runs against, and helpers to drive it."""

    suite = SUITE
    backend = aml_hip
    library_var = "AML_HIP_LIBRARY"
    clean_env = DOUBLE_ENV
    live_kinds = LIVE_KINDS
    probe_errors = (AMLError,)

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.version: int = self.ctl.version

    def enter(self, monkeypatch: pytest.MonkeyPatch) -> None:
        super().enter(monkeypatch)
        self.version = self.ctl.version

    def use_version(self, version: int) -> None:
        """Emulate ``version`` (HIP_VERSION encoding) and reload the backend."""
        self.ctl.set_version(version)
        self.version = version
        self.forget()

    def last(self, function: str) -> tuple[int, ...] | None:
        result: tuple[int, ...] | None = self.ctl.last_args(function)
        return result

    def read_memory(self, ptr: int, size: int) -> bytes:
        out = ctypes.create_string_buffer(size)
        if size:
            aml_hip.get_runtime().memcpy(ctypes.addressof(out), ptr, size)
        return out.raw

    def write_memory(self, ptr: int, data: bytes) -> None:
        if data:
            rt = aml_hip.get_runtime()
            src = ctypes.create_string_buffer(data, len(data))
            rt.memcpy(ptr, ctypes.addressof(src), len(data))
            rt.synchronize()

    def env(self, **extra: str) -> dict[str, str]:
        """A child process's environment: the same double, emulating the same version."""
        return super().env(HIPDOUBLE_VERSION=str(self.version), **extra)
