"""Soft-RoCE (rdma_rxe) for tests that run as root in the lab's guest (Linux 6.1 under
QEMU): bring up an rxe device over a dummy network device, count its memory regions
through the kernel (``rdma -j resource show mr``), and connect two RC queue pairs of
one device to each other for RDMA write and read, through pyverbs.

Nothing here leaves the guest: a dummy device has no wire; rxe loops traffic to its own
address back inside the kernel (rxe_net.c, ``rxe_loopback``)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Loopback", "RxeDevice", "import_pyverbs", "mr_count", "rxe_device"]

#: Where Debian's python3-pyverbs lives (built for the system Python 3.11).
DEBIAN_PYVERBS = Path("/usr/lib/python3/dist-packages/pyverbs")


def import_pyverbs(module: str = "") -> Any:
    """``pyverbs`` (or its submodule ``module``), from the environment or else Debian's
    python3-pyverbs: a directory holding only a link to it goes on the path, so that no
    other system package becomes importable."""
    try:
        importlib.import_module("pyverbs")
    except ImportError:
        if not DEBIAN_PYVERBS.is_dir():
            raise
        only = Path(tempfile.mkdtemp(prefix="aml-pyverbs-"))
        (only / "pyverbs").symlink_to(DEBIAN_PYVERBS)
        sys.path.append(str(only))
    return importlib.import_module(f"pyverbs.{module}" if module else "pyverbs")


def _run(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


@dataclass(frozen=True)
class RxeDevice:
    name: str  # rxe0
    netdev: str  # the dummy device under it
    address: str  # its IPv4 address (the GID rxe derives from it is RoCE v2)


@contextmanager
def rxe_device(index: int = 0) -> Iterator[RxeDevice]:
    """``rxe<index>`` over a new dummy device ``amlrxe<index>`` at 10.77.<index>.1/24,
    removed after (the guest's own state; needs root and rdma_rxe)."""
    name, netdev, address = f"rxe{index}", f"amlrxe{index}", f"10.77.{index}.1"
    _run("modprobe", "rdma_rxe")
    _run("modprobe", "dummy")
    _run("ip", "link", "add", netdev, "type", "dummy")
    try:
        _run("ip", "addr", "add", f"{address}/24", "dev", netdev)
        _run("ip", "link", "set", netdev, "up")
        _run("rdma", "link", "add", name, "type", "rxe", "netdev", netdev)
        try:
            yield RxeDevice(name, netdev, address)
        finally:
            _run("rdma", "link", "delete", name)
    finally:
        _run("ip", "link", "delete", netdev)


def mr_count(device: str) -> int:
    """The memory regions the kernel holds on ``device`` (every process's)."""
    rows = json.loads(_run("rdma", "-j", "resource", "show", "mr") or "[]")
    return sum(1 for row in rows if row.get("ifname") == device)


def gid_index(ctx: Any, address: str, port: int = 1) -> int:
    """The GID table index of the RoCE v2 GID rxe made of ``address`` (IPv4-mapped)."""
    want = "ffff:" + "".join(f"{int(part):02x}" for part in address.split(".")[:2]) + ":"
    want += "".join(f"{int(part):02x}" for part in address.split(".")[2:])
    length = ctx.query_port(port).gid_tbl_len
    for i in range(length):
        try:
            gid = str(ctx.query_gid(port, i))
        except Exception:
            continue
        if gid.endswith(want):
            return i
    raise RuntimeError(f"no GID of {address} on {ctx.name}")


class Loopback:
    """Two RC queue pairs of one protection domain connected to each other, with a
    completion queue each: ``write``/``read`` post one signaled RDMA WRITE or READ on
    ``a`` and wait for its completion (an error completion raises, with its status)."""

    def __init__(self, ctx: Any, pd: Any, address: str, port: int = 1) -> None:
        e = import_pyverbs("enums")
        addr, qps = import_pyverbs("addr"), import_pyverbs("qp")
        AHAttr, GlobalRoute = addr.AHAttr, addr.GlobalRoute
        QP, QPAttr, QPCap, QPInitAttr = qps.QP, qps.QPAttr, qps.QPCap, qps.QPInitAttr
        CQ = import_pyverbs("cq").CQ

        self.e = e
        self.ctx, self.pd = ctx, pd
        gid = gid_index(ctx, address, port)
        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        self.cqs = [CQ(ctx, 16), CQ(ctx, 16)]
        self.qps = []
        for cq in self.cqs:
            cap = QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=4, max_recv_sge=4)
            init = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap)
            attr = QPAttr(port_num=port)
            attr.qp_access_flags = access
            self.qps.append(QP(pd, init, attr))  # in INIT
        my_gid = ctx.query_gid(port, gid)
        for qp, peer in ((self.qps[0], self.qps[1]), (self.qps[1], self.qps[0])):
            attr = QPAttr(port_num=port)
            attr.qp_access_flags = access
            attr.path_mtu = e.IBV_MTU_1024
            attr.dest_qp_num = peer.qp_num
            attr.rq_psn = attr.sq_psn = 0
            attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
            attr.min_rnr_timer = 12
            attr.timeout = 14
            attr.retry_cnt = attr.rnr_retry = 7
            attr.ah_attr = AHAttr(
                port_num=port, is_global=1, gr=GlobalRoute(dgid=my_gid, sgid_index=gid), dlid=0
            )
            qp.to_rts(attr)

    def _post(self, opcode: int, sges: list[tuple[int, int, int]], remote_addr: int, rkey: int) -> None:
        wr_module = import_pyverbs("wr")
        SGE, SendWR = wr_module.SGE, wr_module.SendWR
        e = self.e
        sg = [SGE(addr, length, lkey) for addr, length, lkey in sges]
        wr = SendWR(opcode=opcode, num_sge=len(sg), sg=sg, send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(rkey, remote_addr)
        self.qps[0].post_send(wr)
        self._wait(self.cqs[0])

    def _wait(self, cq: Any, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            n, wcs = cq.poll()
            if n:
                wc = wcs[0]
                if wc.status != self.e.IBV_WC_SUCCESS:
                    raise RuntimeError(f"work completion status {wc.status}")
                return
            time.sleep(0.001)
        raise TimeoutError("no completion in time")

    def write(self, sges: list[tuple[int, int, int]], remote_addr: int, rkey: int) -> None:
        """RDMA WRITE of the local ``(addr, length, lkey)`` pieces to ``remote_addr``."""
        self._post(self.e.IBV_WR_RDMA_WRITE, sges, remote_addr, rkey)

    def read(self, sges: list[tuple[int, int, int]], remote_addr: int, rkey: int) -> None:
        """RDMA READ from ``remote_addr`` into the local pieces."""
        self._post(self.e.IBV_WR_RDMA_READ, sges, remote_addr, rkey)

    def close(self) -> None:
        for obj in (*self.qps, *self.cqs):
            obj.close()
