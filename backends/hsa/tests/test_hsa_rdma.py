"""RDMA registration of HSA device memory (aml_core.rdma) through its dma-buf
(``ibv_reg_dmabuf_mr``), on the HSA driver double and a verbs protection domain double:
the code path a GPU and an RDMA NIC together would take. Not run on hardware (no GPU and
RDMA device together here)."""

from __future__ import annotations

import os

import pytest
from hsa_helpers import HsaDouble, aml_hsa, open_fds

import aml_core
from aml_core import rdma
from aml_core.errors import AMLBusyError, AMLError, AMLNotSupported
from tests.support.verbs_double import FakeDomain

MiB = 1 << 20


def test_a_device_buffer_registers_as_its_dma_buf(hsa: HsaDouble) -> None:
    pd = FakeDomain()
    with aml_hsa.create(0) as area:
        buf = area.mmap(3 * 4096)
        before = open_fds()
        reg = rdma.register(pd, buf)
        assert pd.calls == {"ibv_reg_dmabuf_mr": 1}
        region = pd.regions[0]
        assert (region.offset, region.length) == (0, buf.size)  # the allocation's dma-buf, from 0
        assert reg.addr == region.iova == 0  # pyverbs' iova for a dma-buf: its offset
        assert open_fds() == before  # the fd was closed once registered
        assert hsa.calls("hsa_amd_portable_export_dmabuf") == 1
        with pytest.raises(AMLBusyError):
            area.munmap(buf)
        reg.close()
        assert pd.live == 0
        area.munmap(buf)


def test_a_sub_range_is_at_its_offset_in_the_dma_buf(hsa: HsaDouble) -> None:
    pd = FakeDomain()
    with aml_hsa.create(0) as area:
        buf = area.mmap(4 * 4096)
        with rdma.register(pd, buf, offset=4096, length=8192) as reg:
            assert (pd.regions[0].offset, pd.regions[0].length) == (4096, 8192)
            assert reg.addr == 4096
        area.munmap(buf)


def test_a_pool_registers_each_slab_s_dma_buf_once(hsa: HsaDouble) -> None:
    pd = FakeDomain()
    with aml_hsa.create(0) as area:
        pool = aml_core.pool(area)
        reg = rdma.register_pool(pd, pool)
        a, b = pool.mmap(4096), pool.mmap(8192)
        before = open_fds()
        ka, kb = reg.key(a), reg.key(b)
        slab, offset = pool.slab_of(b)
        assert slab is not None
        assert pd.calls == {"ibv_reg_dmabuf_mr": 1}
        assert (pd.regions[0].offset, pd.regions[0].length) == (0, slab.size)
        assert (kb.offset, kb.addr) == (offset, offset)  # iova = the slab's dma-buf offset
        assert (ka.lkey, ka.rkey) == (kb.lkey, kb.rkey)
        assert open_fds() == before
        ka.release()
        kb.release()
        pool.munmap(a)
        pool.munmap(b)
        pool.trim()
        assert pd.live == 0
        assert pd.deregistered == [(0, slab.size, True)]
        pool.close()


def test_a_failed_export_registers_nothing(hsa: HsaDouble) -> None:
    pd = FakeDomain()
    with aml_hsa.create(0) as area:
        buf = area.mmap(4096)
        before = open_fds()
        hsa.inject("hsa_amd_portable_export_dmabuf", 0x1003)  # HSA_STATUS_ERROR_OUT_OF_RESOURCES
        with pytest.raises(AMLError) as info:
            rdma.register(pd, buf)
        assert info.value.native is not None
        assert info.value.native.function == "hsa_amd_portable_export_dmabuf"
        assert pd.calls == {}
        assert open_fds() == before
        assert buf.exports == 0
        area.munmap(buf)


def test_a_failed_registration_closes_the_dma_buf(hsa: HsaDouble) -> None:
    pd = FakeDomain()
    with aml_hsa.create(0) as area:
        buf = area.mmap(4096)
        before = open_fds()
        pd.inject("ibv_reg_dmabuf_mr", 95)  # EOPNOTSUPP: a provider without dma-buf MRs
        with pytest.raises(AMLNotSupported):
            rdma.register(pd, buf)
        assert open_fds() == before
        assert buf.exports == 0
        area.munmap(buf)


def test_an_expandable_device_pool_is_refused(hsa: HsaDouble) -> None:
    pd = FakeDomain()
    vm = aml_hsa.virtual_memory(0)
    try:
        with aml_core.pool(vm, expandable=True) as pool:
            reg = rdma.register_pool(pd, pool)
            buf = pool.mmap(4096)
            with pytest.raises(AMLNotSupported, match="expandable pool of device memory"):
                reg.key(buf)
            assert pd.calls == {}
            assert reg.keys_held == 0
            assert buf.exports == 0
            pool.munmap(buf)
    finally:
        vm.close()


def test_no_fd_is_left(hsa: HsaDouble) -> None:
    pd = FakeDomain()
    before = open_fds()
    with aml_hsa.create(0) as area:
        pool = aml_core.pool(area)
        reg = rdma.register_pool(pd, pool)
        for _ in range(3):
            block = pool.mmap(3 * MiB)
            reg.key(block).release()
            pool.munmap(block)
            pool.trim()
        pool.close()
    assert pd.live == 0
    assert open_fds() == before
    assert os.path.exists("/proc/self/fd")
