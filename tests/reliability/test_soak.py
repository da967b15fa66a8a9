"""Bounded stress and soak on the host area (issue 9): 16 threads on one area with the
stats consistent at the end, and 10**5 mmap+munmap cycles (with file-backed mappings and
failing options among them) with the resident set and the open file descriptors flat.
Counts, not durations: nothing here is timed."""

from __future__ import annotations

import os

from aml_core.errors import AMLError
from aml_core.host import HostArea
from tests.support.stress import hammer

CYCLES = int(os.environ.get("AML_SOAK_CYCLES", str(10**5)))
#: The resident set may grow this much over the soak (allocator caches, interned ints).
RSS_SLACK = 16 << 20


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_sixteen_threads_on_one_host_area() -> None:
    area = HostArea()
    try:
        hammer(area, threads=16, rounds=500, unit=4096, sizes=4, touch=True)
    finally:
        area.close()


def test_mmap_munmap_cycles_keep_rss_and_fds_flat(tmp_path: object) -> None:
    area = HostArea()
    path = os.path.join(str(tmp_path), "backing")
    with open(path, "wb") as f:
        f.truncate(1 << 16)
    fd = os.open(path, os.O_RDWR)
    try:
        warm = CYCLES // 10
        rss = fds = 0
        errors = 0
        for i in range(CYCLES):
            if i == warm:
                rss, fds = _rss(), _fds()
            if i % 50 == 0:
                buf = area.mmap(4096, {"fd": fd, "offset": 4096 * (i % 16), "shared": True})
            elif i % 97 == 0:
                try:
                    area.mmap(4096, {"fd": -1 - i})
                except AMLError:
                    errors += 1
                continue
            else:
                buf = area.mmap(4096 * (1 + i % 3))
            area.munmap(buf)
        assert errors > 0
        st = area.stats
        assert (st.live_mappings, st.bytes_in_use) == (0, 0)
        assert _fds() == fds
        assert _rss() - rss < RSS_SLACK, f"RSS grew by {(_rss() - rss) >> 20} MiB over {CYCLES} cycles"
    finally:
        os.close(fd)
        area.close()
