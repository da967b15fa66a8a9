"""The program every rank runs (``mpiexec -n N python -m tests.mpi.ranks CHECK...``):
aml buffers as mpi4py takes them, checked across real ranks. Each check raises on a wrong
result; rank 0 prints one JSON line ``{"ranks": N, "passed": [...], "skipped": {...}}``
and a failing rank aborts the job (non-zero exit), so the test sees every failure.

Checks: ``p2p`` (Send/Recv, Sendrecv around a ring, Isend/Irecv of host, pooled and
read-only buffers), ``allreduce`` (in place, int64 and float64), ``rma`` (``MPI.Win.Create``
over a NUMA-bound aml buffer: Put, Accumulate and Get between fences, the pages on the
bound node), ``dlpack`` (buffers that call themselves CUDA, ROCm and oneAPI memory, over
host memory: mpi4py's DLPack path with any MPI), ``device`` (a real CUDA buffer; skipped
unless the MPI is CUDA-aware and aml-cuda has a device).
"""

from __future__ import annotations

import json
import mmap
import sys
import traceback
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

import aml_core
from aml_core.buffer import DLDeviceType
from aml_core.errors import AMLError
from aml_core.host import HostArea, Policy, allowed_nodes
from aml_core.protocols import DeviceCopies

from .support import DeviceLike, cuda_aware

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
#: Bytes sent point to point: more than Open MPI's eager limit, and odd.
P2P_BYTES = (1 << 20) + 3


class Skip(Exception):
    """A check that cannot run here (the reason)."""


def _fill(buf: aml_core.Buffer, seed: int) -> None:
    with memoryview(buf) as view:
        view[:] = _pattern(buf.size, seed)


def _pattern(size: int, seed: int) -> bytes:
    return (np.arange(size, dtype=np.uint64) * 7 + seed).astype(np.uint8).tobytes()


def _bytes(buf: aml_core.Buffer) -> bytes:
    with memoryview(buf) as view:
        return bytes(view)


def check_p2p() -> None:
    with HostArea() as area, aml_core.pool(area) as pooled:
        right, left = (RANK + 1) % SIZE, (RANK - 1) % SIZE
        # Sendrecv around the ring, from and into aml host buffers.
        send, recv = area.mmap(P2P_BYTES), area.mmap(P2P_BYTES)
        _fill(send, RANK)
        COMM.Sendrecv(send, dest=right, recvbuf=recv, source=left)
        assert _bytes(recv) == _pattern(P2P_BYTES, left), "Sendrecv: wrong bytes"
        # Send/Recv from rank 0 to every rank, out of a read-only buffer into pooled blocks.
        if RANK == 0:
            source = area.mmap(P2P_BYTES)
            _fill(source, 99)
            ro = area.mmap(mmap.PAGESIZE, {"prot": mmap.PROT_READ})
            for dest in range(1, SIZE):
                COMM.Send(source, dest=dest, tag=1)
                COMM.Send(ro, dest=dest, tag=2)  # a read-only buffer is a valid send buffer
        else:
            block = pooled.mmap(P2P_BYTES)
            zeros = pooled.mmap(mmap.PAGESIZE)
            _fill(zeros, 1)
            COMM.Recv(block, source=0, tag=1)
            COMM.Recv(zeros, source=0, tag=2)
            assert _bytes(block) == _pattern(P2P_BYTES, 99), "Recv into a pooled block: wrong bytes"
            assert _bytes(zeros) == bytes(mmap.PAGESIZE), "Recv of a read-only buffer: wrong bytes"
        # Nonblocking, the other way round the ring.
        _fill(send, 1000 + RANK)
        reqs = [COMM.Irecv(recv, source=right, tag=3), COMM.Isend(send, dest=left, tag=3)]
        MPI.Request.Waitall(reqs)
        assert _bytes(recv) == _pattern(P2P_BYTES, 1000 + right), "Isend/Irecv: wrong bytes"


