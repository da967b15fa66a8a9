"""What a runtime's dma-buf export may answer (issue 32, root cause 6): an impossible
answer from the driver (no fd, an offset negative, not an int, at or past 2**63, or the
buffer's bytes past the dma-buf's end) is AMLFailure and the fd it gave is closed first,
as docs/dmabuf.md says; a possible one is handed over as it came."""

from __future__ import annotations

import os

import pytest

from aml_core.errors import AMLFailure
from aml_core.gpu.ops_sharing import IpcOps

SIZE = 4096


class _Traits:
    name = "fake"
    ipc_handle_size = 64


class FakeIpc(IpcOps):
    """An IPC group whose dma-buf export answers what the test says: a new memfd of
    ``length`` bytes (a dma-buf answers lseek(SEEK_END) with its size, as a memfd) or
    ``fd``, with ``offset``."""

    traits = _Traits()  # type: ignore[assignment]

    def __init__(self, offset: object, length: int = 2 * SIZE, fd: object = None) -> None:
        self.offset, self.length, self.fd = offset, length, fd
        self.made: list[int] = []
        self.closed: list[int] = []

    def _dmabuf_export(self, ptr: int, size: int, device: int) -> tuple[int, int]:
        if self.fd is not None:
            return self.fd, self.offset  # type: ignore[return-value]
        fd = os.memfd_create("aml-test-dmabuf")
        os.ftruncate(fd, self.length)
        self.made.append(fd)
        return fd, self.offset  # type: ignore[return-value]

    def _dmabuf_close(self, fd: int) -> None:
        self.closed.append(fd)
        os.close(fd)

    def _ipc_get_handle(self, ptr: int, size: int) -> bytes:
        raise NotImplementedError

    def _ipc_open_handle(self, handle: bytes, size: int) -> int:
        raise NotImplementedError

    def _ipc_close_handle(self, ptr: int) -> None:
        raise NotImplementedError


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


@pytest.mark.parametrize(
    "offset",
    [2**63, 2**64, 2**63 - 1, 2**63 - SIZE, 1 << 40, 2 * SIZE, SIZE + 1, -1, 1.0, "0", None, True],
)
def test_an_impossible_offset_is_a_failure_and_the_fd_is_closed(offset: object) -> None:
    ipc = FakeIpc(offset)
    with pytest.raises(AMLFailure, match="reported success") as info:
        ipc.dmabuf_export(0x10000, SIZE, 0)
    assert type(info.value) is AMLFailure
    assert ipc.closed == ipc.made  # closed by the runtime's own close
    assert all(_closed(fd) for fd in ipc.made)


@pytest.mark.parametrize("offset", [0, 1, SIZE])
def test_an_offset_inside_the_dma_buf_is_handed_over(offset: int) -> None:
    ipc = FakeIpc(offset)
    fd, got = ipc.dmabuf_export(0x10000, SIZE, 0)
    try:
        assert (fd, got) == (ipc.made[0], offset)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # its position put back
        assert not ipc.closed
    finally:
        os.close(fd)


@pytest.mark.parametrize("fd", [-1, 1 << 31, "3", None.__class__, 3.0])
def test_no_file_descriptor_is_a_failure(fd: object) -> None:
    ipc = FakeIpc(0, fd=fd)
    with pytest.raises(AMLFailure, match="no file descriptor"):
        ipc.dmabuf_export(0x10000, SIZE, 0)
    assert not ipc.closed


def test_an_fd_that_cannot_tell_its_size_is_checked_by_the_offset_alone() -> None:
    r, w = os.pipe()  # lseek: ESPIPE
    try:
        ipc = FakeIpc(8, fd=r)
        assert ipc.dmabuf_export(0x10000, SIZE, 0) == (r, 8)
        ipc = FakeIpc(2**63 - 1, fd=r)
        with pytest.raises(AMLFailure, match="past any file"):
            ipc.dmabuf_export(0x10000, SIZE, 0)
        assert ipc.closed == [r]
        r = -1
    finally:
        os.close(w)
        if r >= 0:
            os.close(r)
