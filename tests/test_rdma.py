"""RDMA registration of aml memory (aml_core.rdma) on a protection domain double: what is
registered, once, with which keys and offsets; when it is deregistered (before the memory
goes, never after); and every bad input refused with the documented error and nothing
left registered, held or open. Real registrations with a soft-RoCE device:
tests/rdma/ (in the lab's guest)."""

from __future__ import annotations

import errno
import os
import sys

import pytest

import aml_core
from aml_core import rdma
from aml_core.errors import (
    AMLBusyError,
    AMLMemoryError,
    AMLNotSupported,
    AMLPermissionError,
    AMLTypeError,
    AMLValueError,
)
from aml_core.host import HostArea
from tests.support.verbs_double import FakeDomain, HostGrowable, mapped

KiB, MiB = 1 << 10, 1 << 20


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def pd() -> FakeDomain:
    return FakeDomain("fake0")


@pytest.fixture
def area():  # type: ignore[no-untyped-def]
    with HostArea() as a:
        yield a


# -- one buffer ------------------------------------------------------------------------------
def test_a_buffer_registered_holds_it_until_closed(pd: FakeDomain, area: HostArea) -> None:
    buf = area.mmap(64 * KiB)
    before = fds()
    reg = rdma.register(pd, buf)
    assert (reg.addr, reg.length, reg.offset) == (buf.ptr, buf.size, 0)
    assert pd.live == 1
    assert (pd.regions[0].ptr, pd.regions[0].length) == (buf.ptr, buf.size)
    assert reg.lkey == pd.regions[0].lkey
    assert reg.rkey == pd.regions[0].rkey
    assert reg.access == rdma.DEFAULT_ACCESS
    with pytest.raises(AMLBusyError):
        area.munmap(buf)  # never a registration over freed memory
    reg.close()
    assert pd.live == 0
    assert reg.closed
    with pytest.raises(AMLValueError, match="already deregistered"):
        reg.close()  # deregistering twice
    area.munmap(buf)
    assert fds() == before


def test_a_sub_range(pd: FakeDomain, area: HostArea) -> None:
    buf = area.mmap(64 * KiB)
    with rdma.register(pd, buf, offset=4096, length=8192) as reg:
        assert (reg.addr, reg.length) == (buf.ptr + 4096, 8192)
        assert (pd.regions[0].ptr, pd.regions[0].length) == (buf.ptr + 4096, 8192)
    assert pd.live == 0


def test_bad_buffers_are_refused_before_any_call(pd: FakeDomain, area: HostArea) -> None:
    buf = area.mmap(4096)
    area.munmap(buf)
    with pytest.raises(AMLValueError, match="freed"):
        rdma.register(pd, buf)  # a freed buffer
    other = HostArea()
    gone = other.mmap(4096)
    other.close()
    with pytest.raises(AMLValueError, match="freed"):
        rdma.register(pd, gone)  # a buffer of a closed area
    live = area.mmap(4096)
    with pytest.raises(AMLValueError, match="zero-length"):
        rdma.register(pd, live, length=0)
    with pytest.raises(AMLValueError, match="not inside"):
        rdma.register(pd, live, offset=4000, length=200)
    with pytest.raises(AMLTypeError):
        rdma.register(pd, bytearray(16))  # type: ignore[arg-type]
    with pytest.raises(AMLValueError, match="LOCAL_WRITE"):
        rdma.register(pd, live, rdma.Access.REMOTE_WRITE)
    with pytest.raises(AMLValueError, match="bits"):
        rdma.register(pd, live, 1 << 20)
    assert pd.calls == {}
    assert pd.live == 0
    assert live.exports == 0
    area.munmap(live)


def test_not_a_protection_domain(area: HostArea, monkeypatch: pytest.MonkeyPatch) -> None:
    buf = area.mmap(4096)
    monkeypatch.setitem(sys.modules, "pyverbs.pd", None)  # pyverbs not installed
    with pytest.raises(AMLNotSupported, match="pyverbs"):
        rdma.register(object(), buf)
    assert buf.exports == 0


