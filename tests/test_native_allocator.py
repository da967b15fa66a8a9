"""The compiled allocation path: aml_core._buffer.NativeAllocator, installed by GpuArea
from its runtime's ``native_allocator()``, and run by AreaBase.mmap/munmap in C.

The runtime here is aml_core's compiled do-nothing allocator (``_noop_functions``: fake
addresses, a live count and fault injection), called through ctypes by the Python
``_``-methods and through the C pointers by the compiled path, so both paths make the
same native calls, as a real backend's do."""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest

from aml_core._buffer import NativeAllocator, _noop_control, _noop_functions
from aml_core.buffer import DLDeviceType
from aml_core.errors import (
    AMLBusyError,
    AMLError,
    AMLFailure,
    AMLMemoryError,
    AMLValueError,
    ErrorCode,
    ErrorTable,
)
from aml_core.gpu import GpuArea, GpuFlags
from aml_core.gpu.area import GpuAllocation
from aml_core.gpu.flags import AllocMode
from aml_core.gpu.runtime import (
    AllocationOps,
    ManagedOps,
    PointerAttributes,
    Runtime,
    RuntimeTraits,
    replaces_native,
)
from aml_core.specs import DeviceInfo

TRAITS = RuntimeTraits(
    name="noop",
    dl_device=DLDeviceType.CUDA,
    dl_host=DLDeviceType.CUDA_HOST,
    dl_managed=DLDeviceType.CUDA_MANAGED,
    managed_granule=4096,
)
FN = _noop_functions()
_get = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))(FN["get_device"])
_malloc = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t)(FN["malloc"])
_malloc_flags = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint
)(FN["malloc_managed"])
_free = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(FN["free"])
NAMES = {
    "get_device": "noopGetDevice",
    "malloc": "noopMalloc",
    "free": "noopFree",
    "malloc_managed": "noopMallocManaged",
    "host_alloc": "noopHostAlloc",
    "free_host": "noopFreeHost",
}
#: 2 -> ENOMEM, 1 -> EINVAL, 16 -> EBUSY; anything else FAILURE.
ERRORS = ErrorTable("noop", {2: ErrorCode.ENOMEM, 1: ErrorCode.EINVAL, 16: ErrorCode.EBUSY})


class NoOpRuntime(Runtime, AllocationOps, ManagedOps):
    """One device; allocation through the do-nothing C allocator, by ctypes."""

    def __init__(self, *, native: bool = True) -> None:
        self.traits = TRAITS
        self.errors = ERRORS
        self.native = native
        self.current = 0
        self.fails: list[tuple[str, int, tuple[Any, ...]]] = []

    def native_allocator(self) -> NativeAllocator | None:
        if not self.native:
            return None
        return NativeAllocator(
            **FN, fail=self._native_fail, names=NAMES, attach_host=2, attach_global=1, host_portable=1
        )

    def _native_fail(self, function: str, code: int, *args: Any) -> NoReturn:
        self.fails.append((function, code, args))
        raise self.errors.error(function, code)

    def _check(self, name: str, rc: int) -> None:
        if rc:
            raise self.errors.error(NAMES[name], rc)

    def _out(self, name: str, rc: int, out: ctypes.c_void_p) -> int:
        self._check(name, rc)
        return int(out.value or 0)

    def device_count(self) -> int:
        return 2

    def get_device(self) -> int:
        d = ctypes.c_int(-1)
        self._check("get_device", _get(ctypes.byref(d)))
        return self.current

    def synchronize(self) -> None:
        pass

    def _set_device(self, device: int) -> None:
        self.current = device

    def _device_info(self, device: int) -> DeviceInfo:
        return DeviceInfo(index=device, name="noop")

    def _malloc(self, size: int) -> int:
        p = ctypes.c_void_p()
        return self._out("malloc", _malloc(ctypes.byref(p), size), p)

    def _free(self, ptr: int) -> None:
        self._check("free", _free(ptr))

    def _host_alloc(self, size: int, portable: bool, mapped: bool) -> int:
        p = ctypes.c_void_p()
        return self._out("host_alloc", _malloc_flags(ctypes.byref(p), size, int(portable)), p)

    def _free_host(self, ptr: int) -> None:
        self._check("free_host", _free(ptr))

    def _malloc_managed(self, size: int, attach_global: bool) -> int:
        p = ctypes.c_void_p()
        return self._out("malloc_managed", _malloc_flags(ctypes.byref(p), size, 1 if attach_global else 2), p)

    def _host_register(self, ptr: int, size: int, portable: bool, mapped: bool) -> None:
        raise NotImplementedError

    def _host_unregister(self, ptr: int) -> None:
        raise NotImplementedError

    def _host_device_pointer(self, ptr: int) -> int:
        return ptr

    def _pointer_attributes(self, ptr: int) -> PointerAttributes:
        raise NotImplementedError

    def _memcpy(self, dst: int, src: int, size: int) -> None:
        raise NotImplementedError

    def _memset(self, ptr: int, value: int, size: int) -> None:
        raise NotImplementedError

    def _mem_prefetch(self, ptr: int, size: int, device: int, stream: int) -> None:
        raise NotImplementedError

    def _mem_advise(self, ptr: int, size: int, advice: int, device: int) -> None:
        raise NotImplementedError

    def _mem_range_attributes(self, ptr: int, size: int, requests: Any) -> list[list[int]]:
        raise NotImplementedError

    def _stream_attach(self, stream: int, ptr: int, size: int, flags: int) -> None:
        raise NotImplementedError


