"""dma-buf export of CUDA memory (docs/dmabuf.md).

On the CPU (CI): aml-cuda's runtime over cuda-bindings with the driver calls replaced by a
recording double that hands out real file descriptors (memfds of the exported length):
the attribute gate, the page-aligned range, every driver error through aml-cuda's table,
the fd the caller's, and bad input. On a GPU (``gpu`` marker): the fd is an NVIDIA
dma-buf of the right size in this process and in another one it is passed to with
SCM_RIGHTS."""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import aml_cuda
import pytest
from cuda_helpers import HERE, child_env

import aml_core
from aml_core.dmabuf import DmabufHandle, export_dmabuf
from aml_core.errors import AMLError, AMLFailure, AMLNotSupported, AMLValueError, ErrorCode
from aml_core.gpu import GpuArea, GpuFlags
from aml_core.protocols import DmabufExporter
from tests.support.dmabuf import check_bad_input, check_expandable_pool_refuses, check_pooled_block

drv_mod = pytest.importorskip("cuda.bindings.driver")

R = drv_mod.CUresult
PAGE = mmap.PAGESIZE
CHILD = os.path.join(HERE, "cuda_children.py")


# -- the driver double -------------------------------------------------------------------------
class _Driver:
    """cuda.bindings.driver's calls of the export, answering as CUDA does (or as told),
    recorded; the export hands out a memfd of the exported length."""

    def __init__(self) -> None:
        self.supported = 1
        self.attribute_error: Any = R.CUDA_SUCCESS
        self.export_error: Any = R.CUDA_SUCCESS
        self.export_fd: int | None = None  # a fd to "export" instead of a new memfd
        self.calls: list[tuple[Any, ...]] = []
        self.fds: list[int] = []

    def cuInit(self, flags: int) -> tuple[Any]:
        return (R.CUDA_SUCCESS,)

    def cuDeviceGet(self, ordinal: int) -> tuple[Any, int]:
        return R.CUDA_SUCCESS, ordinal

    def cuCtxGetCurrent(self) -> tuple[Any, int]:
        return R.CUDA_SUCCESS, 1  # a context is current

    def cuDeviceGetAttribute(self, attribute: Any, dev: int) -> tuple[Any, int]:
        self.calls.append(("cuDeviceGetAttribute", int(attribute), dev))
        return self.attribute_error, self.supported

    def cuMemGetHandleForAddressRange(self, ptr: int, size: int, kind: Any, flags: int) -> tuple[Any, int]:
        self.calls.append(("cuMemGetHandleForAddressRange", ptr, size, int(kind), flags))
        if self.export_error != R.CUDA_SUCCESS:
            return self.export_error, 0
        if self.export_fd is not None:
            return R.CUDA_SUCCESS, self.export_fd
        fd = os.memfd_create("aml-test-dmabuf")
        os.ftruncate(fd, size)
        self.fds.append(fd)
        return R.CUDA_SUCCESS, fd


class _Proxy:
    def __init__(self, real: Any, fake: _Driver) -> None:
        self._real = real
        self._fake = fake

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fake, name) if hasattr(type(self._fake), name) else getattr(self._real, name)


def _runtime(offset: int) -> Any:
    """A CudaRuntime of two devices whose device allocation is recorded and hands out
    addresses ``offset`` bytes past a page."""
    from aml_cuda.runtime import CudaRuntime

    class Recorder(CudaRuntime):
        def __init__(self) -> None:
            super().__init__()
            self.current = 1
            self.next_ptr = 0x7000_0000

        def device_count(self) -> int:
            return 2

        def get_device(self) -> int:
            return self.current

        def _set_device(self, device: int) -> None:
            self.current = device

        def _malloc(self, size: int) -> int:
            self.next_ptr += 0x10_0000
            return self.next_ptr + offset

        def _free(self, ptr: int) -> None:
            pass

        def _malloc_managed(self, size: int, attach_global: bool) -> int:
            return self._malloc(size)

    return Recorder()


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Driver]:
    from aml_cuda import calls as calls_mod

    fake = _Driver()
    monkeypatch.setattr(calls_mod, "_drv", _Proxy(drv_mod, fake))
    yield fake
    for fd in fake.fds:
        with contextlib.suppress(OSError):  # the test closed it, as the caller owns it
            os.close(fd)