@pytest.mark.parametrize(
    ("error", "cls"),
    [
        (errno.ENOMEM, AMLMemoryError),
        (errno.EFAULT, AMLValueError),
        (errno.EACCES, AMLPermissionError),
        (errno.EOPNOTSUPP, AMLNotSupported),
    ],
)
def test_a_failed_registration_is_translated_and_holds_nothing(
    pd: FakeDomain, area: HostArea, error: int, cls: type[Exception]
) -> None:
    buf = area.mmap(4096)
    pd.inject("ibv_reg_mr", error)
    with pytest.raises(cls) as info:
        rdma.register(pd, buf)
    native = info.value.native  # type: ignore[attr-defined]
    assert (native.backend, native.function, native.code) == ("verbs", "ibv_reg_mr", error)
    assert pd.live == 0
    assert buf.exports == 0
    area.munmap(buf)


def test_a_failed_deregistration_keeps_the_registration(pd: FakeDomain, area: HostArea) -> None:
    buf = area.mmap(4096)
    reg = rdma.register(pd, buf)
    pd.inject("ibv_dereg_mr", errno.EBUSY)
    with pytest.raises(AMLBusyError):
        reg.close()
    assert not reg.closed
    assert pd.live == 1
    with pytest.raises(AMLBusyError):
        area.munmap(buf)  # still registered: still held
    reg.close()
    area.munmap(buf)


def test_the_area_closing_under_a_registration(pd: FakeDomain) -> None:
    area = HostArea()
    buf = area.mmap(64 * KiB)
    ptr, size = buf.ptr, buf.size
    reg = rdma.register(pd, buf)
    area.close()  # the registered buffer stays mapped until the registration goes
    assert mapped(ptr, size, True)
    reg.close()
    assert pd.live == 0
    del buf, reg  # the detached buffer is freed with its last reference
    assert not mapped(ptr, size, False)


def test_a_closed_protection_domain(pd: FakeDomain, area: HostArea) -> None:
    buf = area.mmap(4096)
    pd.closed = True
    with pytest.raises(AMLValueError):
        rdma.register(pd, buf)
    assert buf.exports == 0
    area.munmap(buf)


# -- a pool ----------------------------------------------------------------------------------
def test_each_slab_is_registered_once_and_every_block_gets_its_offset(pd: FakeDomain, area: HostArea) -> None:
    pool = aml_core.pool(area)
    reg = rdma.register_pool(pd, pool)
    blocks = [pool.mmap(64 * KiB) for _ in range(4)]
    keys = [reg.key(b) for b in blocks]
    assert pd.live == 1
    assert reg.registered == 1
    slab, _ = pool.slab_of(blocks[0])
    assert slab is not None
    assert reg.regions == ((slab.ptr, slab.size),)
    for block, key in zip(blocks, keys, strict=True):
        assert key.offset == pool.slab_of(block)[1]
        assert key.addr == block.ptr == slab.ptr + key.offset
        assert (key.lkey, key.rkey) == (pd.regions[0].lkey, pd.regions[0].rkey)
        assert key.pieces == (rdma.KeyPiece(block.ptr, block.size, block.ptr, key.lkey, key.rkey),)
    big = pool.mmap(4 * MiB)  # a large block: another slab
    with reg.key(big) as key:
        assert pd.live == 2
        assert key.offset == pool.slab_of(big)[1]
    for key in keys:
        key.release()
    assert reg.keys_held == 0
    pool.close()
    assert pd.live == 0
    assert reg.closed


