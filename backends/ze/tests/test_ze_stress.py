"""Stress on the ze driver double (issue 9): 16 threads mapping and unmapping on one area
for a bounded number of operations; the stats are consistent at the end and the double's
live counters are back to zero (the ``ze`` fixture checks them after the test)."""

from __future__ import annotations

import threading

import aml_ze
from ze_helpers import ZeDouble

from aml_core import Buffer


def test_sixteen_threads_on_one_area(ze: ZeDouble) -> None:
    area = aml_ze.device_area()
    errors: list[BaseException] = []
    barrier = threading.Barrier(16)

    def work(seed: int) -> None:
        try:
            barrier.wait()
            mine: list[Buffer] = []
            for i in range(200):
                if mine and (i + seed) % 3 == 0:
                    area.munmap(mine.pop())
                else:
                    mine.append(area.mmap(64 * (1 + (i + seed) % 7)))
            for buf in mine:
                area.munmap(buf)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors
        st = area.stats
        assert (st.live_mappings, st.bytes_in_use) == (0, 0)
        assert st.total_maps == st.total_unmaps
    finally:
        area.close()
