"""The HIP fault-injection table (``hip_faults.py``, run by :mod:`tests.support.faults`):
every exported hip* function an operation calls fails in turn, in its own process per
operation; each run is the AML error HIP's table gives the injected code, with the failed
function and the code's name as its native cause, nothing leaks once the caller closes
again, and nothing crashes."""

from __future__ import annotations

from pathlib import Path

import hip_faults
import pytest
from hip_helpers import HipDouble

from tests.support.faults import FaultSuite

SUITE = FaultSuite(hip_faults.TABLE, Path(hip_faults.__file__))


@pytest.mark.host_double
@pytest.mark.parametrize("operation", list(hip_faults.OPERATIONS))
def test_every_call_of_the_operation_fails_cleanly(hip: HipDouble, operation: str) -> None:
    SUITE.check(operation, hip.env())


@pytest.mark.host_double
def test_the_table_covers_every_exported_function(hip: HipDouble) -> None:
    """Every function the double exports is called by an operation of the table, or
    listed in NOT_CALLED with the reason."""
    SUITE.check_coverage(hip.path, hip.env())
