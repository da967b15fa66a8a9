"""The HIP fault-injection table (``hip_faults.py``): every exported hip* function an
operation calls fails in turn, in its own process per operation; each run is an AML error
with the failed function as its native cause (or a tolerated failure), nothing leaks once
the caller closes again, and nothing crashes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import hip_faults
import pytest
from hip_helpers import HipDouble

HERE = Path(__file__).resolve().parent
_used: dict[str, set[str]] = {}


def _run(hip: HipDouble, operation: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(HERE / "hip_faults.py"), operation],
        capture_output=True,
        text=True,
        env=hip.env(),
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, (
        f"{operation}: the process died (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
    )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.host_double
@pytest.mark.parametrize("operation", list(hip_faults.OPERATIONS))
def test_every_call_of_the_operation_fails_cleanly(hip: HipDouble, operation: str) -> None:
    result = _run(hip, operation)
    _used[operation] = set(result["used"])
    assert result["runs"], f"{operation} calls no hip function"
    problems = []
    for run in result["runs"]:
        where = f"{run['function']} (call {run['occurrence'] + 1})"
        if run.get("bare"):
            problems.append(f"{where}: a bare {run['bare']}")
        if "error" in run and run["cause"] != run["function"]:
            problems.append(f"{where}: {run['error']} with native cause {run['cause']}: {run['text']}")
        if run["close_problems"]:
            problems.append(f"{where}: {run['close_problems']}")
        if run["live"]:
            problems.append(f"{where}: leaked {run['live']}")
    assert not problems, "\n".join(problems)


@pytest.mark.host_double
def test_the_table_covers_every_exported_function(hip: HipDouble) -> None:
    """Every function the double exports is called by an operation of the table, or
    listed in NOT_CALLED with the reason."""
    used: set[str] = set()
    for operation in hip_faults.OPERATIONS:
        used |= _used.get(operation) or set(_run(hip, operation)["used"])
    functions = hip_faults.exported_functions()
    assert len(functions) > 40
    missing = [f for f in functions if f not in used and f not in hip_faults.NOT_CALLED]
    assert not missing, f"no operation calls {missing}: add one to hip_faults.OPERATIONS"
    stale = [f for f in hip_faults.NOT_CALLED if f in used]
    assert not stale, f"{stale} are called now: drop them from NOT_CALLED"