class Spy(GpuArea):
    """Counts the Python path's calls."""

    def __init__(self, *args: Any) -> None:
        self.python_calls: list[str] = []
        super().__init__(*args)

    def _allocate(self, size: int, options: Any) -> Any:
        self.python_calls.append("allocate")
        return super()._allocate(size, options)

    def _free(self, buffer: Any) -> None:
        self.python_calls.append("free")
        super()._free(buffer)


def live() -> int:
    return _noop_control()


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    _noop_control(0, 0)
    before = live()
    yield
    _noop_control(0, 0)
    assert live() == before


def test_mmap_and_munmap_run_compiled() -> None:
    area = Spy(NoOpRuntime(), 0, GpuFlags.DEFAULT)
    assert area._native_allocator is not None
    before = live()
    buf = area.mmap(1000)
    assert live() == before + 1
    assert (buf.size, buf.device, buf.host_accessible) == (1000, 0, False)
    assert buf.__dlpack_device__() == (DLDeviceType.CUDA, 0)
    assert buf.native == GpuAllocation(AllocMode.DEVICE, 1000)
    assert buf.native is area._records[1000]
    assert buf.device_ptr == buf.ptr
    assert area.stats.live_mappings == 1
    area.munmap(buf.ptr, 1000)
    assert buf.freed
    assert live() == before
    assert area.python_calls == []
    assert (area.stats.total_maps, area.stats.total_unmaps) == (1, 1)
    area.close()


def test_managed_memory_in_granules_and_host_memory() -> None:
    managed = Spy(NoOpRuntime(), -1, GpuFlags.ALLOC_UNIFIED)
    buf = managed.mmap(5000)
    assert buf.native == GpuAllocation(AllocMode.MANAGED, 8192)
    assert (buf.size, buf.host_accessible) == (5000, True)
    assert buf.__dlpack_device__() == (DLDeviceType.CUDA_MANAGED, 0)
    managed.munmap(buf)
    host = Spy(NoOpRuntime(), 0, GpuFlags.ALLOC_HOST)
    hbuf = host.mmap(100)
    assert hbuf.native == GpuAllocation(AllocMode.HOST, 100)
    assert hbuf.__dlpack_device__() == (DLDeviceType.CUDA_HOST, 0)
    host.munmap(hbuf)
    assert managed.python_calls == host.python_calls == []


