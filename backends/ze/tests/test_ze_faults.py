"""Level Zero's fault table (``ze_faults.py``) under test: each ze* call an operation makes
fails in turn and must be the error the area's table gives the code, its native cause the
failed function; nothing leaks or crashes (:func:`tests.support.faults.fault_tests`)."""

from __future__ import annotations

import ze_faults

from tests.support.faults import fault_tests

(
    test_every_call_of_the_operation_fails_cleanly,
    test_the_table_covers_every_exported_function,
    test_known_double_fault_leak,
) = fault_tests(ze_faults, "ze")
