"""HIP's fault-injection table (``hip_faults.py``) under test: every hip* call of each
operation fails in turn and must be the AML error HIP's table gives the code, with the
failed function as its native cause; nothing leaks or crashes
(:func:`tests.support.faults.fault_tests`)."""

from __future__ import annotations

import hip_faults

from tests.support.faults import fault_tests

(
    test_every_call_of_the_operation_fails_cleanly,
    test_the_table_covers_every_exported_function,
    test_known_double_fault_leak,
) = fault_tests(hip_faults, "hip")
