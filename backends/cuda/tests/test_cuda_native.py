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


# -- the kernel's stream calls (CudaStreams.native_streams) ------------------------------
def _pointer_types() -> dict[str, str]:
    """The C function pointer type of each NativeStreams operation, as aml_core's
    _allocator.pxd declares it (the shapes the kernel calls): op -> parameter list."""
    import re
    from pathlib import Path

    import aml_core

    pxd = (Path(aml_core.__file__).parent / "_allocator.pxd").read_text()
    shapes = dict(re.findall(r"ctypedef int \(\*(\w+)\)\(([^)]*)\) noexcept nogil", pxd))
    by_op = {
        "event_create": "event_create_fn",
        "event_destroy": "handle_fn",
        "event_record": "event_record_fn",
        "stream_wait_event": "stream_wait_fn",
        "event_query": "handle_fn",
        "stream_synchronize": "handle_fn",
    }
    return {op: shapes[fn] for op, fn in by_op.items()}


def test_the_stream_capsules_have_the_expected_signatures() -> None:
    from aml_cuda.streams import STREAM_FUNCTIONS, STREAM_SIGNATURES

    found = native.cyruntime_functions(STREAM_FUNCTIONS.values())
    assert {name: signature for name, (_, signature) in found.items()} == STREAM_SIGNATURES
    assert all(address for address, _ in found.values())


def test_the_stream_signatures_are_the_kernels_pointer_types() -> None:
    """Each capsule's C signature, with cudaEvent_t and cudaStream_t as the opaque
    pointers cuda-bindings' Cython declarations declare them (``ctypedef CUevent_st*
    cudaEvent_t``: in cyruntime.pxd of cuda-bindings 13.5, in a file it includes in
    13.3, which the GPU run of issue 33 met), is the parameter list of the pointer type
    the kernel calls it through; cudaError_t is a C enum, an int."""
    import re
    from pathlib import Path

    from aml_cuda.streams import STREAM_FUNCTIONS, STREAM_SIGNATURES
    from cuda.bindings import cyruntime

    package = Path(cyruntime.__file__).parent
    pxd = "\n".join(f.read_text() for pattern in ("*.pxd", "*.pxi") for f in sorted(package.rglob(pattern)))
    assert re.search(r"ctypedef CUevent_st\* cudaEvent_t\b", pxd)
    assert re.search(r"ctypedef CUstream_st\* cudaStream_t\b", pxd)
    shapes = _pointer_types()
    for op, function in STREAM_FUNCTIONS.items():
        signature = STREAM_SIGNATURES[function]
        assert signature.startswith("cudaError_t (")
        assert signature.endswith(")")
        params = signature.removeprefix("cudaError_t (").removesuffix(")")
        as_void = params.replace("cudaEvent_t *", "void **").replace("cudaEvent_t", "void *")
        assert as_void.replace("cudaStream_t", "void *") == shapes[op], function


def test_the_runtime_offers_its_stream_calls_in_c() -> None:
    from aml_cuda.streams import STREAM_FUNCTIONS

    from aml_core.stream import NativeStreams

    rt = CudaRuntime()
    table = rt.native_streams()
    assert isinstance(table, NativeStreams)
    assert table is rt.native_streams()  # made once
    assert not table.needs_gil  # a hook's hand-over takes no GIL
    assert table.queries  # a plain request after a stream request queries an event
    assert table.names == tuple(STREAM_FUNCTIONS.values())  # in NativeStreams' order of operations


@pytest.mark.parametrize("method", ["_event_create", "_event_record", "_stream_wait_event", "_event_query"])
def test_a_subclass_replacing_a_stream_method_offers_none(method: str) -> None:
    from aml_core.gpu.runtime import STREAM_METHODS

    assert method in STREAM_METHODS
    inherited = getattr(CudaRuntime, method)

    def wrapper(self: CudaRuntime, *args: object) -> object:
        return inherited(self, *args)

    replaced = type("Replaced", (CudaRuntime,), {method: wrapper})
    assert replaced().native_streams() is None  # the kernel then calls the Python method
    assert type("Same", (CudaRuntime,), {method: inherited})().native_streams() is not None


def test_no_stream_table_without_the_capsules_or_their_signatures(monkeypatch: pytest.MonkeyPatch) -> None:
    from aml_cuda import streams

    def missing(names: object) -> dict[str, tuple[int, str]]:
        raise AMLNotSupported("cuda.bindings.cyruntime does not export cudaEventQuery")

    monkeypatch.setattr(streams, "cyruntime_functions", missing)
    assert CudaRuntime().native_streams() is None
    monkeypatch.undo()
    changed = dict(streams.STREAM_SIGNATURES, cudaEventRecord="cudaError_t (cudaEvent_t)")
    monkeypatch.setattr(streams, "STREAM_SIGNATURES", changed)
    assert CudaRuntime().native_streams() is None


@pytest.mark.skipif(gpu_available(), reason="needs a machine without a usable CUDA driver")
def test_a_failing_stream_call_raises_what_the_python_path_raises() -> None:
    """cudaStreamSynchronize through the capsule, without a driver, fails as the Python
    binding does, through the same table (the kernel's synchronize of a stream)."""
    rt = CudaRuntime()
    table = rt.native_streams()
    assert table is not None
    with pytest.raises(AMLError) as python_path:
        rt.stream_synchronize(0)
    with pytest.raises(AMLError) as compiled:
        table._synchronize(0)
    assert type(compiled.value) is type(python_path.value)
    assert compiled.value.native == python_path.value.native
    assert compiled.value.native is not None
    assert compiled.value.native.function == "cudaStreamSynchronize"


@pytest.mark.gpu
def test_a_pool_over_a_device_area_has_the_stream_calls_in_c() -> None:
    import aml_cuda

    import aml_core

    # one block a slab: the plain request finds no other block, so it takes the stream's
    with aml_cuda.create(0, 0) as area, aml_core.pool(area, small_slab=4096, small_max=4096) as pool:
        streams = pool._kernel.streams
        assert streams is not None
        assert not streams.needs_gil
        s = aml_cuda.stream(non_blocking=True)
        try:
            first = pool.mmap(4096, stream=s)
            ptr = first.ptr
            pool.munmap(first)
            assert pool._kernel.stream_cached() == {(s.handle, 4096): [ptr]}
            assert pool._kernel.event is None
            buf = pool.mmap(4096)  # a plain request after a stream request: an event query
            assert buf.ptr == ptr  # the stream's block, back in host order
            assert pool._kernel.event is not None  # made by the query, where no hand-over ran
            assert pool._kernel.stream_cached() == {}
            pool.munmap(buf)
        finally:
            s.close()