def test_a_trim_deregisters_first_and_a_held_key_stops_it(pd: FakeDomain, area: HostArea) -> None:
    pool = aml_core.pool(area)
    reg = rdma.register_pool(pd, pool)
    block = pool.mmap(4 * MiB)
    slab, _ = pool.slab_of(block)
    assert slab is not None
    ptr, size = slab.ptr, slab.size
    key = reg.key(block)
    with pytest.raises(AMLBusyError):
        pool.munmap(block)  # the key is in use: the block stays, so does its slab
    assert pool.trim() == 0
    assert pd.live == 1
    key.release()
    pool.munmap(block)
    assert pool.trim() == size
    assert pd.deregistered == [(ptr, size, True)]  # deregistered while the slab was still mapped
    assert pd.live == 0
    assert reg.regions == ()
    assert reg.deregistered == 1
    assert not mapped(ptr, size, False)
    block = pool.mmap(4 * MiB)  # a new slab: registered again when asked
    with reg.key(block):
        assert pd.live == 1
    reg.close()
    assert pd.live == 0
    pool.close()


def test_a_failed_deregistration_keeps_the_slab(pd: FakeDomain, area: HostArea) -> None:
    pool = aml_core.pool(area)
    reg = rdma.register_pool(pd, pool)
    block = pool.mmap(4 * MiB)
    reg.key(block).release()
    pool.munmap(block)
    reserved = pool.pool_stats.bytes_reserved
    pd.inject("ibv_dereg_mr", errno.EBUSY)
    with pytest.raises(AMLBusyError):
        pool.trim()
    assert pool.pool_stats.bytes_reserved == reserved
    assert pd.live == 1
    assert len(reg.regions) == 1
    assert pool.trim() == reserved
    assert pd.live == 0
    pool.close()


def test_the_release_threshold_deregisters(pd: FakeDomain, area: HostArea) -> None:
    pool = aml_core.pool(area, release_threshold=0)
    reg = rdma.register_pool(pd, pool)
    block = pool.mmap(4 * MiB)
    reg.key(block).release()
    assert pd.live == 1
    pool.munmap(block)  # the slab goes back at once: deregistered first
    assert pd.live == 0
    assert reg.deregistered == 1
    pool.close()


def test_closing_the_area_deregisters_the_pool(pd: FakeDomain) -> None:
    area = HostArea()
    pool = aml_core.pool(area)
    reg = rdma.register_pool(pd, pool)
    a, b = pool.mmap(4096), pool.mmap(4 * MiB)
    reg.key(a).release()
    key = reg.key(b)  # held through the close: the MR goes, the memory stays until released
    area.close()
    assert pd.live == 0
    assert reg.closed
    with pytest.raises(AMLValueError, match="closed"):
        reg.close()
    key.release()


def test_pool_registration_refusals(pd: FakeDomain, area: HostArea) -> None:
    pool = aml_core.pool(area)
    reg = rdma.register_pool(pd, pool)
    block = pool.mmap(4096)
    plain = area.mmap(4096)
    with pytest.raises(AMLValueError, match="not a block of"):
        reg.key(plain)
    with pytest.raises(AMLTypeError):
        rdma.register_pool(pd, area)  # type: ignore[arg-type]
    key = reg.key(block)
    with pytest.raises(AMLBusyError, match="held"):
        reg.close()
    key.release()
    key.release()  # a second release does nothing
    pool.munmap(block)
    with pytest.raises(AMLValueError, match="freed"):
        reg.key(block)
    reg.close()
    with pytest.raises(AMLValueError, match="already closed"):
        reg.close()
    with pytest.raises(AMLValueError, match="closed"):
        reg.key(pool.mmap(4096))
    assert pd.live == 0
    area.munmap(plain)
    pool.close()
    closed = aml_core.pool(HostArea())
    closed.close()
    with pytest.raises(AMLValueError):
        rdma.register_pool(pd, closed)


