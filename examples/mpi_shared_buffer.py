"""One NUMA-placed host buffer shared by the ranks of a node, through aml's host IPC.

    mpiexec -n 4 python examples/mpi_shared_buffer.py [MiB]

Rank 0 of each node (``MPI.COMM_TYPE_SHARED``) maps the buffer from
``HostArea(policy, nodes, ipc=True)`` — interleaved over the node's NUMA nodes, or bound
to its one node — and broadcasts its :class:`~aml_core.ipc.IpcHandle`; the other ranks
open it with :func:`aml_core.ipc_open`. Every rank maps the same pages (no copy), and
each sees the exporter's NUMA policy. Each rank fills its own slice, then every rank
checks every slice; the importers close their mappings before rank 0 frees the memory.
Rank 0 of the world prints one JSON line of what was checked.

This is what MPI-3's ``MPI.Win.Allocate_shared`` gives, with aml's placement (policy,
nodes, huge pages) and a buffer that any process can open, MPI rank or not.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

import aml_core
from aml_core.host import HostArea, Policy, allowed_nodes, policy_of


def main(mib: int) -> dict[str, object]:
    world = MPI.COMM_WORLD
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    nodes = sorted(allowed_nodes())
    policy = Policy.INTERLEAVE if len(nodes) > 1 else Policy.BIND
    area = HostArea(policy, nodes, ipc=True)
    size = mib << 20
    if node.rank == 0:
        buf = area.mmap(size)
        handle = area.ipc_export(buf).handle
    else:
        handle = None
    handle = node.bcast(handle, root=0)
    if node.rank != 0:
        buf = aml_core.ipc_open(handle)  # the same pages as rank 0's buffer

    # Each rank writes its slice of int64s, then reads everyone's.
    data = np.frombuffer(buf, dtype=np.int64)
    share = len(data) // node.size
    data[node.rank * share : (node.rank + 1) * share] = node.rank + 1
    node.Barrier()
    expect = np.repeat(np.arange(1, node.size + 1, dtype=np.int64), share)
    ok = bool(np.array_equal(data[: node.size * share], expect))
    seen = policy_of(buf.ptr)
    del data  # the view must go before the buffer is closed

    checks = node.gather({"ok": ok, "policy": seen[0].name, "nodes": list(seen[1])}, root=0)
    if node.rank != 0:
        buf.area.munmap(buf)  # close the imported mapping
    node.Barrier()  # every importer has let go: the exporter frees
    if node.rank == 0:
        area.munmap(buf)
    area.close()
    report: dict[str, object] = {}
    if node.rank == 0:
        assert checks is not None
        report = {
            "node_ranks": node.size,
            "bytes": size,
            "policy": policy.name,
            "nodes": nodes,
            "all_slices_seen": all(c["ok"] for c in checks),
            "policies_seen": sorted({(c["policy"], tuple(c["nodes"])) for c in checks}),
        }
    node.Free()
    return report


if __name__ == "__main__":
    result = main(int(sys.argv[1]) if len(sys.argv) > 1 else 16)
    if MPI.COMM_WORLD.rank == 0:
        print(json.dumps(result), flush=True)
