"""One RMA epoch pair over a window of KIND memory: Put, Fence, Accumulate, Fence (rank 0 prints)."""
import sys
import numpy as np
from mpi4py import MPI
from aml_core.host import HostArea, Policy, allowed_nodes

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
kind, ops = sys.argv[1], sys.argv[2].split(",")

def run(window, mine, win):
    slots = np.frombuffer(window, dtype=np.int64)
    win.Fence()
    if "put" in ops:
        for t in range(SIZE):
            win.Put([mine, MPI.INT64_T], t, target=(RANK, 1, MPI.INT64_T))
        win.Fence()
        print(f"rank {RANK} {kind} put ok: {slots.tolist()}", flush=True)
    COMM.Barrier()
    if "acc" in ops:
        for t in range(SIZE):
            win.Accumulate([mine, MPI.INT64_T], t, target=(0, 1, MPI.INT64_T), op=MPI.SUM)
        win.Fence()
        print(f"rank {RANK} {kind} accumulate ok: {slots.tolist()}", flush=True)
    COMM.Barrier()
    if "fop" in ops:
        res = np.zeros(1, dtype=np.int64)
        win.Lock(0)
        win.Fetch_and_op([mine, MPI.INT64_T], [res, MPI.INT64_T], 0, 1, op=MPI.SUM)
        win.Unlock(0)
        print(f"rank {RANK} {kind} fetch_and_op ok: {res.tolist()}", flush=True)
    COMM.Barrier()
    if "lock" in ops:
        win.Lock(0)
        win.Put([mine, MPI.INT64_T], 0, target=(RANK, 1, MPI.INT64_T))
        win.Unlock(0)
        print(f"rank {RANK} {kind} lock+put ok", flush=True)

if kind == "numpy":
    window = np.full(SIZE, -1, dtype=np.int64)
    mine = np.array([10 * (RANK + 1)], dtype=np.int64)
    win = MPI.Win.Create(window, disp_unit=8, comm=COMM)
    run(window, mine, win); win.Free()
elif kind == "allocate":
    win = MPI.Win.Allocate(8 * SIZE, disp_unit=8, comm=COMM)
    window = np.frombuffer(win.tomemory(), dtype=np.int64); window[:] = -1
    mine = np.array([10 * (RANK + 1)], dtype=np.int64)
    run(window, mine, win); win.Free()
else:
    node = sorted(allowed_nodes())[0]
    with HostArea(Policy.BIND, [node]) as area:
        window = area.mmap(8 * SIZE); np.frombuffer(window, dtype=np.int64)[:] = -1
        mine = area.mmap(8); np.frombuffer(mine, dtype=np.int64)[0] = 10 * (RANK + 1)
        win = MPI.Win.Create(window, disp_unit=8, comm=COMM)
        run(window, mine, win); win.Free()
print(f"rank {RANK} {kind} {ops} done", flush=True)
