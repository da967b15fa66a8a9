"""Thread stress for any area, part of the conformance kit: many threads mapping and
unmapping on one area for a bounded number of operations, then the area's stats must be
consistent (nothing live, as many unmaps as maps). A backend's suite calls it on each of
its areas; its double's live counters (checked by its fixtures) then prove nothing leaked
natively either.
"""

from __future__ import annotations

import threading

from aml_core.area import Area
from aml_core.buffer import Buffer
from aml_core.specs import AreaStats

__all__ = ["hammer"]


def hammer(
    area: Area, *, threads: int = 16, rounds: int = 200, unit: int = 64, sizes: int = 7, touch: bool = False
) -> AreaStats:
    """Run ``threads`` threads, started together, each making ``rounds`` operations on
    ``area``: every third one unmaps its newest buffer, the others map ``unit`` times 1 to
    ``sizes`` bytes; each thread then unmaps what it still holds. With ``touch``, a
    buffer's first byte is written (through the buffer protocol) before it is unmapped.
    Raises the first error a thread met; asserts the stats are consistent; returns them."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def work(seed: int) -> None:
        try:
            barrier.wait()
            mine: list[Buffer] = []
            for i in range(rounds):
                if mine and (i + seed) % 3 == 0:
                    buf = mine.pop()
                    if touch:
                        memoryview(buf)[0] = seed & 0xFF
                    area.munmap(buf)
                else:
                    mine.append(area.mmap(unit * (1 + (i + seed) % sizes)))
            for buf in mine:
                area.munmap(buf)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(seed,)) for seed in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise errors[0]
    stats = area.stats
    assert (stats.live_mappings, stats.bytes_in_use) == (0, 0), stats
    assert stats.total_maps == stats.total_unmaps, stats
    return stats