def test_the_python_path_runs_for_options_and_other_devices() -> None:
    rt = NoOpRuntime()
    area = Spy(rt, 1, GpuFlags.DEFAULT)  # the current device is 0
    buf = area.mmap(64)
    assert buf.device == 1
    assert rt.current == 0
    area.munmap(buf)
    assert area.python_calls == ["allocate", "free"]
    area.python_calls.clear()
    other = Spy(rt, 0, GpuFlags.DEFAULT)
    buf = other.mmap(64, {"device": 0})
    other.munmap(buf)
    assert other.python_calls == ["allocate", "free"]


def test_a_runtime_without_a_table_keeps_the_python_path() -> None:
    area = Spy(NoOpRuntime(native=False), 0, GpuFlags.DEFAULT)
    assert area._native_allocator is None
    area.munmap(area.mmap(64))
    assert area.python_calls == ["allocate", "free"]


@pytest.mark.parametrize(
    ("skip", "code", "cls", "function", "args"),
    [
        (0, 2, AMLMemoryError, "noopGetDevice", ()),
        (0, 16, AMLBusyError, "noopGetDevice", ()),
        (1, 2, AMLMemoryError, "noopMalloc", (64,)),
        (1, 1, AMLValueError, "noopMalloc", (64,)),
        (1, 999, AMLFailure, "noopMalloc", (64,)),
    ],
)
def test_mmap_failures_raise_through_the_hook(
    skip: int, code: int, cls: type[AMLError], function: str, args: tuple[int, ...]
) -> None:
    """get_device is the first call, the allocation the second."""
    rt = NoOpRuntime()
    area = GpuArea(rt, 0, GpuFlags.DEFAULT)
    _noop_control(code, 1, skip)
    with pytest.raises(cls) as info:
        area.mmap(64)
    assert info.value.native is not None
    assert (info.value.native.function, info.value.native.code) == (function, code)
    assert rt.fails == [(function, code, args)]
    assert area.stats.live_mappings == 0
    area.munmap(area.mmap(64))  # the next one succeeds
    area.close()


def test_a_failed_native_free_keeps_the_buffer() -> None:
    rt = NoOpRuntime()
    area = Spy(rt, 0, GpuFlags.DEFAULT)
    buf = area.mmap(64)
    _noop_control(999, 1)
    with pytest.raises(AMLFailure) as info:
        area.munmap(buf)
    assert info.value.native is not None
    assert info.value.native.function == "noopFree"
    assert not buf.freed
    assert area.buffers() == (buf,)
    assert (area.stats.total_unmaps, area.stats.bytes_in_use) == (0, 64)
    area.munmap(buf)
    assert buf.freed
    assert area.python_calls == []


def test_a_viewed_buffer_is_busy() -> None:
    area = GpuArea(NoOpRuntime(), 0, GpuFlags.ALLOC_UNIFIED)
    buf = area.mmap(64)
    capsule = buf.__dlpack__()
    with pytest.raises(AMLBusyError):
        area.munmap(buf)
    del capsule
    area.munmap(buf)
    assert buf.freed


def test_buffers_with_an_ipc_export_are_freed_by_free() -> None:
    """The area frees a buffer listed in its exports through _free, which closes them."""
    area = Spy(NoOpRuntime(), 0, GpuFlags.DEFAULT)
    buf = area.mmap(64)
    closed: list[int] = []

    class Export:
        def close(self) -> None:
            closed.append(buf.ptr)

    export = Export()
    area._exports[buf.ptr] = [weakref.ref(export)]  # type: ignore[list-item]
    area.munmap(buf)
    assert closed == [buf.ptr]
    assert area.python_calls == ["free"]
    assert area._exports == {}


def test_close_and_finalizers_free_compiled_buffers() -> None:
    area = Spy(NoOpRuntime(), 0, GpuFlags.DEFAULT)
    before = live()
    kept = area.mmap(64)
    other = area.mmap(128)
    view = kept.__dlpack__()
    with pytest.warns(ResourceWarning):
        area.close()
    assert live() == before + 1  # the viewed one waits for its views
    del view, kept, other
    import gc

    gc.collect()
    assert live() == before
    assert area.python_calls == ["free", "free"]