def check_allreduce() -> None:
    n = 4096
    with HostArea() as area:
        ints = area.mmap(8 * n)
        np.frombuffer(ints, dtype=np.int64)[:] = np.arange(n) * (RANK + 1)
        COMM.Allreduce(MPI.IN_PLACE, [ints, MPI.INT64_T], op=MPI.SUM)
        expect = np.arange(n) * (SIZE * (SIZE + 1) // 2)
        assert np.array_equal(np.frombuffer(ints, dtype=np.int64), expect), "Allreduce(SUM): wrong values"
        floats = area.mmap(8 * n)
        np.frombuffer(floats, dtype=np.float64)[:] = RANK + 0.5
        COMM.Allreduce(MPI.IN_PLACE, [floats, MPI.DOUBLE], op=MPI.MAX)
        assert np.all(np.frombuffer(floats, dtype=np.float64) == SIZE - 0.5), "Allreduce(MAX): wrong values"


def check_windows() -> None:
    """Whether this MPI makes RMA windows at all, over a NumPy array (Skip with the reason
    when not): Debian's Open MPI 4.1.6 refuses ``MPI_Win_create`` with MPI_ERR_WIN on one
    node (its osc/rdma over ob1/vader: open-mpi/ompi#11466, #9871), whatever the memory."""
    control = np.zeros(SIZE, dtype=np.int64)
    try:
        win = MPI.Win.Create(control, disp_unit=8, comm=COMM)
    except MPI.Exception as exc:
        raise Skip(
            f"this MPI makes no RMA window over a NumPy array either ({exc}; "
            f"{MPI.Get_library_version().splitlines()[0].strip()}): see open-mpi/ompi#11466"
        ) from None
    win.Free()


def check_rma() -> None:
    check_windows()  # the MPI's own limits are a skip, not aml's failure
    nodes = sorted(allowed_nodes())
    node = nodes[RANK % len(nodes)]
    with HostArea(Policy.BIND, [node]) as area:
        window = area.mmap(8 * SIZE)
        slots = np.frombuffer(window, dtype=np.int64)
        slots[:] = -1
        win = MPI.Win.Create(window, disp_unit=8, comm=COMM)
        try:
            mine = area.mmap(8)
            np.frombuffer(mine, dtype=np.int64)[0] = 10 * (RANK + 1)
            win.Fence()
            for target in range(SIZE):  # my value into slot RANK of every window
                win.Put([mine, MPI.INT64_T], target, target=(RANK, 1, MPI.INT64_T))
            win.Fence()
            assert slots.tolist() == [10 * (r + 1) for r in range(SIZE)], f"Put: {slots.tolist()}"
            COMM.Barrier()  # every rank has read its window before the next epoch writes it
            for target in range(SIZE):  # every rank adds its rank + 1 to slot 0 everywhere
                win.Accumulate([mine, MPI.INT64_T], target, target=(0, 1, MPI.INT64_T), op=MPI.SUM)
            win.Fence()
            assert slots[0] == 10 + sum(10 * (r + 1) for r in range(SIZE)), f"Accumulate: {slots[0]}"
            COMM.Barrier()
            got = area.mmap(8 * SIZE)
            win.Get([got, MPI.INT64_T], (RANK + 1) % SIZE)
            win.Fence()
            assert np.array_equal(np.frombuffer(got, dtype=np.int64), slots), "Get: wrong values"
        finally:
            win.Free()
        placed = area.page_nodes(window, summary=True)
        assert set(placed) == {node}, f"the window's pages are on {placed}, not on node {node}"


def check_dlpack() -> None:
    """Buffers that are not host-accessible go to MPI through DLPack, as mpi4py 4 asks
    (``__dlpack_device__``, then ``__dlpack__(stream=-1, max_version=(1, 0), copy=False)``):
    CUDA-, ROCm- and oneAPI-like buffers over host memory, so any MPI moves their bytes."""
    for dl_type in (DLDeviceType.CUDA, DLDeviceType.ROCM, DLDeviceType.ONEAPI):
        with DeviceLike(dl_type, host_accessible=False) as area:
            send, recv = area.mmap(P2P_BYTES), area.mmap(P2P_BYTES)
            with area.host_view(send) as view:
                view[:] = _pattern(P2P_BYTES, RANK + int(dl_type))
            COMM.Sendrecv(send, dest=(RANK + 1) % SIZE, recvbuf=recv, source=(RANK - 1) % SIZE)
            with area.host_view(recv) as view:
                got = bytes(view)
            assert got == _pattern(P2P_BYTES, (RANK - 1) % SIZE + int(dl_type)), (
                f"{dl_type.name}: wrong bytes"
            )
            assert send.exports == 0, "mpi4py's DLPack capsule was not given back"
            assert recv.exports == 0, "mpi4py's DLPack capsule was not given back"


def check_device() -> None:
    aware, why = cuda_aware()
    if not aware:
        raise Skip(why)
    try:
        area = aml_core.area("device", backend="cuda")
    except AMLError as exc:
        raise Skip(f"no CUDA device through aml-cuda: {exc}") from None
    assert isinstance(area, DeviceCopies)
    with area:
        send, recv = area.mmap(P2P_BYTES), area.mmap(P2P_BYTES)
        area.write(send, _pattern(P2P_BYTES, RANK))
        COMM.Sendrecv(send, dest=(RANK + 1) % SIZE, recvbuf=recv, source=(RANK - 1) % SIZE)
        assert area.read(recv) == _pattern(P2P_BYTES, (RANK - 1) % SIZE), "device Sendrecv: wrong bytes"


CHECKS: dict[str, Callable[[], None]] = {
    "p2p": check_p2p,
    "allreduce": check_allreduce,
    "rma": check_rma,
    "windows": check_windows,
    "dlpack": check_dlpack,
    "device": check_device,
}


def main(names: list[str]) -> int:
    passed: list[str] = []
    skipped: dict[str, str] = {}
    for name in names:
        try:
            CHECKS[name]()
        except Skip as why:
            skipped[name] = str(why)
        except BaseException:
            sys.stderr.write(f"rank {RANK}: check {name!r} failed\n{traceback.format_exc()}")
            sys.stderr.flush()
            COMM.Abort(1)
        else:
            passed.append(name)
        COMM.Barrier()
    if RANK == 0:
        print(json.dumps({"ranks": SIZE, "passed": passed, "skipped": skipped}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
