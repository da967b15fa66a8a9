"""Helpers of aml-cuda's tests (a module of its own, not conftest: the suite may run in
one pytest session with other packages' tests, where ``conftest`` is ambiguous)."""

from __future__ import annotations

import functools
import os
import sys

from aml_core.descriptor import ProbeResult

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
if REPO not in sys.path:  # tests.support from this checkout, after the installed aml_core
    sys.path.append(REPO)


@functools.cache
def cuda_probe() -> ProbeResult:
    try:
        import aml_cuda

        return aml_cuda.probe()
    except Exception as exc:  # the probe must not raise; report it as the reason
        return ProbeResult.unavailable(f"probe raised {type(exc).__name__}: {exc}")


def gpu_available() -> bool:
    return cuda_probe().available


def child_env() -> dict[str, str]:
    """The environment of a child Python process: the parent's sys.path, so that it
    imports the same aml_core and aml_cuda (installed or from the source tree)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
