"""The HSA fault-injection table (``hsa_faults.py``), run by
:func:`tests.support.faults.fault_tests`: each run is the AML error aml-hsa's table gives the injected status,
with the failed function as its native cause; nothing leaks or crashes."""

from __future__ import annotations

import hsa_faults

from tests.support.faults import fault_tests

test_every_call_of_the_operation_fails_cleanly, test_the_table_covers_every_exported_function = fault_tests(
    hsa_faults, "hsa"
)
