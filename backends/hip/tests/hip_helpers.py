"""Helpers of the aml-hip tests (imported by conftest.py and the test modules; a unique
module name, so that these tests can run in one pytest session with other packages').

The tests run the backend against the HIP driver double (``backends/hip/tests/native/double.c``),
in the mode named by ``AML_HIP_TEST_DOUBLE`` (``host``, the default, or ``forward``); what
every backend on a double shares is :mod:`tests.support.double_fixtures`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:  # tests.support (and aml_core, if not installed) from this checkout
    sys.path.insert(0, str(REPO))

from aml_core.errors import AMLError  # noqa: E402
from tests.support.double_fixtures import DoubleSuite, DriverDouble  # noqa: E402

# the suite first: it puts aml_hip on sys.path when it is not installed
SUITE = DoubleSuite(__file__, "aml_hip", "AML_HIP_TEST_DOUBLE", "hip_double.py", "the HIP driver double")
BACKEND_ROOT = SUITE.backend_root
#: The environment of a child process that imports aml_hip from this checkout.
child_env = SUITE.child_env
#: The double in the session's mode (cached; ``version=``: HIP_VERSION); skips if it cannot be built.
build_double = SUITE.build_double

import aml_hip  # noqa: E402

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
#: A stream handle in range (as_stream_handle accepts it) that names no stream of the double.
UNKNOWN_STREAM = 0xDEAD0000
#: Environment variables of the double that must not leak in from the caller.
DOUBLE_ENV = ("HIPDOUBLE_VERSION", "HIPDOUBLE_FAULTS", "HIPDOUBLE_DEVICES", "HIPDOUBLE_DEVICE_MEMORY")


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

    def copy(self, dst: int, src: int, size: int) -> None:
        rt = aml_hip.get_runtime()
        rt.memcpy(dst, src, size)
        rt.synchronize()

    def env(self, **extra: str) -> dict[str, str]:
        """A child process's environment: the same double, emulating the same version."""
        return super().env(HIPDOUBLE_VERSION=str(self.version), **extra)
