"""dma-buf export of HSA memory (``hsa_amd_portable_export_dmabuf``, docs/dmabuf.md), on the
driver double: in host mode the dma-buf is a new fd of the pool allocation's memfd (the
same memory: what a test writes through the area is read through the fd), in forward mode
the CUDA driver's dma-buf of the allocation."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable

import pytest
from aml_hsa import abi as C
from aml_hsa.errors import HSA_ERROR_CODES, NAMES
from hsa_helpers import HsaDouble, aml_hsa, open_fds

import aml_core
from aml_core.buffer import Buffer
from aml_core.dmabuf import DmabufHandle, export_dmabuf
from aml_core.errors import AMLError, AMLNotSupported, AMLValueError
from aml_core.protocols import DmabufExporter
from tests.support.dmabuf import check_bad_input, check_expandable_pool_refuses, check_pooled_block


def _read_fd(fd: int, offset: int, n: int) -> bytes:
    """``n`` bytes at ``offset`` of the file behind ``fd`` (the double's memfd)."""
    return os.pread(fd, n, offset)


def test_export_is_a_new_fd_of_the_allocation(hsa: HsaDouble) -> None:
    with aml_hsa.create(0) as area:
        assert isinstance(area, DmabufExporter)
        buf = area.mmap(3 * mmap.PAGESIZE + 100)
        handle = area.export_dmabuf(buf)
        assert isinstance(handle, DmabufHandle)
        assert (handle.offset, handle.size, handle.buffer) == (0, buf.size, buf)
        assert os.fstat(handle.fd).st_size >= handle.offset + handle.size
        assert hsa.calls("hsa_amd_portable_export_dmabuf") == 1
        other = export_dmabuf(buf)  # through the buffer's area
        assert other.fd != handle.fd
        # Closing the fds never frees the memory: the buffer stays usable.
        os.close(handle.fd)
        os.close(other.fd)
        area.write(buf, b"after")
        assert area.read(buf, 5) == b"after"
        area.munmap(buf)


@pytest.mark.host_double
def test_the_fd_is_the_buffer_s_memory(hsa: HsaDouble) -> None:
    with aml_hsa.create(0) as area:
        buf = area.mmap(8192)
        area.write(buf, b"dma-buf bytes", 4096)
        handle = area.export_dmabuf(buf.ptr)  # by base pointer too
        try:
            assert _read_fd(handle.fd, handle.offset + 4096, 13) == b"dma-buf bytes"
        finally:
            os.close(handle.fd)
        area.munmap(buf)


@pytest.mark.parametrize(("status", "code"), sorted(HSA_ERROR_CODES.items()), ids=str)
def test_every_status_goes_through_the_table(hsa: HsaDouble, status: int, code: aml_core.ErrorCode) -> None:
    with aml_hsa.create(0) as area:
        buf = area.mmap(4096)
        before = open_fds()
        hsa.inject("hsa_amd_portable_export_dmabuf", status)
        with pytest.raises(AMLError) as info:
            area.export_dmabuf(buf)
        assert info.value.code == code
        assert info.value.native is not None
        native = info.value.native
        assert (native.function, native.name) == ("hsa_amd_portable_export_dmabuf", NAMES[status])
        assert open_fds() == before  # no fd made
        assert not buf.freed
        area.munmap(buf)


def test_rocr_without_dma_buf_export_is_enotsup(hsa_built: Callable[[tuple[int, int]], HsaDouble]) -> None:
    """ROCr 5.2 (Debian's: AMD interface 1.0) has no hsa_amd_portable_export_dmabuf."""
    hsa_built((1, 0))
    assert not aml_hsa.get_runtime().lib.has("hsa_amd_portable_export_dmabuf")
    with aml_hsa.create(0) as area:
        buf = area.mmap(4096)
        with pytest.raises(AMLNotSupported, match=r"no dma-buf export .*ROCm 5\.6"):
            area.export_dmabuf(buf)
        area.munmap(buf)


def test_a_pooled_block_is_its_slab_at_the_block_s_offset(hsa: HsaDouble) -> None:
    def same_memory(handle: DmabufHandle, block: Buffer) -> None:
        if hsa.mode == "host":  # the fd is the allocation's memfd: the block's bytes are there
            block.area.write(block, b"the second block")
            assert _read_fd(handle.fd, handle.offset, 16) == b"the second block"

    with aml_hsa.create(0) as area:
        check_pooled_block(area, 0, same_memory)


def test_an_expandable_pool_cannot_export(hsa: HsaDouble) -> None:
    check_expandable_pool_refuses(aml_hsa.virtual_memory(0))


def test_bad_input_is_refused(hsa: HsaDouble) -> None:
    with aml_hsa.create(0) as area, aml_hsa.create(0) as other:
        check_bad_input(area, other)
    with aml_hsa.host_area() as host:
        hbuf = host.mmap(64)
        with pytest.raises(AMLNotSupported, match="device memory"):
            host.export_dmabuf(hbuf)
        host.munmap(hbuf)
    assert hsa.calls("hsa_amd_portable_export_dmabuf") == 0


def test_close_dmabuf_is_the_double_s(hsa: HsaDouble) -> None:
    """The fds aml cannot hand over go back through hsa_amd_portable_close_dmabuf (an
    export whose offset cannot be a byte count is AMLFailure, its fd closed)."""
    rt = aml_hsa.get_runtime()
    with aml_hsa.create(0) as area:
        buf = area.mmap(4096)
        fd, offset = rt.dmabuf_export(buf.ptr, buf.size, 0)
        assert offset == 0
        rt._dmabuf_close(fd)
        assert hsa.calls("hsa_amd_portable_close_dmabuf") == 1
        with pytest.raises(OSError, match="Bad file descriptor"):
            os.fstat(fd)
        hsa.inject("hsa_amd_portable_close_dmabuf", C.HSA_STATUS_ERROR_INVALID_ARGUMENT)
        with pytest.raises(AMLValueError):
            rt._dmabuf_close(fd)
        area.munmap(buf)
