"""The HSA fault-injection table (``hsa_faults.py``, run by :mod:`tests.support.faults`):
every exported hsa* function an operation calls fails in turn, in its own process per
operation; each run is the AML error of aml-hsa's table for the injected status, with the
failed function and the status's name as its native cause, nothing leaks (in the double
or in aml-hsa's tracking) once the caller closes again, and nothing crashes."""

from __future__ import annotations

from pathlib import Path

import hsa_faults
import pytest
from hsa_helpers import HsaDouble

from tests.support.faults import FaultSuite

SUITE = FaultSuite(hsa_faults.TABLE, Path(hsa_faults.__file__))


@pytest.mark.host_double
@pytest.mark.parametrize("operation", list(hsa_faults.OPERATIONS))
def test_every_call_of_the_operation_fails_cleanly(hsa: HsaDouble, operation: str) -> None:
    SUITE.check(operation, hsa.env())


@pytest.mark.host_double
def test_the_table_covers_every_exported_function(hsa: HsaDouble) -> None:
    """Every hsa* function the double exports is called by an operation of the table, or
    listed in NOT_CALLED with the reason."""
    SUITE.check_coverage(hsa.path, hsa.env())
