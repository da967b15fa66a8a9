"""The program of ``test_mpi_ranks_bound_to_their_nodes_share_buffers`` (``mpiexec -n N
python -m tests.numa.mpi_ranks``; one rank per node with CPUs): rank r runs on node r's
CPUs, maps a buffer bound to its node (``ipc=True``) and fills it, the ranks exchange
the handles, every rank opens every other rank's buffer, reads its bytes and where its
pages are, and a DEFAULT buffer of each rank lands on its own node. Rank 0 prints one
JSON line ``{"ranks": N, "seen": [{rank: {node: pages}}, ...]}``; a failing rank aborts."""

from __future__ import annotations

import json
import os
import sys
import traceback

import numpy as np
from mpi4py import MPI

import aml_core
from aml_core.host import HostArea, page_nodes

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
SIZE_BYTES = 4 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")


def _cpu_nodes() -> list[int]:
    out = []
    for name in sorted(os.listdir("/sys/devices/system/node")):
        if name.startswith("node") and name[4:].isdigit():
            with open(f"/sys/devices/system/node/{name}/cpulist") as f:
                if f.read().strip():
                    out.append(int(name[4:]))
    return sorted(out)


def _cpus(node: int) -> set[int]:
    with open(f"/sys/devices/system/node/node{node}/cpulist") as f:
        text = f.read().strip()
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def main() -> None:
    node = _cpu_nodes()[RANK]
    os.sched_setaffinity(0, _cpus(node))
    with HostArea("bind", [node], ipc=True) as area, HostArea() as local:
        buf = area.mmap(SIZE_BYTES)
        arr = np.frombuffer(buf, dtype=np.uint8)
        arr[:] = RANK + 1
        del arr
        mine = local.mmap(SIZE_BYTES)
        arr = np.frombuffer(mine, dtype=np.uint8)
        arr[::PAGE] = 1
        del arr
        assert page_nodes(mine.ptr, mine.size, summary=True) == {node: SIZE_BYTES // PAGE}
        export = area.ipc_export(buf)
        handles = COMM.allgather(export.handle)
        seen: dict[str, dict[str, int]] = {}
        opened = []
        for r, handle in enumerate(handles):
            other = buf if r == RANK else aml_core.ipc_open(handle)
            with memoryview(other) as view:
                # read every page: an importer's page tables hold only the pages it touched
                assert bytes(view[::PAGE]) == bytes([r + 1]) * (other.size // PAGE), r
            counts = page_nodes(other.ptr, other.size, summary=True)
            seen[str(r)] = {str(k): v for k, v in counts.items()}
            if other is not buf:
                opened.append(other)
        everything = COMM.gather(seen, root=0)
        for other in opened:
            other.free()
        COMM.Barrier()  # every rank let go of the others' buffers before they are freed
        export.close()
    if RANK == 0:
        print(json.dumps({"ranks": SIZE, "seen": everything}))


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        COMM.Abort(1)
