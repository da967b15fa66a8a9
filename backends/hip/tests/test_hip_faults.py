"""The HIP fault-injection table (``hip_faults.py``), run by
:func:`tests.support.faults.fault_tests`: each run is the AML error HIP's table gives the injected code,
with the failed function as its native cause; nothing leaks or crashes."""

from __future__ import annotations

import hip_faults

from tests.support.faults import fault_tests

test_every_call_of_the_operation_fails_cleanly, test_the_table_covers_every_exported_function = fault_tests(
    hip_faults, "hip"
)
