"""Stress on the ze driver double (issue 9): 16 threads mapping and unmapping on one area
for a bounded number of operations; the stats are consistent at the end and the double's
live counters are back to zero (the ``ze`` fixture checks them after the test)."""

from __future__ import annotations

import aml_ze
from ze_helpers import ZeDouble

from tests.support.stress import hammer


def test_sixteen_threads_on_one_area(ze: ZeDouble) -> None:
    area = aml_ze.device_area()
    try:
        hammer(area, threads=16, rounds=200)
    finally:
        area.close()
