"""The Level Zero fault-injection table (``ze_faults.py``, run by
:mod:`tests.support.faults`): every exported ze* function an operation calls fails in
turn, in its own process per operation; each run is the AML error of the area's table for
the injected code, with the failed function and the code's name as its native cause,
nothing leaks once the caller closes again, and nothing crashes."""

from __future__ import annotations

from pathlib import Path

import pytest
import ze_faults
from ze_helpers import ZeDouble

from tests.support.faults import FaultSuite

SUITE = FaultSuite(ze_faults.TABLE, Path(ze_faults.__file__))


@pytest.mark.host_double
@pytest.mark.parametrize("operation", list(ze_faults.OPERATIONS))
def test_every_call_of_the_operation_fails_cleanly(ze: ZeDouble, operation: str) -> None:
    SUITE.check(operation, ze.env())


@pytest.mark.host_double
def test_the_table_covers_every_exported_function(ze: ZeDouble) -> None:
    """Every ze* function the double exports is called by an operation of the table."""
    SUITE.check_coverage(ze.path, ze.env())
