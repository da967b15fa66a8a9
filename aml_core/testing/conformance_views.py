"""The conformance checks of the zero-copy protocols: the buffer protocol, NumPy,
DLPack and ``__cuda_array_interface__`` (a part of
:class:`~aml_core.testing.AreaConformance`; each skips unless the area declares the
capability)."""

from __future__ import annotations

import pytest

from ..area import Area
from ..errors import (
    AMLBusyError,
)
from ..specs import Capability
from .conformance_base import AreaKit

__all__ = ["ViewChecks"]


class ViewChecks(AreaKit):
    """Buffers seen by other libraries without a copy. Needs a fixture ``area``."""

    def test_buffer_protocol(self, area: Area) -> None:
        if not area.capabilities & Capability.BUFFER_PROTOCOL:
            pytest.skip("the area does not declare BUFFER_PROTOCOL")
        buf = area.mmap(4096)
        view = memoryview(buf)
        assert view.nbytes == 4096
        assert buf.exports == 1
        view[0:4] = b"aml!"
        assert self.read(area, buf, 4) == b"aml!"
        with pytest.raises(AMLBusyError):
            area.munmap(buf)
        assert not buf.freed
        view.release()
        assert buf.exports == 0
        area.munmap(buf)

    def test_numpy_shares_bytes(self, area: Area) -> None:
        np = pytest.importorskip("numpy")
        if not area.capabilities & Capability.BUFFER_PROTOCOL:
            pytest.skip("the area does not declare BUFFER_PROTOCOL")
        buf = area.mmap(4096)
        arr = np.frombuffer(buf, dtype=np.uint8)
        assert arr.ctypes.data == buf.ptr
        arr[:3] = [1, 2, 3]
        assert self.read(area, buf, 3) == b"\x01\x02\x03"
        with pytest.raises(AMLBusyError):
            area.munmap(buf)
        del arr
        area.munmap(buf)

    def test_dlpack(self, area: Area) -> None:
        if not area.capabilities & Capability.DLPACK:
            pytest.skip("the area does not declare DLPACK")
        buf = area.mmap(4096)
        dev_type, dev_id = buf.__dlpack_device__()
        assert dev_type > 0
        assert dev_id >= 0
        capsule = buf.__dlpack__()
        assert buf.exports == 1
        with pytest.raises(AMLBusyError):
            area.munmap(buf)
        del capsule
        assert buf.exports == 0
        versioned = buf.__dlpack__(max_version=(1, 0))
        del versioned
        with pytest.raises(BufferError):
            buf.__dlpack__(copy=True)
        with pytest.raises(BufferError):
            buf.__dlpack__(dl_device=(dev_type + 100, 0))
        area.munmap(buf)

    def test_numpy_from_dlpack(self, area: Area) -> None:
        np = pytest.importorskip("numpy")
        if not area.capabilities & Capability.DLPACK or not area.capabilities & Capability.BUFFER_PROTOCOL:
            pytest.skip("needs host-accessible DLPack buffers")
        buf = area.mmap(4096)
        if buf.__dlpack_device__()[0] not in (1, 3, 11, 13):  # kDLCPU, CUDAHost, ROCMHost, CUDAManaged
            area.munmap(buf)
            pytest.skip("NumPy imports only host-accessible DLPack devices")
        arr = np.from_dlpack(buf)
        assert arr.ctypes.data == buf.ptr
        assert arr.shape == (4096,)
        arr[7] = 42
        assert self.read(area, buf, 8)[7] == 42
        del arr
        area.munmap(buf)

    def test_cuda_array_interface(self, area: Area) -> None:
        buf = area.mmap(4096)
        if not area.capabilities & Capability.CUDA_ARRAY_INTERFACE:
            assert not hasattr(buf, "__cuda_array_interface__")
            area.munmap(buf)
            return
        cai = buf.__cuda_array_interface__
        assert cai["shape"] == (4096,)
        assert cai["data"][0] == buf.device_ptr
        assert cai["version"] == 3
        area.munmap(buf)