def test_a_closed_area_refuses_the_compiled_path() -> None:
    area = GpuArea(NoOpRuntime(), 0, GpuFlags.DEFAULT)
    area.close()
    with pytest.raises(AMLValueError):
        area.mmap(64)


def test_the_fail_hook_must_raise() -> None:
    def returns(*args: object) -> None:
        return None

    native = NativeAllocator(**FN, fail=returns, names=NAMES)  # type: ignore[arg-type]
    _noop_control(7, 1)
    with pytest.raises(SystemError):
        native.get_device()


def test_the_table_is_checked() -> None:
    with pytest.raises(ValueError, match="NULL"):
        NativeAllocator(get_device=0, malloc=FN["malloc"], free=FN["free"], fail=print, names=NAMES)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="together"):
        NativeAllocator(
            get_device=FN["get_device"],
            malloc=FN["malloc"],
            free=FN["free"],
            host_alloc=FN["host_alloc"],
            fail=print,
            names=NAMES,  # type: ignore[arg-type]
        )
    partial = NativeAllocator(
        get_device=FN["get_device"],
        malloc=FN["malloc"],
        free=FN["free"],
        fail=print,
        names=NAMES,  # type: ignore[arg-type]
    )
    assert (partial.has("malloc"), partial.has("malloc_managed"), partial.has("host_alloc")) == (
        True,
        False,
        False,
    )
    area = GpuArea(NoOpRuntime(native=False), 0, GpuFlags.ALLOC_UNIFIED)
    with pytest.raises(ValueError, match="malloc_managed"):
        area._set_native(partial, "managed", records={}, record=area._record, slow_free={})
    with pytest.raises(ValueError, match="unknown native mode"):
        area._set_native(partial, "vmm", records={}, record=area._record, slow_free={})
    area.close()


def test_a_subclass_replacing_an_allocation_method_offers_no_table() -> None:
    class Recording(NoOpRuntime):
        def _malloc(self, size: int) -> int:
            return super()._malloc(size)

    assert replaces_native(Recording(), NoOpRuntime)
    assert not replaces_native(NoOpRuntime(), NoOpRuntime)


def test_threads_on_the_compiled_path_keep_exact_counts() -> None:
    """The native calls run without the GIL; the bookkeeping stays atomic."""
    import sys
    import threading

    area = GpuArea(NoOpRuntime(), 0, GpuFlags.DEFAULT)
    threads, rounds = 8, 500
    errors: list[BaseException] = []
    before = live()

    def work() -> None:
        try:
            mine = []
            for i in range(rounds):
                mine.append(area.mmap(64 + i))
                if i % 3:
                    area.munmap(mine.pop(0))
            for buf in mine:
                area.munmap(buf)
        except BaseException as exc:  # collected for the main thread
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    st = area.stats
    assert (st.live_mappings, st.bytes_in_use) == (0, 0)
    assert st.total_maps == st.total_unmaps == threads * rounds
    assert live() == before
    area.close()


# -- garbage collection -----------------------------------------------------------------------
def test_a_dropped_buffer_is_freed_in_c() -> None:
    """A compiled-path buffer dropped without munmap is freed by the compiled free (as
    munmap would), with no Python frame of the area."""
    area = Spy(NoOpRuntime(), 0, GpuFlags.DEFAULT)
    before = live()
    buf = area.mmap(64)
    managed = GpuArea(NoOpRuntime(), 0, GpuFlags.ALLOC_UNIFIED)
    mbuf = managed.mmap(100)
    assert live() == before + 2
    del buf, mbuf
    assert live() == before
    assert area.python_calls == []
    assert area.stats.live_mappings == managed.stats.live_mappings == 0
    assert area.stats.total_unmaps == 1
    managed.close()
    area.close()


