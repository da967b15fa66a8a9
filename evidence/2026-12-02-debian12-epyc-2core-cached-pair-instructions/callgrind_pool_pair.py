"""One host pool cached 4 KiB pair per iteration, for callgrind (summary.md: N = 0 and 100000)."""

import sys

import aml_core
from aml_core.host import HostArea

host = HostArea()
pool = aml_core.pool(host)
pool.munmap(pool.mmap(4096))
mmap, munmap = pool.mmap, pool.munmap


def host_pair(k: int) -> None:
    for _ in range(k):
        munmap(mmap(4096))


host_pair(1000)
host_pair(int(sys.argv[1]))
