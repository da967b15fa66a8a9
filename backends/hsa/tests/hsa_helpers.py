"""Helpers of the aml-hsa tests (a unique module name: every package's tests run in one
pytest session).

The tests run the backend against the HSA driver double (``native/double.c``) in the mode
named by ``AML_HSA_TEST_DOUBLE`` (``host``, the default, or ``forward``: memory forwarded to
CUDA on an NVIDIA GPU); what every backend on a double shares is
:mod:`tests.support.double_fixtures`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
if str(REPO) not in sys.path:  # tests.support (and aml_core, if not installed) from this checkout
    sys.path.insert(0, str(REPO))

from tests.support.double_fixtures import DoubleSuite, DriverDouble  # noqa: E402

# the suite first: it puts aml_hsa on sys.path when it is not installed
SUITE = DoubleSuite(__file__, "aml_hsa", "AML_HSA_TEST_DOUBLE", "hsa_double.py", "the HSA driver double")
MODE, build = SUITE.mode, SUITE.build
#: The double in this session's mode (cached; an older ``interface``, default (1, 6), as
#: its argument); skips with the reason if it cannot be built.
build_double = SUITE.build_double
#: The environment of a child process that imports aml_hsa from this checkout.
child_env = SUITE.child_env

import aml_hsa  # noqa: E402
import aml_hsa.native  # noqa: E402

#: Environment variables of the double that must not leak in from the caller.
DOUBLE_ENV = ("HSADOUBLE_GPUS", "HSADOUBLE_NO_KFD", "HSADOUBLE_FAULTS")


def open_fds() -> set[int]:
    """This process's open file descriptors (``/proc/self/fd``)."""
    return {int(name) for name in os.listdir("/proc/self/fd")} - {-1}


def forget() -> None:
    """Drop aml-hsa's runtime and library (hsa_shut_down included)."""
    aml_hsa.BACKEND.reset()
    aml_hsa.native.shutdown_all()


class HsaDouble(DriverDouble):
    """The double a test runs against."""

    suite = SUITE
    backend = aml_hsa
    library_var = "AML_HSA_LIBRARY"
    clean_env = DOUBLE_ENV

    def forget(self) -> None:
        forget()

    def probe(self) -> None:
        aml_hsa.get_runtime()

    def tracked(self) -> dict[str, int]:
        rt = aml_hsa.BACKEND._runtime
        return rt.live() if rt is not None else {}  # type: ignore[no-any-return,attr-defined]

    def emulate_devices(self, count: int, memory: int) -> None:
        forget()
        self.ctl.set_gpus(count, memory)

    def need_gpus(self, count: int) -> None:
        """Host mode: emulate ``count`` GPU agents; forward mode: skip if there are fewer."""
        self.need_devices(count, 0)

    def objects(self) -> dict[str, int]:
        """Live native objects other than the hsa_init count."""
        return {k: v for k, v in self.live().items() if k != "init" and v}

    def copy(self, dst: int, src: int, size: int) -> None:
        aml_hsa.get_runtime().memory_copy(dst, src, size)

    def env(self, **extra: str) -> dict[str, str]:
        return super().env(AML_HSA_TEST_DOUBLE=MODE, **extra)