@pytest.fixture
def area() -> Iterator[GpuArea]:
    with GpuArea(_runtime(0x200), 0, GpuFlags.DEFAULT) as a:
        yield a


def test_export_is_the_page_aligned_range_with_the_offset(driver: _Driver, area: GpuArea) -> None:
    assert isinstance(area, DmabufExporter)
    buf = area.mmap(3 * PAGE)
    handle = area.export_dmabuf(buf)
    assert isinstance(handle, DmabufHandle)
    assert (handle.offset, handle.size, handle.buffer) == (0x200, 3 * PAGE, buf)
    base = buf.ptr - 0x200
    # 0x200 + 3 pages spans 4 pages, from the page below the buffer.
    assert driver.calls == [
        ("cuDeviceGetAttribute", 124, 0),  # CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED of device 0
        ("cuMemGetHandleForAddressRange", base, 4 * PAGE, 1, 0),  # ..._DMA_BUF_FD, no flags
    ]
    st = os.fstat(handle.fd)  # a real fd, the one the driver made
    assert st.st_size == 4 * PAGE
    assert handle.offset + handle.size <= st.st_size
    assert area.runtime.current == 1  # the caller's device restored
    assert aml_core.export_dmabuf(buf) != handle  # each export is a new fd
    os.close(handle.fd)


def test_closing_the_fd_leaves_the_buffer_usable(driver: _Driver, area: GpuArea) -> None:
    buf = area.mmap(PAGE)
    handle = export_dmabuf(buf)  # the module function asks the buffer's area
    os.close(handle.fd)
    assert not buf.freed
    again = area.export_dmabuf(buf.ptr)  # by base pointer too
    assert again.buffer is buf
    os.close(again.fd)
    area.munmap(buf)
    assert buf.freed


def test_the_handle_keeps_its_buffer_alive(driver: _Driver, area: GpuArea) -> None:
    import gc
    import weakref

    buf = area.mmap(PAGE)
    ref = weakref.ref(buf)
    handle = area.export_dmabuf(buf)
    del buf
    gc.collect()
    assert ref() is not None
    assert not handle.buffer.freed
    assert len(area.buffers()) == 1
    os.close(handle.fd)
    del handle
    gc.collect()
    assert ref() is None
    assert area.buffers() == ()


def test_device_without_dma_buf_support_is_enotsup(driver: _Driver, area: GpuArea) -> None:
    driver.supported = 0
    buf = area.mmap(PAGE)
    with pytest.raises(AMLNotSupported, match="CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0"):
        area.export_dmabuf(buf)
    assert [c[0] for c in driver.calls] == ["cuDeviceGetAttribute"]  # no export tried


def _driver_errors() -> list[Any]:
    from aml_cuda.errors import DRIVER_MAPPING

    return [R(code) for code in DRIVER_MAPPING] + [R.CUDA_ERROR_UNKNOWN, R.CUDA_ERROR_ILLEGAL_ADDRESS]


@pytest.mark.parametrize("code", _driver_errors(), ids=lambda c: c.name)
@pytest.mark.parametrize("function", ["cuMemGetHandleForAddressRange", "cuDeviceGetAttribute"])
def test_every_driver_error_goes_through_the_table(
    driver: _Driver, area: GpuArea, code: Any, function: str
) -> None:
    from aml_cuda.errors import DRIVER_MAPPING

    buf = area.mmap(PAGE)
    if function == "cuDeviceGetAttribute":
        driver.attribute_error = code
    else:
        driver.export_error = code
    with pytest.raises(AMLError) as info:
        area.export_dmabuf(buf)
    assert info.value.code == DRIVER_MAPPING.get(int(code), ErrorCode.FAILURE)
    assert info.value.native is not None
    assert (info.value.native.function, info.value.native.code) == (function, int(code))
    assert area.runtime.current == 1  # restored after the failure
    assert not buf.freed
    assert not driver.fds  # no fd made


@pytest.mark.parametrize("bad", [-1, 1 << 40])
def test_a_success_without_a_file_descriptor_is_a_failure(driver: _Driver, area: GpuArea, bad: int) -> None:
    driver.export_fd = bad
    buf = area.mmap(PAGE)
    with pytest.raises(AMLFailure, match=f"reported success with fd {bad}"):
        area.export_dmabuf(buf)
    assert not buf.freed


