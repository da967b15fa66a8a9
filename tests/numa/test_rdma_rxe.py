"""RDMA registration of aml memory with a real verbs device: soft-RoCE (rdma_rxe) in the
lab's guest (Linux 6.1 under QEMU, emulated: no NIC). Host, pooled, NUMA-bound,
huge-page and ``ipc=True`` buffers are registered (aml_core.rdma) and moved by RDMA WRITE
and READ between two queue pairs of one rxe device, bytes checked both ways; the
kernel's own count of memory regions (``rdma resource show mr``) shows each slab or
chunk registered once and every registration gone after; bad input leaves nothing.

Runs in the two-node topology only (one boot in CI's lab pass)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import aml_core
from aml_core import rdma
from aml_core.buffer import Buffer
from aml_core.errors import AMLBusyError, AMLValueError
from aml_core.host import HostArea, Policy
from tests.numa.support import all_on, hugetlb_pages
from tests.support.rxe import Loopback, RxeDevice, import_pyverbs, mr_count, rxe_device
from tests.support.verbs_double import HostGrowable

pytestmark = pytest.mark.numa_lab("two-node")

KiB, MiB = 1 << 10, 1 << 20


class Rxe:
    def __init__(self, device: RxeDevice) -> None:
        self.device = device
        self.ctx = import_pyverbs("device").Context(name=device.name)
        self.pd = import_pyverbs("pd").PD(self.ctx)
        self.loop = Loopback(self.ctx, self.pd, device.address)

    def close(self) -> None:
        self.loop.close()
        self.pd.close()
        self.ctx.close()


@pytest.fixture(scope="module")
def rxe() -> Iterator[Rxe]:
    with rxe_device(0) as device:
        r = Rxe(device)
        try:
            yield r
        finally:
            r.close()


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def pattern(n: int, seed: int) -> bytes:
    """``n`` bytes, byte ``i`` = (7 i + seed) mod 256 (it repeats every 256: built fast
    under TCG)."""
    return (bytes((i * 7 + seed) & 0xFF for i in range(256)) * (n // 256 + 1))[:n]


def both_ways(rxe: Rxe, src: Buffer, s: Any, dst: Buffer, d: Any) -> None:
    """WRITE ``src`` into ``dst`` (its rkey), then READ a new pattern of ``dst`` back into
    ``src``; ``s``/``d``: objects with lkey, rkey and addr (a Registration or a BlockKey)."""
    n = min(src.size, dst.size)
    memoryview(src)[:n] = pattern(n, 1)
    memoryview(dst)[:n] = bytes(n)
    rxe.loop.write([(s.addr, n, s.lkey)], d.addr, d.rkey)
    assert bytes(memoryview(dst)[:n]) == pattern(n, 1)
    memoryview(dst)[:n] = pattern(n, 2)
    rxe.loop.read([(s.addr, n, s.lkey)], d.addr, d.rkey)
    assert bytes(memoryview(src)[:n]) == pattern(n, 2)


AREAS: dict[str, Callable[[], HostArea]] = {
    "host": HostArea,
    "numa-bound": lambda: HostArea(Policy.BIND, [1]),
    "ipc": lambda: HostArea(ipc=True),
    "huge-page": lambda: HostArea(huge_pages=True),
}


@pytest.mark.parametrize("kind", [*AREAS, "pooled"])
def test_write_and_read_aml_buffers(rxe: Rxe, kind: str) -> None:
    before, open_fds = mr_count(rxe.device.name), fds()
    with hugetlb_pages({0: 4}) if kind == "huge-page" else _nothing():
        area = aml_core.pool(HostArea()) if kind == "pooled" else AREAS[kind]()
        size = 2 * MiB
        src, dst = area.mmap(size), area.mmap(size)
        regs = [rdma.register(rxe.pd, src), rdma.register(rxe.pd, dst)]
        assert mr_count(rxe.device.name) == before + 2
        assert regs[0].addr == src.ptr
        both_ways(rxe, src, regs[0], dst, regs[1])
        if kind == "numa-bound":
            all_on(src, 1)
            all_on(dst, 1)
        with pytest.raises(AMLBusyError):
            area.munmap(src)  # registered: never freed under the region
        for reg in regs:
            reg.close()
        with pytest.raises(AMLValueError, match="already deregistered"):
            regs[0].close()
        area.munmap(src)
        area.munmap(dst)
        area.close()
    del regs
    assert mr_count(rxe.device.name) == before
    assert fds() == open_fds


def _nothing() -> Any:
    import contextlib

    return contextlib.nullcontext()


def test_a_pool_registers_each_slab_once(rxe: Rxe) -> None:
    before, open_fds = mr_count(rxe.device.name), fds()
    with HostArea(Policy.BIND, [1]) as area:
        pool = aml_core.pool(area)
        reg = rdma.register_pool(rxe.pd, pool)
        a, b = pool.mmap(64 * KiB), pool.mmap(64 * KiB)  # one 2 MiB slab
        ka, kb = reg.key(a), reg.key(b)
        assert mr_count(rxe.device.name) == before + 1
        assert kb.offset == pool.slab_of(b)[1] > 0
        assert (ka.lkey, ka.rkey) == (kb.lkey, kb.rkey)
        both_ways(rxe, a, ka, b, kb)
        big = pool.mmap(4 * MiB)  # another slab: another region
        with reg.key(big) as kbig:
            both_ways(rxe, big, kbig, a, ka)
            assert mr_count(rxe.device.name) == before + 2
        pool.munmap(big)
        ka.release()
        with pytest.raises(AMLBusyError):
            pool.munmap(b)  # kb is held: its slab cannot go
        pool.munmap(a)
        assert pool.trim() > 0  # the big slab: deregistered, then unmapped
        assert mr_count(rxe.device.name) == before + 1
        kb.release()
        pool.munmap(b)
        pool.trim()
        assert mr_count(rxe.device.name) == before
        pool.close()
        assert reg.closed
    assert fds() == open_fds


def test_a_block_over_two_chunks_of_an_expandable_pool(rxe: Rxe) -> None:
    before = mr_count(rxe.device.name)
    vm = HostGrowable()
    pool = aml_core.pool(vm, expandable=True, capacity=64 * MiB)
    reg = rdma.register_pool(rxe.pd, pool)
    first = pool.mmap(MiB + MiB // 2)
    span = pool.mmap(MiB + MiB // 2)  # the first chunk's end and a second chunk
    key = reg.key(span)
    assert len(key.pieces) == 2
    assert mr_count(rxe.device.name) == before + 2
    plain_area = HostArea()
    plain = plain_area.mmap(span.size)
    with rdma.register(rxe.pd, plain) as preg:
        n = span.size
        want = pattern(n, 3)
        for piece in key.pieces:  # write the block's bytes in by host copies
            start = piece.ptr - span.ptr
            vm.copy(piece.ptr, _addr(want, start), piece.length)
        # WRITE: the block's two pieces as two scatter-gather entries, each under its chunk's lkey
        rxe.loop.write([(p.addr, p.length, p.lkey) for p in key.pieces], preg.addr, preg.rkey)
        assert bytes(memoryview(plain)) == want
        # READ: each piece of the block from its own chunk's rkey
        memoryview(plain)[:] = bytes(n)
        at = 0
        for p in key.pieces:
            rxe.loop.read([(preg.addr + at, p.length, preg.lkey)], p.addr, p.rkey)
            at += p.length
        assert bytes(memoryview(plain)) == want
    key.release()
    plain_area.close()
    pool.munmap(span)
    pool.munmap(first)
    pool.close()
    assert mr_count(rxe.device.name) == before


def _addr(data: bytes, offset: int) -> int:
    import ctypes

    buf = ctypes.create_string_buffer(data, len(data))
    _keep.append(buf)
    return ctypes.addressof(buf) + offset


_keep: list[Any] = []


def test_bad_input_leaves_nothing(rxe: Rxe) -> None:
    before, open_fds = mr_count(rxe.device.name), fds()
    area = HostArea()
    freed = area.mmap(4096)
    area.munmap(freed)
    with pytest.raises(AMLValueError, match="freed"):
        rdma.register(rxe.pd, freed)
    live = area.mmap(4096)
    with pytest.raises(AMLValueError, match="zero-length"):
        rdma.register(rxe.pd, live, length=0)
    closed = HostArea()
    gone = closed.mmap(4096)
    closed.close()
    with pytest.raises(AMLValueError, match="freed"):
        rdma.register(rxe.pd, gone)
    reg = rdma.register(rxe.pd, live)
    reg.close()
    with pytest.raises(AMLValueError, match="already deregistered"):
        reg.close()
    pool = aml_core.pool(area)
    preg = rdma.register_pool(rdma.domain(rxe.pd, rxe.ctx), pool)
    block = pool.mmap(4096)
    preg.key(block).release()
    with rxe_device(1) as other:  # a protection domain of another device
        octx = import_pyverbs("device").Context(name=other.name)
        opd = import_pyverbs("pd").PD(octx)
        try:
            with pytest.raises(AMLValueError, match=f"{rxe.device.name}.*{other.name}"):
                rdma.key(rdma.domain(opd, octx), block)
            with pytest.raises(AMLValueError, match="not with this one of an unnamed"):
                rdma.key(opd, block)  # a PD alone: refused all the same, by identity
            with pytest.raises(AMLValueError, match="another device"):
                preg.key_for(block, rdma.domain(opd, octx))
            assert mr_count(other.name) == 0
        finally:
            opd.close()
            octx.close()
    pool.munmap(block)
    pool.close()
    area.munmap(live)
    area.close()
    assert mr_count(rxe.device.name) == before
    assert fds() == open_fds
