"""CPU tests of aml-cuda's compiled allocator (CudaRuntime.native_allocator): the
cyruntime functions of cuda-bindings resolve from their PyCapsules with the C signatures
NativeAllocator calls, and a failing call (cudaGetDevice without a driver) raises the
same translated error as the Python path. They run without a GPU or a driver."""

from __future__ import annotations

import ctypes

import pytest
from cuda_helpers import gpu_available

from aml_core.errors import AMLError, AMLNotSupported
from aml_core.gpu.runtime import NATIVE_METHODS

pytest.importorskip("cuda.bindings.cyruntime")

from aml_cuda import native
from aml_cuda.runtime import CYRUNTIME_SIGNATURES, NATIVE_FUNCTIONS, CudaRuntime


def test_cyruntime_capsules_have_the_expected_signatures() -> None:
    found = native.cyruntime_functions(NATIVE_FUNCTIONS.values())
    assert {name: signature for name, (_, signature) in found.items()} == CYRUNTIME_SIGNATURES


def test_the_addresses_are_the_capsules_pointers() -> None:
    from cuda.bindings import cyruntime

    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    found = native.cyruntime_functions(["cudaMalloc"])
    capsule = cyruntime.__pyx_capi__["cudaMalloc"]
    assert found["cudaMalloc"][0] == get_pointer(capsule, b"cudaError_t (void **, size_t)")
    assert found["cudaMalloc"][0] != 0


def test_a_missing_function_is_not_supported() -> None:
    with pytest.raises(AMLNotSupported, match="cudaNoSuchCall"):
        native.cyruntime_functions(["cudaNoSuchCall"])


def test_the_runtime_offers_the_table() -> None:
    table = CudaRuntime().native_allocator()
    assert table is not None
    assert table.names == NATIVE_FUNCTIONS
    assert all(table.has(op) for op in NATIVE_FUNCTIONS)


@pytest.mark.skipif(gpu_available(), reason="needs a machine without a usable CUDA driver")
def test_a_failing_call_raises_what_the_python_path_raises() -> None:
    rt = CudaRuntime()
    table = rt.native_allocator()
    assert table is not None
    with pytest.raises(AMLError) as python_path:
        rt.get_device()
    with pytest.raises(AMLError) as compiled:
        table.get_device()
    assert type(compiled.value) is type(python_path.value)
    assert compiled.value.native == python_path.value.native
    assert compiled.value.native is not None
    assert compiled.value.native.function == "cudaGetDevice"


@pytest.mark.parametrize("method", NATIVE_METHODS)
def test_a_subclass_replacing_an_allocation_method_offers_none(method: str) -> None:
    inherited = getattr(CudaRuntime, method)
    same = type("Same", (CudaRuntime,), {method: inherited})
    assert same().native_allocator() is not None  # the same function: still CUDA's

    def wrapper(self: CudaRuntime, *args: object) -> object:
        return inherited(self, *args)

    replaced = type("Replaced", (CudaRuntime,), {method: wrapper})
    assert replaced().native_allocator() is None


@pytest.mark.gpu
def test_device_areas_run_the_compiled_path_on_a_gpu() -> None:
    import aml_cuda

    from aml_core.errors import AMLMemoryError

    rt = aml_cuda.get_runtime()
    with aml_cuda.create(0, 0) as area:
        assert area._native_allocator is not None
        assert area._native_allocator.get_device() == rt.get_device()
        buf = area.mmap(1 << 20)
        attrs = rt.pointer_attributes(buf.ptr)
        assert (attrs.memory_type, attrs.device) == ("device", 0)
        assert buf.__dlpack_device__() == (2, 0)
        area.munmap(buf)
        _free, total = rt.memory_info()
        with pytest.raises(AMLMemoryError) as info:
            area.mmap(2 * total)
        assert info.value.native is not None
        assert (info.value.native.function, info.value.native.name) == (
            "cudaMalloc",
            "cudaErrorMemoryAllocation",
        )
        assert f"cudaMalloc of {2 * total} bytes failed" in str(info.value)
        area.munmap(area.mmap(4096))  # CUDA's last error was cleared