def test_bad_input_is_refused(driver: _Driver, area: GpuArea) -> None:
    with GpuArea(_runtime(0), 0, GpuFlags.DEFAULT) as other:
        check_bad_input(area, other)
    with pytest.raises(AMLValueError, match="not mapped by this area"):
        area.export_dmabuf(0x1234_0000)
    area.close()
    with pytest.raises(AMLValueError, match="closed"):
        area.export_dmabuf(0x7000_0000)
    assert not driver.calls  # nothing reached the driver


def test_memory_other_than_device_memory_is_enotsup(driver: _Driver) -> None:
    with GpuArea(_runtime(0), 0, GpuFlags.ALLOC_UNIFIED) as managed:
        buf = managed.mmap(PAGE)
        with pytest.raises(AMLNotSupported, match="device memory; this is a managed area"):
            managed.export_dmabuf(buf)
    host = aml_core.area(kind="host", backend="host")
    hbuf = host.mmap(PAGE)
    with pytest.raises(AMLNotSupported, match="cannot export a dma-buf"):
        export_dmabuf(hbuf)
    host.munmap(hbuf)
    assert not driver.calls


def test_a_pooled_block_exports_its_slab_with_the_offset(driver: _Driver, area: GpuArea) -> None:
    def whole_slab(handle: DmabufHandle, block: Any) -> None:
        _, base, size, _, _ = driver.calls[-1]
        assert base % PAGE == 0
        assert size % PAGE == 0
        assert base + size >= block.ptr + block.size  # the slab's pages, the block in them

    check_pooled_block(area, 0x200, whole_slab)  # the slab is 0x200 bytes into its first page


# -- on a GPU -------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_an_expandable_pool_cannot_export(rt: Any) -> None:
    check_expandable_pool_refuses(aml_cuda.virtual_memory(0))


def _fdinfo(fd: int) -> dict[str, str]:
    """What the kernel says of ``fd`` (``/proc/self/fdinfo``): ``exp_name``, ``size``..."""
    with open(f"/proc/self/fdinfo/{fd}") as f:
        lines = f.read().splitlines()
    return {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in lines)}


@pytest.mark.gpu
@pytest.mark.parametrize("size", [2 << 20, 3 * 4096 + 100], ids=["2MiB", "odd"])
def test_gpu_export_is_an_nvidia_dma_buf(rt: Any, size: int) -> None:
    with aml_cuda.create(0) as area:
        buf = area.mmap(size)
        area.write(buf, b"\xa5" * size)
        try:
            handle = area.export_dmabuf(buf)
        except AMLNotSupported as exc:
            pytest.skip(f"this device cannot export dma-bufs: {exc}")
        try:
            info = _fdinfo(handle.fd)
            assert info.get("exp_name") == "nv_dmabuf", info
            total = int(info["size"])
            assert total % PAGE == 0
            assert handle.offset + handle.size <= total
        finally:
            os.close(handle.fd)
        # Closing the fd never frees the memory: the buffer is still there, its bytes too.
        assert area.read(buf, 16) == b"\xa5" * 16
        area.munmap(buf)


@pytest.mark.gpu
def test_gpu_export_passes_to_another_process_with_scm_rights(rt: Any) -> None:
    size = 2 << 20
    with aml_cuda.create(0) as area:
        buf = area.mmap(size)
        try:
            handle = area.export_dmabuf(buf)
        except AMLNotSupported as exc:
            pytest.skip(f"this device cannot export dma-bufs: {exc}")
        parent, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with parent:
            proc = subprocess.Popen(
                [sys.executable, CHILD, "dmabuf-recv", str(child_end.fileno())],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env(),
                pass_fds=(child_end.fileno(),),
            )
            child_end.close()
            socket.send_fds(parent, [b"dmabuf"], [handle.fd])
            out, err = proc.communicate(timeout=120)
        os.close(handle.fd)
        assert proc.returncode == 0, err[-4000:]
        got = json.loads(out.strip().splitlines()[-1])
        assert got["pid"] != os.getpid()
        assert got["exp_name"] == "nv_dmabuf"
        assert int(got["size"]) >= handle.offset + handle.size
        assert not buf.freed
        area.munmap(buf)
