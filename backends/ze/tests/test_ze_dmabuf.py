"""dma-buf export of Level Zero memory (docs/dmabuf.md) on the driver double: an area made
with ``dmabuf=True`` chains ``ze_external_memory_export_desc_t`` (DMA_BUF) to every device
allocation, and ``export_dmabuf`` gets the fd from ``zeMemGetAllocProperties`` with
``ze_external_memory_export_fd_t`` chained (host mode: a dup of the allocation's memfd, the
same memory; forward mode: the CUDA driver's dma-buf)."""

from __future__ import annotations

import os
from collections.abc import Callable

import aml_ze
import pytest
from aml_ze import abi as C
from aml_ze.errors import ZE_ERROR_CODES
from ze_helpers import ZeDouble

import aml_core
from aml_core.dmabuf import DmabufHandle
from aml_core.errors import AMLError, AMLNotSupported, AMLTypeError, ErrorCode
from aml_core.protocols import DmabufExporter
from tests.support.dmabuf import check_bad_input, check_pooled_block

Areas = Callable[..., aml_ze.ZeArea]


def test_an_exportable_area_exports(ze: ZeDouble, areas: Areas) -> None:
    area = areas("device", dmabuf=True)
    assert isinstance(area, DmabufExporter)
    assert "dmabuf" in repr(area)
    buf = area.mmap(1 << 16)
    handle = area.export_dmabuf(buf)
    assert isinstance(handle, DmabufHandle)
    assert (handle.offset, handle.size, handle.buffer) == (0, buf.size, buf)
    assert os.fstat(handle.fd).st_size >= buf.size
    assert ze.calls("zeMemGetAllocProperties") == 1
    os.close(handle.fd)  # the caller's: closing it never frees the memory
    assert not buf.freed
    again = aml_core.export_dmabuf(buf)
    os.close(again.fd)
    area.munmap(buf)


@pytest.mark.host_double
def test_the_fd_is_the_allocation_s_memory(ze: ZeDouble, areas: Areas) -> None:
    area = areas("device", dmabuf=True)
    buf = area.mmap(1 << 16)
    ze.ctl.write(buf.ptr + 100, b"through the dma-buf")
    handle = area.export_dmabuf(buf.ptr)
    try:
        assert os.pread(handle.fd, 19, handle.offset + 100) == b"through the dma-buf"
    finally:
        os.close(handle.fd)
    area.munmap(buf)


def test_an_area_made_without_the_option_cannot(ze: ZeDouble, areas: Areas) -> None:
    area = areas("device")
    buf = area.mmap(4096)
    with pytest.raises(AMLNotSupported, match=r"dmabuf=True"):
        area.export_dmabuf(buf)
    assert ze.calls("zeMemGetAllocProperties") == 0
    area.munmap(buf)


@pytest.mark.host_double
def test_the_driver_refuses_memory_allocated_without_the_flag(ze: ZeDouble, areas: Areas) -> None:
    """Through the runtime, past the area's check: the double (as the spec says) exports only
    what was allocated with the export type."""
    area = areas("device")
    buf = area.mmap(4096)
    with pytest.raises(AMLError) as info:
        aml_ze.get_runtime().dmabuf_export(buf.ptr, buf.size, 0)
    assert info.value.native is not None
    assert info.value.native.function == "zeMemGetAllocProperties"
    assert info.value.native.code == C.ZE_RESULT_ERROR_INVALID_ARGUMENT  # the double's answer
    area.munmap(buf)


@pytest.mark.parametrize("function", ["zeMemGetAddressRange", "zeMemGetAllocProperties"])
@pytest.mark.parametrize(("result", "code"), sorted(ZE_ERROR_CODES.items()), ids=hex)
def test_every_result_goes_through_the_table(
    ze: ZeDouble, areas: Areas, function: str, result: int, code: ErrorCode
) -> None:
    area = areas("device", dmabuf=True)
    buf = area.mmap(4096)
    ze.inject(function, result)
    with pytest.raises(AMLError) as info:
        area.export_dmabuf(buf)
    assert info.value.code == code
    assert info.value.native is not None
    assert (info.value.native.function, info.value.native.code) == (function, result)
    assert not buf.freed
    area.munmap(buf)


def test_a_pooled_block_is_its_slab_at_the_block_s_offset(ze: ZeDouble, areas: Areas) -> None:
    check_pooled_block(areas("device", dmabuf=True))


def test_option_checks(ze: ZeDouble, areas: Areas) -> None:
    with pytest.raises(AMLNotSupported, match="shared area"):
        areas("shared", dmabuf=True)
    with pytest.raises(AMLTypeError, match="dmabuf is a bool"):
        areas("device", dmabuf=1)
    area = aml_core.area(kind="device", backend="ze", dmabuf=True)
    try:
        assert area.settings.dmabuf is True  # type: ignore[attr-defined]
    finally:
        area.close()
    host = areas("host")
    hbuf = host.mmap(64)
    with pytest.raises(AMLNotSupported, match="device memory"):
        host.export_dmabuf(hbuf)
    host.munmap(hbuf)


def test_bad_input_is_refused(ze: ZeDouble, areas: Areas) -> None:
    check_bad_input(areas("device", dmabuf=True), areas("device", dmabuf=True))
    assert ze.calls("zeMemGetAllocProperties") == 0
