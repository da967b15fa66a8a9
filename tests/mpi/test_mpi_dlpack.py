"""What mpi4py 4 gets from an aml buffer of each DLPack device kind, in one process: the
buffer protocol for host-accessible memory (CPU, CUDA host, CUDA managed, ROCm host), and
for device memory (CUDA, ROCm, oneAPI) the DLPack call mpi4py makes,
``__dlpack_device__()`` then ``__dlpack__(stream=-1, max_version=(1, 0), copy=False)``
(``__dlpack__(stream=-1)`` for a DLPack 0.x producer). The kinds are host memory that calls
itself device memory (tests.mpi.support.DeviceLike); which kind each backend's buffers
report is tested with the backends (their doubles and GPU runs)."""

from __future__ import annotations

import ctypes

import pytest

pytest.importorskip("mpi4py", reason="mpi4py is not installed (tox -e mpi installs it)")

from mpi4py import MPI

from aml_core.buffer import DLDeviceType

from .support import DeviceLike

DEVICE = [DLDeviceType.CUDA, DLDeviceType.ROCM, DLDeviceType.ONEAPI]
HOST = [DLDeviceType.CUDA_HOST, DLDeviceType.CUDA_MANAGED, DLDeviceType.ROCM_HOST]

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class _Versioned(ctypes.Structure):
    """The head of DLManagedTensorVersioned (dlpack.h 1.x) and its DLTensor's data and
    device."""

    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
    ]


@pytest.mark.parametrize("dl_type", DEVICE, ids=lambda t: t.name)
def test_device_memory_goes_through_dlpack_as_mpi4py_asks(dl_type: DLDeviceType) -> None:
    with DeviceLike(dl_type, host_accessible=False) as area:
        buf = area.mmap(4096)
        assert buf.__dlpack_device__() == (dl_type, 0)
        capsule = buf.__dlpack__(stream=-1, max_version=(1, 0), copy=False)
        head = _Versioned.from_address(_get_pointer(capsule, b"dltensor_versioned"))
        assert (head.major, head.data, head.device_type, head.device_id) == (1, buf.ptr, dl_type, 0)
        del capsule, head  # an unconsumed capsule gives its export back
        assert buf.exports == 0
        assert ctypes.pythonapi.PyCapsule_IsValid(ctypes.py_object(buf.__dlpack__(stream=-1)), b"dltensor")
        # mpi4py's own path: no buffer protocol, so DLPack, and a buffer it knows is not
        # host memory.
        with pytest.raises(BufferError):
            memoryview(buf)
        seen = MPI.buffer(buf)
        assert (seen.address, seen.nbytes) == (buf.ptr, buf.size)
        with pytest.raises(BufferError, match="not CPU-accessible"):
            seen.tobytes()
        seen.release()
        assert buf.exports == 0, "mpi4py did not give the DLPack capsule back"
        buf.free()


@pytest.mark.parametrize("dl_type", HOST, ids=lambda t: t.name)
def test_host_accessible_memory_goes_through_the_buffer_protocol(dl_type: DLDeviceType) -> None:
    with DeviceLike(dl_type, host_accessible=True) as area:
        buf = area.mmap(4096)
        assert buf.__dlpack_device__() == (dl_type, 0)
        with memoryview(buf) as view:
            view[:4] = b"host"
        seen = MPI.buffer(buf)
        assert seen.address == buf.ptr
        assert seen.tobytes()[:4] == b"host"
        seen.release()
        buf.free()


def test_copy_or_another_device_is_refused_as_dlpack_says() -> None:
    with DeviceLike(DLDeviceType.CUDA, host_accessible=False) as area:
        buf = area.mmap(64)
        with pytest.raises(BufferError, match="copy"):
            buf.__dlpack__(stream=-1, max_version=(1, 0), copy=True)
        with pytest.raises(BufferError, match="DLPack device"):
            buf.__dlpack__(stream=-1, dl_device=(DLDeviceType.CUDA, 1))
        assert buf.exports == 0