def test_a_protection_domain_of_another_device(pd: FakeDomain, area: HostArea) -> None:
    other = FakeDomain("fake1")
    pool = aml_core.pool(area)
    block = pool.mmap(4096)
    with pytest.raises(AMLValueError, match="not registered"):
        rdma.key(pd, block)
    reg = rdma.register_pool(pd, pool)
    with rdma.key(pd, block) as key:
        assert key.addr == block.ptr
    with pytest.raises(AMLValueError, match=r"fake0.*not with this one of fake1"):
        rdma.key(other, block)
    with pytest.raises(AMLValueError, match="another device"):
        reg.key_for(block, other)
    with reg.key_for(block, pd):
        pass
    assert other.calls == {}
    assert reg.keys_held == 0
    plain = area.mmap(4096)
    with pytest.raises(AMLValueError, match="not a pooled block"):
        rdma.key(pd, plain)
    area.munmap(plain)
    pool.close()


# -- an expandable pool --------------------------------------------------------------------
def test_a_block_over_two_chunks_has_each_chunks_keys(pd: FakeDomain) -> None:
    vm = HostGrowable()
    pool = aml_core.pool(vm, expandable=True, capacity=64 * MiB)
    reg = rdma.register_pool(pd, pool)
    first = pool.mmap(MiB + MiB // 2)  # the first 2 MiB chunk
    second = pool.mmap(MiB + MiB // 2)  # its last 0.5 MiB and a second chunk
    chunks = pool._kernel.chunks()
    assert len(chunks) == 2
    with reg.key(first) as k1:
        assert len(k1.pieces) == 1
        assert k1.offset == 0
        assert k1.addr == first.ptr
    key = reg.key(second)
    assert pd.live == 2
    assert reg.regions == tuple(chunks)
    assert len(key.pieces) == 2
    p1, p2 = key.pieces
    assert (p1.ptr, p1.length) == (second.ptr, chunks[0][0] + chunks[0][1] - second.ptr)
    assert (p2.ptr, p2.length) == (chunks[1][0], second.size - p1.length)
    by_ptr = {r.ptr: r for r in pd.regions}
    assert (p1.lkey, p1.rkey) == (by_ptr[chunks[0][0]].lkey, by_ptr[chunks[0][0]].rkey)
    assert (p2.lkey, p2.rkey) == (by_ptr[chunks[1][0]].lkey, by_ptr[chunks[1][0]].rkey)
    assert p1.lkey != p2.lkey
    assert key.offset == second.ptr - chunks[0][0]
    with pytest.raises(AMLValueError, match="spans 2 chunks"):
        _ = key.lkey  # never only the first chunk's, silently
    with pytest.raises(AMLValueError, match="spans 2 chunks"):
        _ = key.addr
    key.release()
    pool.munmap(second)
    pool.trim()  # the second chunk is unmapped: deregistered first
    assert pd.live == 1
    assert reg.regions == (chunks[0],)
    assert vm.committed == [chunks[0]]
    pool.close()
    assert pd.live == 0
    assert vm.committed == []


# -- the binding ---------------------------------------------------------------------------
def test_pyverbs_protection_domains_are_wrapped_and_named() -> None:
    from tests.support.rxe import import_pyverbs

    try:
        import_pyverbs("pd")
    except ImportError:
        pytest.skip("pyverbs is not installed (python3-pyverbs)")
    with pytest.raises(AMLTypeError, match="pyverbs PD"):
        rdma.as_domain(object())

    class Context:
        name = "rxe7"

    named = rdma.PyverbsDomain(object(), Context())
    assert named.device == "rxe7"
    assert rdma.PyverbsDomain(object()).device == "an unnamed pyverbs device"
    fake = FakeDomain()
    assert rdma.domain(fake, Context()) is fake  # already a Domain: as it is


def test_verbs_errors_without_an_errno_are_value_errors() -> None:
    from aml_core.rdma._domain import verbs_call

    def refuses() -> None:
        raise RuntimeError("the PD was closed")

    with pytest.raises(AMLValueError, match="closed"):
        verbs_call("ibv_reg_mr", "registering", refuses)
    assert rdma.VERBS_ERRORS.translate(errno.EIO) == aml_core.ErrorCode.FAILURE
