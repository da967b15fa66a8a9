"""aml memory registered with soft-RoCE and moved by RDMA between the two hosts: the buffer
kinds both sides make (:func:`make`), their registered pieces, an RC queue pair connected to
the other host's (:class:`RcLink`), and the peer program on host ``b``
(``python -m tests.hosts.rdma_memory``), which host ``a``'s tests drive over TCP.

A kind's memory on either host is ``(buffer, pieces, close)``: ``pieces`` the registered
stretches ``(addr, length, lkey, rkey)`` that cover the buffer in order (one, or one per
chunk of an expandable pool that the block spans); ``close`` deregisters and frees it.
RDMA WRITE and READ between two kinds' pieces go one work request per overlap of a local
and a remote piece (:func:`segments`), each under its own piece's keys."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import aml_core
from aml_core import rdma
from aml_core.buffer import Buffer
from aml_core.host import HostArea, Policy
from tests.support.rxe import gid_index, import_pyverbs, mr_count

__all__ = [
    "KINDS",
    "PEER_PORT",
    "CompletionError",
    "RcLink",
    "content",
    "fill",
    "make",
    "pattern",
    "segments",
]

KiB, MiB = 1 << 10, 1 << 20
#: The peer's TCP port on host b (the guests' network).
PEER_PORT = 7341
DEVICE = "rxe0"
#: The kinds of aml memory moved between the hosts, and each one's size.
KINDS: dict[str, int] = {
    "host": 1 * MiB,
    "pooled": 256 * KiB,
    "numa-bound": 1 * MiB,
    "huge-page": 2 * MiB,
    "ipc": 1 * MiB,
    "expandable": MiB + MiB // 2,  # spans two chunks of the pool's segment
}

Piece = tuple[int, int, int, int]  # addr, length, lkey, rkey

#: The RC queue pair's transport timer (ibv_modify_qp(3): 4.096 µs * 2^timeout, 0 waits
#: for ever): 2^18 * 4.096 µs = 1.07 s without an acknowledgement before a retry; rxe
#: re-arms it on every completer pass that still has packets unacknowledged
#: (rxe_comp.c), so only a peer that has stopped answering lets it expire.
TIMEOUT = 18
#: Retries after a timeout before the work request completes with
#: IBV_WC_RETRY_EXC_ERR. Never 7: rxe takes retry_cnt 7 (like rnr_retry 7, the
#: InfiniBand "infinite" value) as retry for ever (rxe_comp.c, COMPST_ERROR_RETRY:
#: ``if (qp->comp.retry_cnt != 7) qp->comp.retry_cnt--``), which made a survivor wait
#: without end for a peer that was gone. 6 retries: the error about 7.5 s after the
#: last acknowledgement.
RETRY_CNT = 6
#: Receiver-not-ready retries: only sends meet them (these links post RDMA WRITE and
#: READ); 6 for the same reason as RETRY_CNT.
RNR_RETRY = 6


class CompletionError(RuntimeError):
    """A work request completed in error: ``status`` is its ``ibv_wc_status``."""

    def __init__(self, status: int, opcode: str) -> None:
        super().__init__(f"{opcode}: work completion status {status} ({_status_name(status)})")
        self.status = status


def _status_name(status: int) -> str:
    enums = import_pyverbs("enums")
    names = [n for n in dir(enums) if n.startswith("IBV_WC_") and getattr(enums, n) == status]
    return names[0] if len(names) == 1 else "unknown"


def pattern(n: int, seed: int) -> bytes:
    import numpy as np

    return (np.arange(n, dtype=np.uint32) * 7 + seed).astype(np.uint8).tobytes()


def fill(buf: Buffer, data: bytes) -> None:
    """Write ``data`` at the buffer's start by its address: every kind here is host memory,
    but a block of the expandable pool (over the test double's growable host area) has
    no buffer protocol (its pool calls it device memory)."""
    ctypes.memmove(buf.ptr, data, len(data))


def content(buf: Buffer) -> bytes:
    """The buffer's bytes, read by its address (see :func:`fill`)."""
    return ctypes.string_at(buf.ptr, buf.size)


def _huge_pages(count: int) -> Callable[[], None]:
    path = "/proc/sys/vm/nr_hugepages"
    with open(path) as f:
        before = int(f.read())
    with open(path, "w") as f:
        f.write(str(before + count))

    def give_back() -> None:
        with open(path, "w") as f:
            f.write(str(before))

    return give_back


def make(kind: str, pd: Any) -> tuple[Buffer, list[Piece], Callable[[], None]]:
    """A buffer of ``kind`` (its size in :data:`KINDS`), registered with ``pd``."""
    size = KINDS[kind]
    after: list[Callable[[], None]] = []
    if kind in ("pooled", "expandable"):
        if kind == "pooled":
            area: Any = HostArea()
            pool = aml_core.pool(area)
            # the block is not at its slab's start: its offset matters
            before = pool.mmap(64 * KiB)
        else:
            from tests.support.verbs_double import HostGrowable

            area = HostGrowable()
            pool = aml_core.pool(area, expandable=True, capacity=64 * MiB)
            # the next block crosses into the segment's second chunk
            before = pool.mmap(MiB + MiB // 2)
        # ``before`` stays referenced until close: a pooled block nothing references is freed,
        # and the block below would take its place (at the slab's or segment's start).
        reg = rdma.register_pool(pd, pool)
        buf = pool.mmap(size)
        key = reg.key(buf)
        pieces = [(p.addr, p.length, p.lkey, p.rkey) for p in key.pieces]
        assert key.offset > 0, f"{kind}: the block should not start its slab or segment: {key!r}"
        if kind == "expandable":
            assert len(pieces) == 2, f"the block should span two chunks: {key.pieces}"

        def close() -> None:
            key.release()
            pool.munmap(buf)
            pool.munmap(before)
            pool.close()  # deregisters every slab or chunk before giving it back
            assert reg.closed
            area.close()

        return buf, pieces, close
    if kind == "huge-page":
        after.append(_huge_pages(2))
    area = {
        "host": HostArea,
        "numa-bound": lambda: HostArea(Policy.BIND, [0]),
        "huge-page": lambda: HostArea(huge_pages=True),
        "ipc": lambda: HostArea(ipc=True),
    }[kind]()
    buf = area.mmap(size)
    one = rdma.register(pd, buf)

    def close_one() -> None:
        one.close()
        area.munmap(buf)
        area.close()
        for step in after:
            step()

    return buf, [(one.addr, size, one.lkey, one.rkey)], close_one


def segments(local: list[Piece], remote: list[Piece]) -> Iterator[tuple[tuple[int, int, int], int, int]]:
    """``((local addr, length, lkey), remote addr, rkey)`` for each overlap of the two
    buffers' pieces, walked side by side (both cover the same number of bytes)."""
    i = j = lo = ro = 0
    while i < len(local) and j < len(remote):
        n = min(local[i][1] - lo, remote[j][1] - ro)
        yield (local[i][0] + lo, n, local[i][2]), remote[j][0] + ro, remote[j][3]
        lo, ro = lo + n, ro + n
        if lo == local[i][1]:
            i, lo = i + 1, 0
        if ro == remote[j][1]:
            j, ro = j + 1, 0


class RcLink:
    """One RC queue pair and its completion queue on ``rxe0``, connected to another host's
    (:meth:`info` there, :meth:`connect` here): RDMA WRITE and READ of registered pieces,
    each waited for; an error completion raises with its status."""

    def __init__(self, ctx: Any, pd: Any, address: str, port: int = 1) -> None:
        e = self.e = import_pyverbs("enums")
        qps = import_pyverbs("qp")
        self.port, self.pd = port, pd
        self.gid = gid_index(ctx, address, port)
        self.my_gid = str(ctx.query_gid(port, self.gid))
        self.access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        self.cq = import_pyverbs("cq").CQ(ctx, 64)
        cap = qps.QPCap(max_send_wr=32, max_recv_wr=8, max_send_sge=4, max_recv_sge=4)
        init = qps.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap)
        attr = qps.QPAttr(port_num=port)
        attr.qp_access_flags = self.access
        self.qp = qps.QP(pd, init, attr)  # in INIT

    def info(self) -> dict[str, Any]:
        return {"qpn": self.qp.qp_num, "gid": self.my_gid}

    def connect(self, peer: dict[str, Any]) -> None:
        addr, qps = import_pyverbs("addr"), import_pyverbs("qp")
        e = self.e
        attr = qps.QPAttr(port_num=self.port)
        attr.qp_access_flags = self.access
        attr.path_mtu = e.IBV_MTU_1024
        attr.dest_qp_num = int(peer["qpn"])
        attr.rq_psn = attr.sq_psn = 0
        attr.max_dest_rd_atomic = attr.max_rd_atomic = 4
        attr.min_rnr_timer = 12
        attr.timeout, attr.retry_cnt, attr.rnr_retry = TIMEOUT, RETRY_CNT, RNR_RETRY
        gr = addr.GlobalRoute(dgid=addr.GID(peer["gid"]), sgid_index=self.gid)
        attr.ah_attr = addr.AHAttr(port_num=self.port, is_global=1, gr=gr, dlid=0)
        self.qp.to_rts(attr)

    def _post(self, opcode: int, local: list[Piece], remote: list[Piece], timeout: float) -> int:
        wr_module = import_pyverbs("wr")
        posted = 0
        for (laddr, n, lkey), raddr, rkey in segments(local, remote):
            wr = wr_module.SendWR(
                opcode=opcode,
                num_sge=1,
                sg=[wr_module.SGE(laddr, n, lkey)],
                send_flags=self.e.IBV_SEND_SIGNALED,
            )
            wr.set_wr_rdma(rkey, raddr)
            self.qp.post_send(wr)
            self._wait(timeout, "RDMA WRITE" if opcode == self.e.IBV_WR_RDMA_WRITE else "RDMA READ")
            posted += 1
        return posted

    def _wait(self, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            n, wcs = self.cq.poll()
            if n:
                if wcs[0].status != self.e.IBV_WC_SUCCESS:
                    raise CompletionError(wcs[0].status, what)
                return
            time.sleep(0.0005)
        raise TimeoutError(f"no completion in {timeout} s")

    def write(self, local: list[Piece], remote: list[Piece], timeout: float = 120) -> int:
        """RDMA WRITE of the local pieces into the remote ones: the work requests posted."""
        return self._post(self.e.IBV_WR_RDMA_WRITE, local, remote, timeout)

    def read(self, local: list[Piece], remote: list[Piece], timeout: float = 120) -> int:
        """RDMA READ of the remote pieces into the local ones."""
        return self._post(self.e.IBV_WR_RDMA_READ, local, remote, timeout)

    def close(self) -> None:
        self.qp.close()
        self.cq.close()


def open_device() -> tuple[Any, Any]:
    ctx = import_pyverbs("device").Context(name=DEVICE)
    return ctx, import_pyverbs("pd").PD(ctx)


# -- the peer, on host b ------------------------------------------------------------------


def _reply(stream: Any, message: dict[str, Any]) -> None:
    stream.write((json.dumps(message) + "\n").encode())
    stream.flush()


def serve(address: str, port: int = PEER_PORT) -> None:
    """One connection from host a; for each ``open`` (a kind and a's queue pair) it makes
    and registers that kind's buffer, fills it with ``pattern(size, 11)`` and answers its
    queue pair and pieces; ``check`` answers whether the buffer holds ``pattern(size,
    seed)``; ``close`` deregisters and frees it and answers the device's region count;
    ``exit`` (or a's hanging up) ends it."""
    ctx, pd = open_device()
    with socket.create_server((address, port)) as server:
        print(f"rdma peer listens on {address}:{port}", flush=True)
        conn, _ = server.accept()
    stream = conn.makefile("rwb")
    held: dict[str, Any] = {}
    try:
        for raw in stream:
            request = json.loads(raw)
            op = request["op"]
            if op == "open":
                kind = request["kind"]
                before = mr_count(DEVICE)
                buf, pieces, close = make(kind, pd)
                fill(buf, pattern(buf.size, 11))
                link = RcLink(ctx, pd, os.environ["AML_TWO_HOSTS_SELF"])
                link.connect(request["qp"])
                held = {"buf": buf, "close": close, "link": link}
                _reply(
                    stream,
                    {"qp": link.info(), "pieces": pieces, "size": buf.size, "mr": [before, mr_count(DEVICE)]},
                )
            elif op == "check":
                got = content(held["buf"])
                _reply(stream, {"ok": got == pattern(len(got), int(request["seed"]))})
            elif op == "close":
                held.pop("link").close()
                held.pop("close")()
                held.clear()
                _reply(stream, {"mr": mr_count(DEVICE)})
            elif op == "exit":
                _reply(stream, {"ok": True})
                break
    finally:
        with contextlib.suppress(Exception):
            conn.close()
        pd.close()
        ctx.close()
    print("rdma peer: done", flush=True)


class PeerClient:
    """Host a's end of the peer's connection (one JSON line each way)."""

    def __init__(self, address: str, port: int = PEER_PORT, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.create_connection((address, port), timeout=10)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        self.sock.settimeout(timeout)
        self.stream = self.sock.makefile("rwb")

    def ask(self, **request: Any) -> dict[str, Any]:
        _reply(self.stream, request)
        line = self.stream.readline()
        if not line:
            raise ConnectionError(f"the rdma peer hung up on {request.get('op')}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.stream.close()  # the socket's descriptor closes with its last file
            self.sock.close()


if __name__ == "__main__":
    serve(os.environ["AML_TWO_HOSTS_SELF"])
    sys.exit(0)