def test_a_compiled_free_does_not_wait_for_the_area() -> None:
    """Inside the area's own section a dropped compiled-path buffer is still freed at once
    (in C: it never re-enters or waits); a Python-path one waits for the section's end."""
    area = Spy(NoOpRuntime(), 0, GpuFlags.DEFAULT)
    before = live()
    compiled = area.mmap(64)
    python = area.mmap(64, {"device": 1})
    with area._lock:
        del compiled
        assert live() == before + 1
        del python
        assert live() == before + 1
        assert area.python_calls == ["allocate"]
    assert live() == before
    assert area.python_calls == ["allocate", "free"]
    area.close()


def test_a_dropped_python_path_buffer_is_freed_by_free() -> None:
    area = Spy(NoOpRuntime(), 0, GpuFlags.DEFAULT)
    before = live()
    buf = area.mmap(64, {"device": 1})  # another device: the Python path
    del buf
    assert live() == before
    assert area.python_calls == ["allocate", "free"]
    area.close()


def test_a_failed_compiled_free_of_a_dropped_buffer_is_reported_and_kept() -> None:
    from aml_core.testing.lifetime import catch_unraisable

    rt = NoOpRuntime()
    area = Spy(rt, 0, GpuFlags.DEFAULT)
    before = live()
    buf = area.mmap(64)
    ptr = buf.ptr
    _noop_control(999, 1)
    with catch_unraisable() as caught:
        del buf
    assert [type(r.exc) for r in caught] == [AMLFailure]
    assert caught[0].exc is not None
    native = getattr(caught[0].exc, "native", None)
    assert native is not None
    assert native.function == "noopFree"
    del caught
    assert live() == before + 1
    assert [b.ptr for b in area.buffers()] == [ptr]  # tracked, held by the area
    area.munmap(ptr)  # the retry
    assert live() == before
    area.close()


def test_compiled_buffers_dropped_from_many_threads() -> None:
    from aml_core.testing.lifetime import drop_hammer

    area = GpuArea(NoOpRuntime(), 0, GpuFlags.DEFAULT)
    before = live()
    drop_hammer(area, threads=8, rounds=200)
    assert live() == before
    area.close()


@pytest.mark.parametrize("flags", [GpuFlags.DEFAULT, GpuFlags.ALLOC_UNIFIED, GpuFlags.ALLOC_HOST])
def test_a_failed_buffer_construction_frees_the_native_allocation(
    flags: GpuFlags, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled mmap allocated, then making the buffer failed: the allocation is
    freed (in its mode's free), the error raised, nothing tracked; the next mmap works."""
    from aml_core import Buffer

    class Exploding(Buffer):
        def __new__(cls, *args: Any, **kwargs: Any) -> Exploding:
            raise RuntimeError("no buffer (injected)")

    area = Spy(NoOpRuntime(), 0, flags)
    before = live()
    monkeypatch.setattr(Spy, "buffer_type", Exploding, raising=False)
    with pytest.raises(RuntimeError, match="injected"):
        area.mmap(4096)
    monkeypatch.undo()
    assert live() == before, "the native allocation of the failed mmap leaked"
    assert (area.stats.live_mappings, area.stats.total_maps) == (0, 0)
    assert area.python_calls == []  # the compiled path failed, and cleaned up
    area.munmap(area.mmap(4096))
    assert live() == before
    area.close()


@pytest.mark.parametrize(("size", "allocated"), [(1, 4096), (4096, 4096), (4097, 8192), (8192, 8192)])
def test_managed_memory_is_allocated_in_whole_granules(size: int, allocated: int) -> None:
    """A managed allocation is the size rounded up to the granule (4096 here): a size of
    whole granules is allocated as it is, one byte more takes one more granule."""
    area = Spy(NoOpRuntime(), -1, GpuFlags.ALLOC_UNIFIED)
    buf = area.mmap(size)
    assert buf.native == GpuAllocation(AllocMode.MANAGED, allocated)
    assert buf.size == size
    area.munmap(buf)
    assert area.python_calls == []
    area.close()
