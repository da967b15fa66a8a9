"""Helpers of the aml-ze tests (imported by conftest.py and the test modules; a unique
module name, so that these tests can run in one pytest session with other packages').

The tests run the backend against the Level Zero driver double
(``backends/ze/tests/native/double.c``) in the mode named by ``AML_ZE_TEST_DOUBLE``
(``host``, the default, or ``forward``), against Debian's real loader without a driver,
and against the loader with Level Zero's own null driver and validation layer (in child
processes: the loader reads its environment once). What every backend on a double shares
is :mod:`tests.support.double_fixtures`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
if str(REPO) not in sys.path:  # tests.support (and aml_core, if not installed) from this checkout
    sys.path.insert(0, str(REPO))

from aml_core.errors import AMLError  # noqa: E402
from tests.support.double_fixtures import DoubleSuite, DriverDouble  # noqa: E402

# the suite first: it puts aml_ze on sys.path when it is not installed
SUITE = DoubleSuite(__file__, "aml_ze", "AML_ZE_TEST_DOUBLE", "ze_double.py", "the Level Zero double")
build = SUITE.build

import aml_ze  # noqa: E402

#: Environment variables of the loader and the double that must not leak in from the caller.
LOADER_ENV = (
    "ZE_ENABLE_NULL_DRIVER",
    "ZE_ENABLE_ALT_DRIVERS",
    "ZE_ENABLE_VALIDATION_LAYER",
    "ZE_ENABLE_PARAMETER_VALIDATION",
    "ZES_ENABLE_SYSMAN",
    "ZEDOUBLE_NO_DRIVER",
    "AML_ZE_LIBRARY",
)


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process that imports aml_ze from this checkout."""
    return SUITE.child_env(drop=LOADER_ENV, **extra)


def run_python(code: str, env: dict[str, str], timeout: float = 120) -> dict[str, Any]:
    """Run ``code`` in a child Python; it prints one JSON object as its last line."""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


#: The double in the session's mode (cached; ``put=False``: without zeMemPutIpcHandle);
#: skips with the reason if it cannot be built.
build_double = SUITE.build_double


class ZeDouble(DriverDouble):
    """The double a test runs against, and helpers to drive it."""

    suite = SUITE
    backend = aml_ze
    library_var = "AML_ZE_LIBRARY"
    clean_env = LOADER_ENV
    probe_errors = (AMLError,)

    def read_memory(self, ptr: int, size: int) -> bytes:
        result: bytes = self.ctl.read(ptr, size)  # aml-ze copies nothing: the double does
        return result

    def write_memory(self, ptr: int, data: bytes) -> None:
        self.ctl.write(ptr, data)

    def env(self, **extra: str) -> dict[str, str]:
        """A child process's environment: the same double."""
        return child_env(AML_ZE_LIBRARY=str(self.path), **extra)
