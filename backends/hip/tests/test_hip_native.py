"""The compiled allocation path (aml_core._buffer.NativeAllocator) over the driver double:
HIP's areas install the library's hipGetDevice/hipMalloc/hipFree/... as C function
pointers, and the double's fault injection must give the same AML errors, with the
same native cause, as the ctypes path, with nothing left live."""

from __future__ import annotations

from collections.abc import Callable

import aml_hip
import pytest
from aml_hip import HipFlags
from hip_helpers import HipDouble

from aml_core.errors import AMLBusyError, AMLError, AMLFailure, AMLMemoryError, AMLNotSupported, AMLValueError

F = HipFlags


def test_the_runtime_offers_the_librarys_functions(hip: HipDouble) -> None:
    native = aml_hip.get_runtime().native_allocator()
    assert native is not None
    lib = aml_hip.get_runtime().lib
    assert native.names == {
        "get_device": "hipGetDevice",
        "malloc": "hipMalloc",
        "free": "hipFree",
        "malloc_managed": "hipMallocManaged",
        "host_alloc": lib.host_alloc,
        "free_host": lib.host_free,
    }
    assert native.get_device() == aml_hip.get_runtime().get_device()


@pytest.mark.parametrize(
    ("flags", "installed"),
    [
        (F.DEFAULT, True),
        (F.ALLOC_UNIFIED, True),
        (F.ALLOC_HOST, True),
        (F.ALLOC_HOST | F.ALLOC_GLOBAL, True),
        (F.ALLOC_HOST | F.ALLOC_MAPPED, False),
        (F.ALLOC_MAPPED, False),
    ],
)
def test_areas_install_it_for_their_mode(
    hip: HipDouble, areas: Callable[..., aml_hip.HipArea], flags: int, installed: bool
) -> None:
    area = areas(0, flags)
    assert (area._native_allocator is not None) is installed


@pytest.mark.parametrize(
    ("flags", "function", "flag_arg"),
    [
        (F.DEFAULT, "hipMalloc", None),
        (F.ALLOC_UNIFIED, "hipMallocManaged", 2),  # hipMemAttachHost
        (F.ALLOC_UNIFIED | F.ALLOC_GLOBAL, "hipMallocManaged", 1),  # hipMemAttachGlobal
    ],
)
def test_compiled_mmap_makes_the_native_call(
    hip: HipDouble, areas: Callable[..., aml_hip.HipArea], flags: int, function: str, flag_arg: int | None
) -> None:
    area = areas(0, flags)
    before = hip.calls(function)
    buf = area.mmap(5000)
    assert hip.calls(function) == before + 1
    args = hip.last(function)
    assert args is not None
    if flag_arg is not None:
        assert args[-1] == flag_arg
    assert buf.device == 0
    area.munmap(buf)
    assert buf.freed
    assert hip.calls("hipFree") >= 1


#: (flags, function injected, error, AML class)
MMAP_FAULTS = [
    (F.DEFAULT, "hipGetDevice", 100, AMLNotSupported),
    (F.DEFAULT, "hipGetDevice", 3, AMLFailure),
    (F.DEFAULT, "hipMalloc", 2, AMLMemoryError),
    (F.DEFAULT, "hipMalloc", 1, AMLValueError),
    (F.DEFAULT, "hipMalloc", 12345, AMLFailure),
    (F.ALLOC_UNIFIED, "hipMallocManaged", 2, AMLMemoryError),
    (F.ALLOC_HOST, "hipHostMalloc", 216, AMLBusyError),
]


@pytest.mark.parametrize(("flags", "function", "error", "cls"), MMAP_FAULTS)
def test_mmap_faults_through_the_compiled_path(
    hip: HipDouble,
    areas: Callable[..., aml_hip.HipArea],
    flags: int,
    function: str,
    error: int,
    cls: type[AMLError],
) -> None:
    area = areas(0, flags)
    assert area._native_allocator is not None
    if function == "hipHostMalloc":
        function = aml_hip.get_runtime().lib.host_alloc
    hip.inject(function, error)
    with pytest.raises(cls) as info:
        area.mmap(4096)
    assert info.value.native is not None
    assert (info.value.native.function, info.value.native.code) == (function, error)
    assert area.stats.live_mappings == 0
    assert all(n == 0 for n in hip.live().values())
    area.munmap(area.mmap(4096))  # the next call succeeds
    assert all(n == 0 for n in hip.live().values())


@pytest.mark.parametrize(
    ("flags", "function"),
    [(F.DEFAULT, "hipFree"), (F.ALLOC_UNIFIED, "hipFree"), (F.ALLOC_HOST, "hipHostFree")],
)
@pytest.mark.parametrize(("error", "cls"), [(1, AMLValueError), (999, AMLFailure)])
def test_munmap_faults_through_the_compiled_path(
    hip: HipDouble,
    areas: Callable[..., aml_hip.HipArea],
    flags: int,
    function: str,
    error: int,
    cls: type[AMLError],
) -> None:
    """A failed native free keeps the buffer tracked and live; a retry frees it."""
    area = areas(0, flags)
    if function == "hipHostFree":
        function = aml_hip.get_runtime().lib.host_free
    buf = area.mmap(4096)
    hip.inject(function, error)
    with pytest.raises(cls) as info:
        area.munmap(buf)
    assert info.value.native is not None
    assert (info.value.native.function, info.value.native.code) == (function, error)
    assert not buf.freed
    assert area.stats.live_mappings == 1
    assert sum(hip.live().values()) == 1
    area.munmap(buf)
    assert buf.freed
    assert all(n == 0 for n in hip.live().values())


def test_another_device_takes_the_python_path(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    """The compiled path does not select devices: an area of another device than the
    current one selects it and restores the caller's through _allocate."""
    hip.need_devices(2)
    aml_hip.get_runtime().set_device(0)
    area = areas(1, F.DEFAULT)
    sets = hip.calls("hipSetDevice")
    buf = area.mmap(4096)
    assert hip.calls("hipSetDevice") == sets + 2
    assert buf.device == 1
    assert aml_hip.get_runtime().get_device() == 0
    area.munmap(buf)
    assert all(n == 0 for n in hip.live().values())


def test_exported_buffers_are_freed_with_their_exports(
    hip: HipDouble, areas: Callable[..., aml_hip.HipArea]
) -> None:
    area = areas(0, F.DEFAULT)
    buf = area.mmap(4096)
    export = area.ipc_export(buf)
    area.munmap(buf)
    assert export._closed  # closed by _free, not only seen through the freed buffer
    assert area._exports == {}
    assert all(n == 0 for n in hip.live().values())


def test_close_frees_compiled_buffers(hip: HipDouble) -> None:
    area = aml_hip.create(0, F.DEFAULT)
    bufs = [area.mmap(4096) for _ in range(3)]
    assert sum(hip.live().values()) == 3
    area.close()
    assert all(b.freed for b in bufs)
    assert all(n == 0 for n in hip.live().values())
