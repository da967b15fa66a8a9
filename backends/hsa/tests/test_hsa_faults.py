"""The HSA fault table (``hsa_faults.py``) under test, by
:func:`tests.support.faults.fault_tests`: each hsa* call fails in turn and must be the
AML error of aml-hsa's table for the status, its native cause the failed function; nothing
leaks (in the double or in aml-hsa's tracking) or crashes."""

from __future__ import annotations

import hsa_faults

from tests.support.faults import fault_tests

(
    test_every_call_of_the_operation_fails_cleanly,
    test_the_table_covers_every_exported_function,
    test_known_double_fault_leak,
) = fault_tests(hsa_faults, "hsa")
