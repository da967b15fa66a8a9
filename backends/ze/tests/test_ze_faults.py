"""The Level Zero fault-injection table (``ze_faults.py``), run by
:func:`tests.support.faults.fault_tests`: each run is the AML error the area's table gives the injected code,
with the failed function as its native cause; nothing leaks or crashes."""

from __future__ import annotations

import ze_faults

from tests.support.faults import fault_tests

test_every_call_of_the_operation_fails_cleanly, test_the_table_covers_every_exported_function = fault_tests(
    ze_faults, "ze"
)
