"""Self-check of the HIP driver double (host mode; forward mode where CUDA and a GPU exist).

These tests drive ``libamdhip64`` built from ``double.c`` directly through ctypes, so that the
aml-hip backend tests can rely on it: allocation bookkeeping, IPC and VMM sharing between real
processes, managed-memory advice, version switches, fault injection and leak accounting.
"""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hip_double import DoubleControl, build_double, find_cuda, hip_version

from tests.support.doubles import DoubleBuildError

V52 = hip_version(5, 2, 21153)
V55 = hip_version(5, 5)
V60 = hip_version(6, 0)
V61 = hip_version(6, 1)
V62 = hip_version(6, 2)
V63 = hip_version(6, 3)
V70 = hip_version(7, 0)

MiB = 1 << 20
GRAN = 2 * MiB

# hipError_t
SUCCESS, INVALID_VALUE, OUT_OF_MEMORY = 0, 1, 2
INVALID_MEMCPY_DIRECTION = 21
NO_DEVICE, INVALID_DEVICE = 100, 101
INVALID_HANDLE = 400
NOT_READY = 600
CONTEXT_IS_DESTROYED = 709
ALREADY_REGISTERED, NOT_REGISTERED = 712, 713
NOT_SUPPORTED = 801

VOIDP = ctypes.c_void_p
SIZE = ctypes.c_size_t
INT = ctypes.c_int
UINT = ctypes.c_uint
ULL = ctypes.c_ulonglong


class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class PointerAttributes(ctypes.Structure):
    _fields_ = [
        ("type", INT),
        ("device", INT),
        ("devicePointer", VOIDP),
        ("hostPointer", VOIDP),
        ("isManaged", INT),
        ("allocationFlags", UINT),
    ]


class MemLocation(ctypes.Structure):
    _fields_ = [("type", INT), ("id", INT)]


class AccessDesc(ctypes.Structure):
    _fields_ = [("location", MemLocation), ("flags", INT)]


def alloc_prop(version: int, *, device: int = 0, handle_type: int = 1, alloc_type: int = 1) -> bytes:
    """hipMemAllocationProp in the layout of ``version`` (docs/native-abi.md#hip-virtual-memory)."""
    if version < hip_version(5, 3):
        return struct.pack("<B3xiiiiH2x8s", 0, 1, device, handle_type, alloc_type, 0, b"\0" * 8)
    return struct.pack("<iiii8sBBH4x", alloc_type, handle_type, 1, device, b"\0" * 8, 0, 0, 0)


_SIGNATURES: dict[str, list[type]] = {
    "hipInit": [UINT],
    "hipRuntimeGetVersion": [ctypes.POINTER(INT)],
    "hipDriverGetVersion": [ctypes.POINTER(INT)],
    "hipGetDeviceCount": [ctypes.POINTER(INT)],
    "hipSetDevice": [INT],
    "hipGetDevice": [ctypes.POINTER(INT)],
    "hipDeviceGetAttribute": [ctypes.POINTER(INT), INT, INT],
    "hipDeviceGetName": [ctypes.c_char_p, INT, INT],
    "hipDeviceTotalMem": [ctypes.POINTER(SIZE), INT],
    "hipMemGetInfo": [ctypes.POINTER(SIZE), ctypes.POINTER(SIZE)],
    "hipDeviceSynchronize": [],
    "hipMalloc": [ctypes.POINTER(VOIDP), SIZE],
    "hipFree": [VOIDP],
    "hipHostMalloc": [ctypes.POINTER(VOIDP), SIZE, UINT],
    "hipExtHostAlloc": [ctypes.POINTER(VOIDP), SIZE, UINT],
    "hipHostAlloc": [ctypes.POINTER(VOIDP), SIZE, UINT],
    "hipHostFree": [VOIDP],
    "hipFreeHost": [VOIDP],
    "hipHostRegister": [VOIDP, SIZE, UINT],
    "hipHostUnregister": [VOIDP],
    "hipHostGetDevicePointer": [ctypes.POINTER(VOIDP), VOIDP, UINT],
    "hipHostGetFlags": [ctypes.POINTER(UINT), VOIDP],
    "hipMallocManaged": [ctypes.POINTER(VOIDP), SIZE, UINT],
    "hipMemAdvise": [VOIDP, SIZE, INT, INT],
    "hipMemPrefetchAsync": [VOIDP, SIZE, INT, VOIDP],
    "hipMemRangeGetAttribute": [VOIDP, SIZE, INT, VOIDP, SIZE],
    "hipMemRangeGetAttributes": [
        ctypes.POINTER(VOIDP),
        ctypes.POINTER(SIZE),
        ctypes.POINTER(INT),
        SIZE,
        VOIDP,
        SIZE,
    ],
    "hipStreamAttachMemAsync": [VOIDP, VOIDP, SIZE, UINT],
    "hipStreamCreate": [ctypes.POINTER(VOIDP)],
    "hipStreamCreateWithFlags": [ctypes.POINTER(VOIDP), UINT],
    "hipStreamDestroy": [VOIDP],
    "hipStreamSynchronize": [VOIDP],
    "hipMallocAsync": [ctypes.POINTER(VOIDP), SIZE, VOIDP],
    "hipFreeAsync": [VOIDP, VOIDP],
    "hipEventCreateWithFlags": [ctypes.POINTER(VOIDP), UINT],
    "hipEventDestroy": [VOIDP],
    "hipEventRecord": [VOIDP, VOIDP],
    "hipEventQuery": [VOIDP],
    "hipEventSynchronize": [VOIDP],
    "hipStreamWaitEvent": [VOIDP, VOIDP, UINT],
    "hipMemcpy": [VOIDP, VOIDP, SIZE, INT],
    "hipMemset": [VOIDP, INT, SIZE],
    "hipIpcGetMemHandle": [ctypes.POINTER(IpcHandle), VOIDP],
    "hipIpcOpenMemHandle": [ctypes.POINTER(VOIDP), IpcHandle, UINT],
    "hipIpcCloseMemHandle": [VOIDP],
    "hipPointerGetAttributes": [ctypes.POINTER(PointerAttributes), VOIDP],
    "hipGetLastError": [],
    "hipPeekAtLastError": [],
    "hipMemAddressReserve": [ctypes.POINTER(VOIDP), SIZE, SIZE, VOIDP, ULL],
    "hipMemAddressFree": [VOIDP, SIZE],
    "hipMemCreate": [ctypes.POINTER(VOIDP), SIZE, ctypes.c_char_p, ULL],
    "hipMemRelease": [VOIDP],
    "hipMemMap": [VOIDP, SIZE, SIZE, VOIDP, ULL],
    "hipMemUnmap": [VOIDP, SIZE],
    "hipMemSetAccess": [VOIDP, SIZE, ctypes.POINTER(AccessDesc), SIZE],
    "hipMemGetAccess": [ctypes.POINTER(ULL), ctypes.POINTER(MemLocation), VOIDP],
    "hipMemExportToShareableHandle": [VOIDP, VOIDP, INT, ULL],
    "hipMemImportFromShareableHandle": [ctypes.POINTER(VOIDP), VOIDP, INT],
    "hipMemRetainAllocationHandle": [ctypes.POINTER(VOIDP), VOIDP],
    "hipMemGetAllocationPropertiesFromHandle": [ctypes.c_char_p, VOIDP],
    "hipMemGetAllocationGranularity": [ctypes.POINTER(SIZE), ctypes.c_char_p, INT],
}


class Hip:
    """Just enough ctypes binding of the double to exercise it."""

    def __init__(self, path: Path) -> None:
        self.lib = ctypes.CDLL(str(path))
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(self.lib, name, None)
            if fn is not None:
                fn.argtypes = argtypes
                fn.restype = INT
        for name in ("hipGetErrorName", "hipGetErrorString"):
            fn = getattr(self.lib, name)
            fn.argtypes = [INT]
            fn.restype = ctypes.c_char_p

    def __getattr__(self, name: str) -> Any:
        return getattr(self.lib, name)

    # small conveniences -----------------------------------------------------------------
    def malloc(self, size: int) -> int:
        p = VOIDP()
        assert self.lib.hipMalloc(ctypes.byref(p), size) == SUCCESS
        assert p.value
        return p.value

    def managed(self, size: int, flags: int = 1) -> int:
        p = VOIDP()
        assert self.lib.hipMallocManaged(ctypes.byref(p), size, flags) == SUCCESS
        assert p.value
        return p.value

    def host_malloc(self, size: int, flags: int = 0) -> int:
        p = VOIDP()
        assert self.lib.hipHostMalloc(ctypes.byref(p), size, flags) == SUCCESS
        assert p.value
        return p.value

    def attrs(self, ptr: int) -> tuple[int, PointerAttributes]:
        a = PointerAttributes()
        rc = self.lib.hipPointerGetAttributes(ctypes.byref(a), ptr)
        return rc, a

    def range_attr(self, attr: int, ptr: int, count: int, n: int = 1) -> tuple[int, list[int]]:
        data = (INT * n)()
        rc = self.lib.hipMemRangeGetAttribute(data, 4 * n, attr, ptr, count)
        return rc, list(data)


@pytest.fixture(scope="module")
def lib_path() -> Path:
    try:
        return build_double()
    except DoubleBuildError as exc:  # pragma: no cover - CI has gcc
        pytest.skip(str(exc))


@pytest.fixture
def ctl(lib_path: Path) -> Iterator[DoubleControl]:
    control = DoubleControl(lib_path)
    control.reset()
    yield control
    control.reset()
    for kind in ("device", "host", "managed", "registered", "ipc", "vmm_handle", "vmm_reservation", "stream"):
        assert control.live(kind) == 0


@pytest.fixture
def hip(lib_path: Path, ctl: DoubleControl) -> Hip:
    return Hip(lib_path)


def assert_no_leaks(ctl: DoubleControl) -> None:
    for kind in (
        "device",
        "host",
        "managed",
        "registered",
        "ipc",
        "vmm_handle",
        "vmm_reservation",
        "vmm_mapping",
        "stream",
        "event",
        "async",
        "free_pending",
    ):
        assert ctl.live(kind) == 0, kind


def run_child(lib_path: Path, script: str, *args: str, env: dict[str, str] | None = None) -> str:
    full_env = dict(os.environ)
    full_env.pop("HIPDOUBLE_FAULTS", None)
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(lib_path), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=full_env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip()


# ------------------------------------------------------------------------------------------
# build
# ------------------------------------------------------------------------------------------


def test_build_is_cached_and_named_after_the_major(lib_path: Path, tmp_path: Path) -> None:
    assert lib_path.name == "libamdhip64.so.6"
    assert build_double() == lib_path
    p5 = build_double(version=V52, outdir=tmp_path)
    assert p5 == tmp_path / "libamdhip64.so.5"
    lib5 = ctypes.CDLL(str(p5))
    assert not hasattr(lib5, "hipExtHostAlloc")  # new in 6.3
    lib5.hipRuntimeGetVersion.argtypes = [ctypes.POINTER(INT)]
    v = INT()
    assert lib5.hipRuntimeGetVersion(ctypes.byref(v)) == 0
    assert v.value == V52
    assert hasattr(ctypes.CDLL(str(lib_path)), "hipExtHostAlloc")
    with pytest.raises(ValueError, match="mode"):
        build_double(mode="cuda")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# device management and versions
# ------------------------------------------------------------------------------------------


def test_version_default_env_and_switch(hip: Hip, ctl: DoubleControl, lib_path: Path) -> None:
    v = INT()
    assert hip.hipRuntimeGetVersion(ctypes.byref(v)) == SUCCESS
    assert v.value == V62 == ctl.version
    ctl.set_version(V70)
    assert hip.hipDriverGetVersion(ctypes.byref(v)) == SUCCESS
    assert v.value == V70
    assert hip.hipRuntimeGetVersion(None) == INVALID_VALUE
    out = run_child(
        lib_path,
        """
        import ctypes, sys
        lib = ctypes.CDLL(sys.argv[1]); v = ctypes.c_int()
        print(lib.hipRuntimeGetVersion(ctypes.byref(v)), v.value)
        """,
        env={"HIPDOUBLE_VERSION": str(V52)},
    )
    assert out == f"0 {V52}"


def test_devices_current_device_per_thread_and_attributes(hip: Hip, ctl: DoubleControl) -> None:
    ctl.set_devices(3, 64 * MiB)
    n, d = INT(), INT()
    assert hip.hipGetDeviceCount(ctypes.byref(n)) == SUCCESS
    assert n.value == 3
    assert hip.hipGetDeviceCount(None) == INVALID_VALUE
    assert hip.hipSetDevice(3) == INVALID_DEVICE
    assert hip.hipSetDevice(-1) == INVALID_DEVICE
    assert hip.hipSetDevice(2) == SUCCESS
    assert hip.hipGetDevice(ctypes.byref(d)) == SUCCESS
    assert d.value == 2
    seen: list[int] = []

    def other() -> None:
        x = INT()
        hip.hipGetDevice(ctypes.byref(x))
        seen.append(x.value)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [0]  # the current device is per thread
    assert ctl.last_args("hipSetDevice") == (2,)

    total, free = SIZE(), SIZE()
    assert hip.hipDeviceTotalMem(ctypes.byref(total), 1) == SUCCESS
    assert total.value == 64 * MiB
    p = hip.malloc(MiB)  # on device 2
    assert hip.hipMemGetInfo(ctypes.byref(free), ctypes.byref(total)) == SUCCESS
    assert (free.value, total.value) == (63 * MiB, 64 * MiB)
    name = ctypes.create_string_buffer(64)
    assert hip.hipDeviceGetName(name, 64, 1) == SUCCESS
    assert name.value == b"HIP double device 1"
    assert hip.hipDeviceGetName(name, 0, 1) == INVALID_VALUE
    assert hip.hipDeviceGetName(None, 64, 1) == INVALID_VALUE

    val = INT()
    assert hip.hipDeviceGetAttribute(ctypes.byref(val), 24, 0) == SUCCESS  # ManagedMemory
    assert val.value == 1
    assert hip.hipDeviceGetAttribute(ctypes.byref(val), 89, 0) == SUCCESS  # VMM on 6.x
    assert hip.hipDeviceGetAttribute(ctypes.byref(val), 24, 5) == INVALID_DEVICE
    assert hip.hipDeviceGetAttribute(ctypes.byref(val), 123456, 0) == INVALID_VALUE
    ctl.set_attribute(24, 0)
    assert hip.hipDeviceGetAttribute(ctypes.byref(val), 24, 0) == SUCCESS
    assert val.value == 0
    ctl.set_version(V52)
    assert hip.hipDeviceGetAttribute(ctypes.byref(val), 89, 0) == INVALID_VALUE  # absent in 5.2
    assert hip.hipFree(p) == SUCCESS


def test_no_device_behaves_like_the_52_library_without_gpu(hip: Hip, ctl: DoubleControl) -> None:
    ctl.set_devices(0, 0)
    n, v = INT(7), INT()
    assert hip.hipGetDeviceCount(ctypes.byref(n)) == NO_DEVICE
    assert n.value == 0
    assert hip.hipInit(0) == INVALID_DEVICE
    p = VOIDP()
    assert hip.hipMalloc(ctypes.byref(p), 16) == INVALID_DEVICE
    assert hip.hipRuntimeGetVersion(ctypes.byref(v)) == SUCCESS
    ctl.set_devices(1)
    assert hip.hipInit(0) == SUCCESS
    assert hip.hipInit(1) == INVALID_VALUE


# ------------------------------------------------------------------------------------------
# device and host memory
# ------------------------------------------------------------------------------------------


def test_malloc_free_budget_and_bad_pointers(hip: Hip, ctl: DoubleControl) -> None:
    ctl.set_devices(1, 8 * MiB)
    p = VOIDP(1234)
    assert hip.hipMalloc(ctypes.byref(p), 0) == SUCCESS
    assert p.value is None
    assert hip.hipMalloc(None, 16) == INVALID_VALUE
    assert hip.hipMalloc(ctypes.byref(p), 9 * MiB) == OUT_OF_MEMORY
    a = hip.malloc(6 * MiB)
    assert hip.hipMalloc(ctypes.byref(p), 3 * MiB) == OUT_OF_MEMORY
    b = hip.malloc(2 * MiB)
    assert ctl.live("device") == 2
    ctl.set_devices(1, 4 * MiB)  # budget lowered below what is in use
    free, total = SIZE(), SIZE()
    assert hip.hipMemGetInfo(ctypes.byref(free), ctypes.byref(total)) == SUCCESS
    assert (free.value, total.value) == (0, 4 * MiB)
    assert hip.hipMalloc(ctypes.byref(p), 1) == OUT_OF_MEMORY
    assert hip.hipFree(a + 16) == INVALID_VALUE  # interior
    assert hip.hipFree(0xDEAD000) == INVALID_VALUE  # unknown
    assert hip.hipFree(None) == SUCCESS
    assert hip.hipFree(a) == SUCCESS
    assert hip.hipFree(a) == INVALID_VALUE  # twice
    assert hip.hipFree(b) == SUCCESS
    assert_no_leaks(ctl)


def test_memcpy_memset_move_real_bytes_and_check_ranges(hip: Hip, ctl: DoubleControl) -> None:
    d = hip.malloc(4096)
    src = ctypes.create_string_buffer(b"abcdefgh" * 8, 64)
    dst = ctypes.create_string_buffer(64)
    assert hip.hipMemset(d, 0x5A, 4096) == SUCCESS
    assert ctypes.string_at(d, 4) == b"ZZZZ"
    assert hip.hipMemcpy(d + 100, src, 64, 1) == SUCCESS
    assert hip.hipMemcpy(dst, d + 100, 64, 2) == SUCCESS
    assert dst.raw == src.raw
    assert hip.hipMemcpy(d + 4090, src, 64, 1) == INVALID_VALUE  # runs past the allocation
    assert hip.hipMemcpy(d, src, 8, 7) == INVALID_MEMCPY_DIRECTION
    assert hip.hipMemcpy(d, 0x10, 8, 4) == INVALID_VALUE  # unmapped source
    assert hip.hipMemset(None, 0, 8) == INVALID_VALUE
    assert hip.hipMemcpy(d, src, 0, 4) == SUCCESS
    assert ctl.last_args("hipMemcpy") == (d, ctypes.addressof(src), 0, 4)
    assert hip.hipFree(d) == SUCCESS


def test_host_allocations_flags_and_device_pointers(hip: Hip, ctl: DoubleControl) -> None:
    mapped_portable = 0x2 | 0x1
    h = hip.host_malloc(1000, mapped_portable)
    assert ctl.last_args("hipHostMalloc")[1:] == (1000, mapped_portable)  # type: ignore[index]
    dev, flags = VOIDP(), UINT()
    assert hip.hipHostGetDevicePointer(ctypes.byref(dev), h + 10, 0) == SUCCESS
    assert dev.value == h + 10
    assert hip.hipHostGetDevicePointer(ctypes.byref(dev), h, 1) == INVALID_VALUE
    assert hip.hipHostGetFlags(ctypes.byref(flags), h) == SUCCESS
    assert flags.value == mapped_portable
    plain = hip.host_malloc(64)
    assert hip.hipHostGetDevicePointer(ctypes.byref(dev), plain, 0) == SUCCESS  # as CUDA, also unmapped
    assert dev.value == plain
    p = VOIDP()
    assert hip.hipHostMalloc(ctypes.byref(p), 64, 0x40000000 | 0x80000000) == INVALID_VALUE
    assert hip.hipHostMalloc(ctypes.byref(p), 64, 0x8) == INVALID_VALUE
    assert hip.hipExtHostAlloc(ctypes.byref(p), 64, 0x40000000) == SUCCESS
    ext = p.value
    assert hip.hipHostAlloc(ctypes.byref(p), 64, 0x80000000) == SUCCESS
    halloc = p.value
    assert ctl.live("host") == 4
    assert hip.hipFree(h) == INVALID_VALUE  # host memory is not hipFree'd
    assert hip.hipHostFree(h + 8) == INVALID_VALUE
    d = hip.malloc(64)
    assert hip.hipHostFree(d) == INVALID_VALUE
    assert hip.hipHostGetDevicePointer(ctypes.byref(dev), d, 0) == INVALID_VALUE
    assert hip.hipHostFree(h) == SUCCESS
    assert hip.hipFreeHost(plain) == SUCCESS
    assert hip.hipHostFree(ext) == SUCCESS
    assert hip.hipFreeHost(halloc) == SUCCESS
    assert hip.hipFreeHost(halloc) == INVALID_VALUE
    assert hip.hipFree(d) == SUCCESS
    assert ctl.calls("hipExtHostAlloc") == 1


def test_host_register(hip: Hip, ctl: DoubleControl) -> None:
    buf = ctypes.create_string_buffer(8192)
    addr = ctypes.addressof(buf)
    assert hip.hipHostRegister(addr, 8192, 0x2) == SUCCESS
    assert hip.hipHostRegister(addr + 100, 16, 0) == ALREADY_REGISTERED
    assert hip.hipHostRegister(addr, 16, 0x100) == INVALID_VALUE
    assert hip.hipHostRegister(0x1000, 4096, 0) == INVALID_VALUE  # not mapped
    dev, flags = VOIDP(), UINT()
    assert hip.hipHostGetDevicePointer(ctypes.byref(dev), addr + 8, 0) == SUCCESS
    assert dev.value == addr + 8
    assert hip.hipHostGetFlags(ctypes.byref(flags), addr) == SUCCESS
    assert flags.value == 0x2
    rc, a = hip.attrs(addr + 5)
    assert rc == SUCCESS
    assert (a.type, a.hostPointer, a.allocationFlags) == (1, addr + 5, 0x2)
    assert ctl.live("registered") == 1
    assert hip.hipHostUnregister(addr + 8) == INVALID_VALUE  # interior, as CUDA
    assert hip.hipHostUnregister(addr) == SUCCESS
    assert hip.hipHostUnregister(addr) == NOT_REGISTERED
    h = hip.host_malloc(4096)
    assert hip.hipHostRegister(h, 4096, 0) == INVALID_VALUE  # pinned already (CUDA says 1)
    assert hip.hipHostFree(h) == SUCCESS


@pytest.mark.parametrize(
    ("version", "host", "device", "managed", "unknown_rc"),
    [
        (V52, 0, 1, 3, INVALID_VALUE),  # 5.2: Unified (3) + isManaged
        (V55, 0, 1, 4, INVALID_VALUE),  # 5.3..5.7: hipMemoryTypeManaged = 4
        (V62, 1, 2, 3, SUCCESS),  # 6.x: Unregistered 0 Host 1 Device 2 Managed 3
    ],
)
def test_pointer_attributes_numbering(
    hip: Hip, ctl: DoubleControl, version: int, host: int, device: int, managed: int, unknown_rc: int
) -> None:
    ctl.set_version(version)
    ctl.set_devices(2)
    assert hip.hipSetDevice(1) == SUCCESS
    d = hip.malloc(4096)
    h = hip.host_malloc(4096, 0x2)
    m = hip.managed(8192, 2)
    rc, a = hip.attrs(d + 4)
    assert rc == SUCCESS
    assert (a.type, a.device, a.devicePointer, a.hostPointer, a.isManaged) == (device, 1, d + 4, None, 0)
    rc, a = hip.attrs(h)
    assert (a.type, a.devicePointer, a.hostPointer, a.allocationFlags) == (host, h, h, 0x2)
    rc, a = hip.attrs(m + 5000)
    assert (a.type, a.isManaged, a.hostPointer, a.allocationFlags) == (managed, 1, m + 5000, 2)
    rc, a = hip.attrs(0x1000)
    assert rc == unknown_rc
    if rc == SUCCESS:
        assert (a.type, a.device, a.devicePointer, a.hostPointer) == (0, -2, None, 0x1000)
    assert hip.hipPointerGetAttributes(None, d) == INVALID_VALUE
    for p in (d, m):
        assert hip.hipFree(p) == SUCCESS
    assert hip.hipHostFree(h) == SUCCESS


# ------------------------------------------------------------------------------------------
# managed memory
# ------------------------------------------------------------------------------------------


def test_managed_allocation_flags(hip: Hip, ctl: DoubleControl) -> None:
    p = VOIDP()
    assert hip.hipMallocManaged(ctypes.byref(p), 0, 1) == INVALID_VALUE
    assert hip.hipMallocManaged(ctypes.byref(p), 64, 4) == INVALID_VALUE
    assert hip.hipMallocManaged(ctypes.byref(p), 64, 0) == INVALID_VALUE
    assert hip.hipMallocManaged(ctypes.byref(p), 64, 2) == SUCCESS
    assert ctl.last_args("hipMallocManaged")[2] == 2  # type: ignore[index]
    assert p.value is not None
    ctypes.memset(p.value, 7, 64)  # host-accessible
    assert hip.hipFree(p) == SUCCESS


def test_managed_advice_is_read_back(hip: Hip, ctl: DoubleControl) -> None:
    ctl.set_devices(3)
    size = 16 * 4096
    m = hip.managed(size)
    half = size // 2
    # read-mostly on the first half only
    assert hip.hipMemAdvise(m, half, 1, 0) == SUCCESS
    assert hip.range_attr(1, m, half) == (SUCCESS, [1])
    assert hip.range_attr(1, m, size) == (SUCCESS, [0])
    assert hip.hipMemAdvise(m, half, 2, 0) == SUCCESS
    assert hip.range_attr(1, m, half) == (SUCCESS, [0])
    # preferred location: common value or -2 if mixed
    assert hip.range_attr(2, m, size) == (SUCCESS, [-2])
    assert hip.hipMemAdvise(m, size, 3, 1) == SUCCESS
    assert hip.range_attr(2, m, size) == (SUCCESS, [1])
    assert hip.hipMemAdvise(m + half, 10, 3, -1) == SUCCESS  # rounded to the page
    assert hip.range_attr(2, m + half, 4096) == (SUCCESS, [-1])
    assert hip.range_attr(2, m, size) == (SUCCESS, [-2])
    assert hip.hipMemAdvise(m, size, 4, 0) == SUCCESS
    assert hip.range_attr(2, m, size) == (SUCCESS, [-2])
    # accessed-by: devices set on the whole range, rest -2
    assert hip.hipMemAdvise(m, size, 5, 2) == SUCCESS
    assert hip.hipMemAdvise(m, size, 5, -1) == SUCCESS
    assert hip.hipMemAdvise(m, half, 5, 0) == SUCCESS
    assert hip.range_attr(3, m, size, 4) == (SUCCESS, [2, -1, -2, -2])  # devices, then the CPU
    assert hip.range_attr(3, m, half, 4) == (SUCCESS, [0, 2, -1, -2])
    assert hip.range_attr(3, m, half, 2) == (SUCCESS, [0, 2])
    assert hip.hipMemAdvise(m, size, 6, -1) == SUCCESS
    assert hip.range_attr(3, m, size, 2) == (SUCCESS, [2, -2])
    # coherency mode (AMD): 0 fine, 1 coarse, 2 mixed
    assert hip.range_attr(100, m, size) == (SUCCESS, [0])
    assert hip.hipMemAdvise(m, half, 100, 0) == SUCCESS
    assert hip.range_attr(100, m, size) == (SUCCESS, [2])
    assert hip.range_attr(100, m, half) == (SUCCESS, [1])
    assert hip.hipMemAdvise(m, half, 101, 0) == SUCCESS
    assert hip.range_attr(100, m, size) == (SUCCESS, [0])
    # last prefetch location
    assert hip.range_attr(4, m, size) == (SUCCESS, [-2])
    assert hip.hipMemPrefetchAsync(m, size, 1, None) == SUCCESS
    assert hip.range_attr(4, m, size) == (SUCCESS, [1])
    assert hip.hipMemPrefetchAsync(m, 4096, -1, None) == SUCCESS
    assert hip.range_attr(4, m, 4096) == (SUCCESS, [-1])
    assert hip.range_attr(4, m, size) == (SUCCESS, [-2])
    assert ctl.last_args("hipMemPrefetchAsync") == (m, 4096, -1, 0)
    # several attributes at once
    out = [(INT * 1)(), (INT * 2)()]
    data = (VOIDP * 2)(ctypes.addressof(out[0]), ctypes.addressof(out[1]))
    sizes = (SIZE * 2)(4, 8)
    attrs = (INT * 2)(2, 3)
    assert hip.hipMemRangeGetAttributes(data, sizes, attrs, 2, m, size) == SUCCESS
    assert list(out[0]) == [-2]
    assert list(out[1]) == [2, -2]
    assert hip.hipFree(m) == SUCCESS


def test_managed_advice_errors(hip: Hip, ctl: DoubleControl) -> None:
    m = hip.managed(8192)
    d = hip.malloc(8192)
    data = (INT * 2)()
    assert hip.hipMemAdvise(m, 4096, 7, 0) == INVALID_VALUE  # unknown advice
    assert hip.hipMemAdvise(m, 4096, 3, 5) == INVALID_VALUE  # bad device
    assert hip.hipMemAdvise(m, 0, 1, 0) == INVALID_VALUE
    assert hip.hipMemAdvise(d, 4096, 1, 0) == INVALID_VALUE  # not managed
    assert hip.hipMemAdvise(m, 3 * 4096, 1, 0) == INVALID_VALUE  # past the end
    assert hip.hipMemPrefetchAsync(m, 4096, 9, None) == INVALID_DEVICE
    assert hip.hipMemPrefetchAsync(m, 4096, 0, 0x1234) == INVALID_HANDLE
    assert hip.hipMemRangeGetAttribute(data, 8, 1, m, 4096) == INVALID_VALUE  # scalar needs 4
    assert hip.hipMemRangeGetAttribute(data, 6, 3, m, 4096) == INVALID_VALUE  # multiple of 4
    assert hip.hipMemRangeGetAttribute(data, 4, 9, m, 4096) == INVALID_VALUE  # unknown attribute
    assert hip.hipMemRangeGetAttribute(None, 4, 1, m, 4096) == INVALID_VALUE
    assert hip.hipMemRangeGetAttribute(data, 4, 1, d, 4096) == INVALID_VALUE
    assert hip.hipStreamAttachMemAsync(None, m, 0, 4) == SUCCESS
    assert hip.hipStreamAttachMemAsync(None, m, 0, 3) == INVALID_VALUE
    assert hip.hipStreamAttachMemAsync(None, d, 0, 1) == INVALID_VALUE
    assert hip.hipFree(m) == SUCCESS
    assert hip.hipFree(d) == SUCCESS


def test_streams(hip: Hip, ctl: DoubleControl) -> None:
    s, s2 = VOIDP(), VOIDP()
    assert hip.hipStreamCreate(ctypes.byref(s)) == SUCCESS
    assert hip.hipStreamCreateWithFlags(ctypes.byref(s2), 1) == SUCCESS
    assert hip.hipStreamCreateWithFlags(ctypes.byref(s2), 4) == INVALID_VALUE
    assert hip.hipStreamCreate(None) == INVALID_VALUE
    assert ctl.live("stream") == 2
    assert hip.hipStreamSynchronize(s) == SUCCESS
    assert hip.hipStreamSynchronize(None) == SUCCESS
    assert hip.hipStreamSynchronize(2) == SUCCESS  # hipStreamPerThread
    assert hip.hipStreamDestroy(s) == SUCCESS
    assert hip.hipStreamDestroy(s) == INVALID_HANDLE
    assert hip.hipStreamSynchronize(s) == INVALID_HANDLE
    assert hip.hipStreamDestroy(None) == INVALID_HANDLE
    assert hip.hipStreamDestroy(0xBAD0) == INVALID_HANDLE
    assert hip.hipDeviceSynchronize() == SUCCESS
    assert ctl.live("stream") == 1  # s2 is released by reset


def _stream(hip: Hip, flags: int = 1) -> int:
    s = VOIDP()
    assert hip.hipStreamCreateWithFlags(ctypes.byref(s), flags) == SUCCESS
    assert s.value
    return s.value


def _event(hip: Hip, flags: int = 2) -> int:
    e = VOIDP()
    assert hip.hipEventCreateWithFlags(ctypes.byref(e), flags) == SUCCESS
    assert e.value
    return e.value


def _malloc_async(hip: Hip, size: int, stream: int | None) -> int:
    p = VOIDP()
    assert hip.hipMallocAsync(ctypes.byref(p), size, stream) == SUCCESS
    assert p.value
    return p.value


def test_stream_ordered_frees_are_queued_until_their_stream_runs(hip: Hip, ctl: DoubleControl) -> None:
    ctl.set_devices(1, 4 * MiB)
    s1, s2 = _stream(hip), _stream(hip)
    a = _malloc_async(hip, 3 * MiB, s1)
    assert ctl.last_args("hipMallocAsync")[1:] == (3 * MiB, s1)  # type: ignore[index]
    assert (ctl.live("device"), ctl.live("async")) == (1, 1)
    assert hip.hipMemset(a, 0x11, 16) == SUCCESS  # real memory
    assert hip.hipFreeAsync(a, s1) == SUCCESS
    assert (ctl.live("device"), ctl.live("async"), ctl.live("free_pending")) == (0, 0, 1)
    assert hip.hipFreeAsync(a, s1) == INVALID_VALUE  # freed already (queued)
    assert hip.hipFree(a) == INVALID_VALUE
    p = VOIDP()
    assert hip.hipMallocAsync(ctypes.byref(p), 3 * MiB, s2) == OUT_OF_MEMORY  # s1 has not run the free
    b = _malloc_async(hip, 3 * MiB, s1)  # s1 reuses what it freed, in stream order
    assert ctl.live("free_pending") == 0
    assert hip.hipFreeAsync(b, s1) == SUCCESS
    assert hip.hipStreamSynchronize(s1) == SUCCESS
    assert ctl.live("free_pending") == 0
    c = _malloc_async(hip, 3 * MiB, s2)
    assert hip.hipFreeAsync(c, None) == SUCCESS  # on the default stream
    assert hip.hipDeviceSynchronize() == SUCCESS  # runs every queue
    assert ctl.live("free_pending") == 0
    d = _malloc_async(hip, MiB, s2)
    assert hip.hipFreeAsync(d, s2) == SUCCESS
    assert hip.hipStreamDestroy(s2) == SUCCESS  # a destroyed stream finishes its work
    assert ctl.live("free_pending") == 0
    # hipMalloc memory may be freed in stream order too (as CLR and CUDA allow)
    e = hip.malloc(64)
    assert hip.hipFreeAsync(e, s1) == SUCCESS
    assert hip.hipStreamSynchronize(s1) == SUCCESS
    assert ctl.live("device") == 0
    # hipFree takes hipMallocAsync memory (CUDA 13's cudaFree does)
    f = _malloc_async(hip, 64, s1)
    assert hip.hipFree(f) == SUCCESS
    assert hip.hipStreamDestroy(s1) == SUCCESS
    assert_no_leaks(ctl)


def test_stream_ordered_argument_checks(hip: Hip, ctl: DoubleControl) -> None:
    """The codes CLR (hip_mempool.cpp) returns, and the double's stricter frees."""
    p = VOIDP()
    assert hip.hipMallocAsync(ctypes.byref(p), 64, 0xBAD0) == INVALID_VALUE  # unknown stream
    assert hip.hipMallocAsync(ctypes.byref(p), 0, None) == SUCCESS
    assert p.value is None
    a = _malloc_async(hip, 4096, 2)  # hipStreamPerThread
    assert hip.hipFreeAsync(a, 0xBAD0) == INVALID_VALUE
    assert hip.hipFreeAsync(a + 8, 2) == INVALID_VALUE  # interior
    assert hip.hipFreeAsync(ctypes.addressof(p), 2) == INVALID_VALUE  # not the double's
    h = IpcHandle()
    assert hip.hipIpcGetMemHandle(ctypes.byref(h), a) == INVALID_VALUE  # pool memory: no IPC
    rc, attrs = hip.attrs(a)
    assert (rc, attrs.type, attrs.devicePointer) == (SUCCESS, 2, a)  # device memory (6.2 numbering)
    assert hip.hipFreeAsync(a, 2) == SUCCESS
    assert hip.hipStreamSynchronize(2) == SUCCESS
    ctl.set_devices(0, 0)
    assert hip.hipMallocAsync(ctypes.byref(p), 64, None) == INVALID_DEVICE  # no GPU: as hipMalloc
    assert_no_leaks(ctl)


def test_events_follow_their_streams_queue(hip: Hip, ctl: DoubleControl) -> None:
    s1, s2 = _stream(hip), _stream(hip)
    e = _event(hip)
    assert ctl.live("event") == 1
    assert hip.hipEventQuery(e) == SUCCESS  # never recorded: done
    assert hip.hipEventRecord(e, s1) == SUCCESS
    assert hip.hipEventQuery(e) == SUCCESS  # nothing queued on s1
    a = _malloc_async(hip, 4096, s1)
    assert hip.hipFreeAsync(a, s1) == SUCCESS
    assert hip.hipEventRecord(e, s1) == SUCCESS
    assert hip.hipEventQuery(e) == NOT_READY
    assert hip.hipStreamWaitEvent(s2, e, 0) == SUCCESS
    assert hip.hipEventQuery(e) == NOT_READY  # a wait does not block the host
    assert hip.hipStreamSynchronize(s2) == SUCCESS  # s2 ran its wait: s1 ran up to the event
    assert (hip.hipEventQuery(e), ctl.live("free_pending")) == (SUCCESS, 0)
    b = _malloc_async(hip, 4096, s1)
    assert hip.hipFreeAsync(b, s1) == SUCCESS
    assert hip.hipEventRecord(e, s1) == SUCCESS
    c = _malloc_async(hip, 4096, s1)  # after the event: not waited for by it
    assert hip.hipFreeAsync(c, s1) == SUCCESS
    assert hip.hipEventSynchronize(e) == SUCCESS
    assert (hip.hipEventQuery(e), ctl.live("free_pending")) == (SUCCESS, 1)  # c's free still queued
    assert hip.hipEventRecord(e, s1) == SUCCESS
    assert hip.hipStreamDestroy(s1) == SUCCESS  # its work runs; the event is done
    assert (hip.hipEventQuery(e), ctl.live("free_pending")) == (SUCCESS, 0)
    assert hip.hipStreamWaitEvent(s2, e, 0) == SUCCESS  # nothing to wait for
    assert hip.hipEventDestroy(e) == SUCCESS
    assert hip.hipStreamDestroy(s2) == SUCCESS
    assert_no_leaks(ctl)


def test_event_argument_checks(hip: Hip, ctl: DoubleControl) -> None:
    """The codes of CLR's hip_event.cpp / hip_stream.cpp."""
    e = VOIDP()
    for flags in (0, 1, 2, 3, 6, 0x40000002, 0x80000002, 0x20000002):
        assert hip.hipEventCreateWithFlags(ctypes.byref(e), flags) == SUCCESS, hex(flags)
        assert hip.hipEventDestroy(e) == SUCCESS
    # Interprocess without DisableTiming, unknown bits, two release flags
    for flags in (4, 8, 0x10, 0xC0000002, 0x60000000):
        assert hip.hipEventCreateWithFlags(ctypes.byref(e), flags) == INVALID_VALUE, hex(flags)
    ctl.set_version(V52)  # hipEventDisableSystemFence is new in 5.6
    assert hip.hipEventCreateWithFlags(ctypes.byref(e), 0x20000002) == INVALID_VALUE
    ctl.set_version(V62)
    ev = _event(hip)
    assert ctl.last_args("hipEventCreateWithFlags")[1] == 2  # type: ignore[index]
    assert hip.hipEventDestroy(None) == INVALID_HANDLE
    assert hip.hipEventDestroy(0xBAD0) == CONTEXT_IS_DESTROYED
    for fn in (hip.hipEventQuery, hip.hipEventSynchronize):
        assert fn(None) == INVALID_HANDLE
        assert fn(0xBAD0) == INVALID_HANDLE
    assert hip.hipEventRecord(None, None) == INVALID_HANDLE
    assert hip.hipEventRecord(ev, 0xBAD0) == INVALID_HANDLE
    assert hip.hipStreamWaitEvent(None, None, 0) == INVALID_HANDLE
    assert hip.hipStreamWaitEvent(None, ev, 1) == INVALID_VALUE
    assert hip.hipStreamWaitEvent(0xBAD0, ev, 0) == CONTEXT_IS_DESTROYED
    assert hip.hipStreamWaitEvent(None, 0xBAD0, 0) == INVALID_HANDLE
    assert hip.hipEventRecord(ev, 2) == SUCCESS  # hipStreamPerThread
    assert hip.hipEventDestroy(ev) == SUCCESS
    assert hip.hipEventDestroy(ev) == CONTEXT_IS_DESTROYED
    assert_no_leaks(ctl)


def test_stream_ordered_faults_do_nothing(hip: Hip, ctl: DoubleControl) -> None:
    s = _stream(hip)
    p = VOIDP()
    ctl.inject("hipMallocAsync", OUT_OF_MEMORY)
    assert hip.hipMallocAsync(ctypes.byref(p), 64, s) == OUT_OF_MEMORY
    assert ctl.live("device") == 0
    a = _malloc_async(hip, 64, s)
    ctl.inject("hipFreeAsync", INVALID_VALUE)
    assert hip.hipFreeAsync(a, s) == INVALID_VALUE
    assert (ctl.live("async"), ctl.live("free_pending")) == (1, 0)
    ctl.inject("hipEventCreateWithFlags", OUT_OF_MEMORY)
    assert hip.hipEventCreateWithFlags(ctypes.byref(p), 2) == OUT_OF_MEMORY
    assert ctl.live("event") == 0
    e = _event(hip)
    ctl.inject("hipEventQuery", NOT_READY, times=-1)
    assert hip.hipEventQuery(e) == NOT_READY
    ctl.inject("hipEventDestroy", 999)
    assert hip.hipEventDestroy(e) == 999
    assert ctl.live("event") == 1
    assert ctl.calls("hipEventQuery") == 1
    ctl.reset()  # frees the allocation, the event and the stream
    assert_no_leaks(ctl)
    assert (ctl.live("async"), ctl.live("event"), ctl.live("free_pending")) == (0, 0, 0)


# ------------------------------------------------------------------------------------------
# IPC between real processes
# ------------------------------------------------------------------------------------------

IPC_CHILD = """
import ctypes, sys
class H(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]
lib = ctypes.CDLL(sys.argv[1])
lib.hipIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), H, ctypes.c_uint]
lib.hipIpcCloseMemHandle.argtypes = [ctypes.c_void_p]
h = H(); ctypes.memmove(ctypes.byref(h), bytes.fromhex(sys.argv[2]), 64)
flags = int(sys.argv[3])
lib.hipdouble_set_version(int(sys.argv[4]))
p = ctypes.c_void_p()
rc = lib.hipIpcOpenMemHandle(ctypes.byref(p), h, flags)
if rc:
    print("open", rc); sys.exit(0)
seen = ctypes.string_at(p.value, 8)
ctypes.memmove(p.value, b"fromkid!", 8)
q = ctypes.c_void_p()
assert lib.hipIpcOpenMemHandle(ctypes.byref(q), h, flags) == 0 and q.value == p.value
assert lib.hipIpcCloseMemHandle(q) == 0
print("ok", seen.decode(), lib.hipIpcCloseMemHandle(p), lib.hipIpcCloseMemHandle(p))
"""


@pytest.mark.parametrize(("version", "good", "bad"), [(V62, 1, 0), (V52, 0, 1)])
def test_ipc_between_processes(
    hip: Hip, ctl: DoubleControl, lib_path: Path, version: int, good: int, bad: int
) -> None:
    ctl.set_version(version)
    d = hip.malloc(4096)
    ctypes.memmove(d, b"parent!!", 8)
    h = IpcHandle()
    assert hip.hipIpcGetMemHandle(ctypes.byref(h), d) == SUCCESS
    assert hip.hipIpcGetMemHandle(ctypes.byref(h), d + 8) == INVALID_VALUE  # not the base
    assert hip.hipIpcGetMemHandle(None, d) == INVALID_VALUE
    assert hip.hipIpcGetMemHandle(ctypes.byref(h), d) == SUCCESS
    hexh = bytes(h).hex()
    out = run_child(lib_path, IPC_CHILD, hexh, str(good), str(version))
    assert out == "ok parent!! 0 1"
    assert ctypes.string_at(d, 8) == b"fromkid!"  # the child wrote through its mapping
    assert run_child(lib_path, IPC_CHILD, hexh, str(bad), str(version)) == "open 1"
    # the exporting process cannot open its own handle (CUDA 13 answers 201)
    p = VOIDP()
    assert hip.hipIpcOpenMemHandle(ctypes.byref(p), h, good) == 201
    assert hip.hipIpcCloseMemHandle(d) == INVALID_VALUE
    # a freed allocation's handle is stale, even if the same address comes back
    assert hip.hipFree(d) == SUCCESS
    assert run_child(lib_path, IPC_CHILD, hexh, str(good), str(version)) == "open 1"
    d2 = hip.malloc(4096)
    h2 = IpcHandle()
    assert hip.hipIpcGetMemHandle(ctypes.byref(h2), d2) == SUCCESS
    assert bytes(h2) != bytes(h)
    assert hip.hipFree(d2) == SUCCESS


# ------------------------------------------------------------------------------------------
# virtual memory management
# ------------------------------------------------------------------------------------------

VMM_CHILD = """
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1])
V = ctypes.c_void_p
for n, a in {
    "hipMemImportFromShareableHandle": [ctypes.POINTER(V), V, ctypes.c_int],
    "hipMemAddressReserve": [ctypes.POINTER(V), ctypes.c_size_t, ctypes.c_size_t, V, ctypes.c_ulonglong],
    "hipMemMap": [V, ctypes.c_size_t, ctypes.c_size_t, V, ctypes.c_ulonglong],
    "hipMemSetAccess": [V, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t],
    "hipMemUnmap": [V, ctypes.c_size_t], "hipMemRelease": [V], "hipMemAddressFree": [V, ctypes.c_size_t],
}.items():
    getattr(lib, n).argtypes = a
pid, fd, size, version = (int(x) for x in sys.argv[2:6])
lib.hipdouble_set_version(version)
myfd = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR)   # what SCM_RIGHTS would hand over
h, va = V(), V()
if version >= 70000000:
    rc = lib.hipMemImportFromShareableHandle(ctypes.byref(h), myfd, 1)
else:
    cfd = ctypes.c_int(myfd)
    rc = lib.hipMemImportFromShareableHandle(ctypes.byref(h), ctypes.addressof(cfd), 1)
os.close(myfd)
assert rc == 0, rc
assert lib.hipMemAddressReserve(ctypes.byref(va), size, 0, None, 0) == 0
assert lib.hipMemMap(va, size, 0, h, 0) == 0
desc = (1).to_bytes(4, "little") + (0).to_bytes(4, "little") + (3).to_bytes(4, "little")
assert lib.hipMemSetAccess(va, size, desc, 1) == 0
seen = ctypes.string_at(va.value + 12345, 6)
ctypes.memmove(va.value + 777, b"child", 5)
assert lib.hipMemUnmap(va, size) == 0
assert lib.hipMemRelease(h) == 0
assert lib.hipMemAddressFree(va, size) == 0
print(seen.decode(), lib.hipdouble_live(b"vmm_handle"))
"""


def test_vmm_full_cycle_and_sharing_with_a_process(hip: Hip, ctl: DoubleControl, lib_path: Path) -> None:
    prop = alloc_prop(V62)
    gran = SIZE()
    assert hip.hipMemGetAllocationGranularity(ctypes.byref(gran), prop, 0) == SUCCESS
    assert gran.value == GRAN
    assert hip.hipMemGetAllocationGranularity(ctypes.byref(gran), prop, 1) == SUCCESS
    assert gran.value == GRAN
    assert hip.hipMemGetAllocationGranularity(ctypes.byref(gran), alloc_prop(V62, alloc_type=0), 0) == 1
    size = 2 * GRAN
    va = VOIDP()
    assert hip.hipMemAddressReserve(ctypes.byref(va), GRAN + 4096, 0, None, 0) == OUT_OF_MEMORY
    assert hip.hipMemAddressReserve(ctypes.byref(va), size, 0, None, 1) == INVALID_VALUE
    assert hip.hipMemAddressReserve(ctypes.byref(va), 2 * size, 0, None, 0) == SUCCESS
    assert va.value is not None
    assert va.value % GRAN == 0
    h = VOIDP()
    assert hip.hipMemCreate(ctypes.byref(h), size, alloc_prop(V62, handle_type=2), 0) == NOT_SUPPORTED
    assert hip.hipMemCreate(ctypes.byref(h), size, alloc_prop(V62, device=3), 0) == INVALID_VALUE
    assert hip.hipMemCreate(ctypes.byref(h), size, prop, 1) == INVALID_VALUE
    assert hip.hipMemCreate(ctypes.byref(h), size, prop, 0) == SUCCESS
    assert hip.hipMemMap(va, size, 4096, h, 0) == INVALID_VALUE  # offset must be 0
    assert hip.hipMemMap(va, GRAN, 0, h, 0) == NOT_SUPPORTED  # part of a handle, as CUDA
    assert hip.hipMemMap(0x200000, size, 0, h, 0) == INVALID_VALUE  # outside any reservation
    assert hip.hipMemMap(va, size, 0, h, 0) == SUCCESS
    assert hip.hipMemMap(va.value + GRAN, size, 0, h, 0) == INVALID_VALUE  # overlaps
    loc = MemLocation(1, 0)
    acc = ULL(99)
    assert hip.hipMemGetAccess(ctypes.byref(acc), ctypes.byref(loc), va) == SUCCESS
    assert acc.value == 0  # no access until hipMemSetAccess
    assert hip.hipMemset(va, 1, 16) == INVALID_VALUE  # would fault: refused
    desc = AccessDesc(MemLocation(1, 0), 1)
    assert hip.hipMemSetAccess(va, size, ctypes.byref(desc), 1) == SUCCESS
    assert hip.hipMemset(va, 1, 16) == INVALID_VALUE  # read-only
    desc.flags = 3
    assert hip.hipMemSetAccess(va, size, ctypes.byref(desc), 1) == SUCCESS
    assert hip.hipMemGetAccess(ctypes.byref(acc), ctypes.byref(loc), va.value + GRAN) == SUCCESS
    assert acc.value == 3
    assert hip.hipMemSetAccess(va.value + size, GRAN, ctypes.byref(desc), 1) == INVALID_VALUE  # unmapped
    assert hip.hipMemset(va.value + 12345, ord("v"), 6) == SUCCESS
    ctypes.memmove(va.value + 12345, b"vmm-ok", 6)
    # retain, properties
    r = VOIDP()
    assert hip.hipMemRetainAllocationHandle(ctypes.byref(r), va.value + 100) == SUCCESS
    assert r.value == h.value
    out = ctypes.create_string_buffer(32)
    assert hip.hipMemGetAllocationPropertiesFromHandle(out, h) == SUCCESS
    assert out.raw == prop
    # export / import across processes (6.2: import takes a pointer to the fd)
    fd = INT(-1)
    assert hip.hipMemExportToShareableHandle(ctypes.byref(fd), h, 1, 0) == SUCCESS
    assert fd.value >= 0
    result = run_child(lib_path, VMM_CHILD, str(os.getpid()), str(fd.value), str(size), str(V62))
    assert result == "vmm-ok 0"
    assert ctypes.string_at(va.value + 777, 5) == b"child"
    os.close(fd.value)
    # teardown rules
    assert hip.hipMemAddressFree(va, 2 * size) == INVALID_VALUE  # still mapped
    assert hip.hipMemRelease(r) == SUCCESS
    assert hip.hipMemRelease(h) == SUCCESS  # the memory lives while mapped
    assert ctl.live("vmm_handle") == 1
    assert hip.hipMemRelease(h) == INVALID_VALUE  # no reference left
    assert ctypes.string_at(va.value + 777, 5) == b"child"
    assert hip.hipMemUnmap(va.value + GRAN, GRAN) == INVALID_VALUE  # half a mapping
    assert hip.hipMemUnmap(va.value + size, GRAN) == SUCCESS  # nothing mapped there: fine in CUDA
    assert hip.hipMemSetAccess(va, GRAN, ctypes.byref(desc), 1) == INVALID_VALUE  # half a mapping
    assert hip.hipMemUnmap(va, size) == SUCCESS
    assert ctl.live("vmm_handle") == 0
    assert hip.hipMemGetAccess(ctypes.byref(acc), ctypes.byref(loc), va) == INVALID_VALUE
    assert hip.hipMemAddressFree(va, size) == INVALID_VALUE  # size must match the reservation
    assert hip.hipMemAddressFree(va, 2 * size) == SUCCESS
    assert_no_leaks(ctl)


def test_vmm_version_rules(hip: Hip, ctl: DoubleControl, lib_path: Path) -> None:
    size = GRAN
    fd = INT(-1)
    h, h2 = VOIDP(), VOIDP()
    # 6.0 / 6.1: no shareable handles
    ctl.set_version(V61)
    assert hip.hipMemCreate(ctypes.byref(h), size, alloc_prop(V61), 0) == SUCCESS
    assert hip.hipMemExportToShareableHandle(ctypes.byref(fd), h, 1, 0) == NOT_SUPPORTED
    assert hip.hipMemImportFromShareableHandle(ctypes.byref(h2), ctypes.byref(fd), 1) == NOT_SUPPORTED
    # 6.2: by pointer; a small integer passed instead is refused, not dereferenced
    ctl.set_version(V62)
    assert hip.hipMemExportToShareableHandle(ctypes.byref(fd), h, 1, 0) == SUCCESS
    assert hip.hipMemImportFromShareableHandle(ctypes.byref(h2), fd.value, 1) == INVALID_VALUE
    assert hip.hipMemImportFromShareableHandle(ctypes.byref(h2), ctypes.addressof(fd), 1) == SUCCESS
    assert hip.hipMemRelease(h2) == SUCCESS
    # 7.0: by value; a pointer is not an fd
    ctl.set_version(V70)
    assert hip.hipMemImportFromShareableHandle(ctypes.byref(h2), ctypes.addressof(fd), 1) == INVALID_VALUE
    assert hip.hipMemImportFromShareableHandle(ctypes.byref(h2), fd.value, 1) == SUCCESS
    assert hip.hipMemImportFromShareableHandle(ctypes.byref(h2), fd.value, 2) == NOT_SUPPORTED
    assert hip.hipMemRelease(h2) == SUCCESS
    os.close(fd.value)
    # a handle created without a shareable type cannot be exported
    hn = VOIDP()
    assert hip.hipMemCreate(ctypes.byref(hn), size, alloc_prop(V70, handle_type=0), 0) == SUCCESS
    assert hip.hipMemExportToShareableHandle(ctypes.byref(fd), hn, 1, 0) == INVALID_VALUE
    assert hip.hipMemRelease(hn) == SUCCESS
    # 5.2: old hipMemAllocationProp layout
    ctl.set_version(V52)
    out = ctypes.create_string_buffer(32)
    assert hip.hipMemGetAllocationPropertiesFromHandle(out, h) == SUCCESS
    assert out.raw == alloc_prop(V52)
    assert hip.hipMemCreate(ctypes.byref(h2), size, alloc_prop(V62), 0) == INVALID_VALUE  # wrong layout
    assert hip.hipMemCreate(ctypes.byref(h2), size, alloc_prop(V52), 0) == SUCCESS
    assert hip.hipMemRelease(h2) == SUCCESS
    assert hip.hipMemRelease(h) == SUCCESS
    assert hip.hipMemRelease(h) == INVALID_VALUE
    assert hip.hipMemRelease(None) == INVALID_VALUE
    assert_no_leaks(ctl)


# ------------------------------------------------------------------------------------------
# fault injection, counters, errors
# ------------------------------------------------------------------------------------------


def test_fault_injection(hip: Hip, ctl: DoubleControl) -> None:
    ctl.inject("hipMalloc", 2, skip=1, times=2)
    ctl.inject("hipSetDevice", 12345, times=-1)
    a = hip.malloc(64)  # skipped
    p = VOIDP()
    assert hip.hipMalloc(ctypes.byref(p), 64) == OUT_OF_MEMORY
    assert hip.hipMalloc(ctypes.byref(p), 64) == OUT_OF_MEMORY
    b = hip.malloc(64)  # exhausted
    for _ in range(3):
        assert hip.hipSetDevice(0) == 12345
    assert hip.hipGetErrorName(12345) == b"hipErrorUnknown"
    assert hip.hipGetErrorString(12345) == b"unknown error"
    assert ctl.calls("hipMalloc") == 4
    assert ctl.live("device") == 2  # injected calls did nothing
    ctl.inject("hipFree", 0)  # "success" without freeing
    assert hip.hipFree(a) == SUCCESS
    assert ctl.live("device") == 2
    assert hip.hipFree(a) == SUCCESS
    assert hip.hipFree(b) == SUCCESS
    assert ctl.live("device") == 0
    with pytest.raises(ValueError, match="no hip function"):
        ctl.inject("hipNoSuchCall", 1)
    with pytest.raises(ValueError, match="times"):
        ctl.inject("hipMalloc", 1, times=0)
    with pytest.raises(ValueError, match="no hip function"):
        ctl.calls("cudaMalloc")
    with pytest.raises(ValueError, match="unknown kind"):
        ctl.live("gpu")
    assert ctl.last_args("hipStreamCreate") is None
    ctl.reset()
    assert hip.hipSetDevice(0) == SUCCESS
    assert ctl.calls("hipSetDevice") == 1


def test_faults_from_the_environment_in_a_child(lib_path: Path) -> None:
    out = run_child(
        lib_path,
        """
        import ctypes, sys
        lib = ctypes.CDLL(sys.argv[1])
        p = ctypes.c_void_p()
        r = [lib.hipMalloc(ctypes.byref(p), ctypes.c_size_t(64)) for _ in range(3)]
        r += [lib.hipSetDevice(0), lib.hipSetDevice(0)]
        print(*r)
        """,
        env={"HIPDOUBLE_FAULTS": "hipMalloc:2:1:1,hipSetDevice:101:0:-1"},
    )
    assert out == "0 2 0 101 101"


def test_error_names_and_last_error(hip: Hip, ctl: DoubleControl) -> None:
    expected = {
        0: "hipSuccess",
        1: "hipErrorInvalidValue",
        2: "hipErrorOutOfMemory",
        101: "hipErrorInvalidDevice",
        400: "hipErrorInvalidHandle",
        712: "hipErrorHostMemoryAlreadyRegistered",
        801: "hipErrorNotSupported",
        999: "hipErrorUnknown",
        1054: "hipErrorTbd",
    }
    for code, name in expected.items():
        assert hip.hipGetErrorName(code) == name.encode()
    assert hip.hipGetErrorString(1) == b"invalid argument"
    ctl.set_version(V70)
    assert hip.hipGetErrorName(1054) == b"hipErrorInvalidClusterSize"
    # 7.x: the last real error survives later successes
    assert hip.hipSetDevice(9) == INVALID_DEVICE
    assert hip.hipDeviceSynchronize() == SUCCESS
    assert hip.hipPeekAtLastError() == INVALID_DEVICE
    assert hip.hipGetLastError() == INVALID_DEVICE
    assert hip.hipGetLastError() == SUCCESS
    # 6.x: the last call's result
    ctl.set_version(V62)
    assert hip.hipSetDevice(9) == INVALID_DEVICE
    assert hip.hipDeviceSynchronize() == SUCCESS
    assert hip.hipGetLastError() == SUCCESS


def test_threads_share_the_tables_safely(hip: Hip, ctl: DoubleControl) -> None:
    errors: list[str] = []

    def worker() -> None:
        for _ in range(200):
            p = VOIDP()
            if hip.hipMalloc(ctypes.byref(p), 4096) != 0:
                errors.append("malloc")
                continue
            if hip.hipFree(p) != 0:
                errors.append("free")

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert ctl.calls("hipMalloc") == 800
    assert_no_leaks(ctl)


def test_null_out_pointers_are_invalid_value(hip: Hip, ctl: DoubleControl) -> None:
    d = hip.malloc(64)
    m = hip.managed(8192)
    h = VOIDP()
    assert hip.hipMemCreate(ctypes.byref(h), GRAN, alloc_prop(V62), 0) == SUCCESS
    prop = alloc_prop(V62)
    calls = {
        "hipGetDevice": (None,),
        "hipRuntimeGetVersion": (None,),
        "hipDriverGetVersion": (None,),
        "hipDeviceGetAttribute": (None, 24, 0),
        "hipDeviceTotalMem": (None, 0),
        "hipMemGetInfo": (None, None),
        "hipMalloc": (None, 64),
        "hipHostMalloc": (None, 64, 0),
        "hipHostAlloc": (None, 64, 0),
        "hipExtHostAlloc": (None, 64, 0),
        "hipMallocManaged": (None, 64, 1),
        "hipHostGetDevicePointer": (None, d, 0),
        "hipHostGetFlags": (None, d),
        "hipHostRegister": (None, 64, 0),
        "hipHostUnregister": (None,),
        "hipMemAdvise": (None, 4096, 1, 0),
        "hipMemPrefetchAsync": (None, 4096, 0, None),
        "hipMemRangeGetAttribute": (None, 4, 1, m, 4096),
        "hipMemRangeGetAttributes": (None, None, None, 1, m, 4096),
        "hipStreamAttachMemAsync": (None, None, 0, 1),
        "hipStreamCreate": (None,),
        "hipStreamCreateWithFlags": (None, 0),
        "hipMallocAsync": (None, 64, None),
        "hipFreeAsync": (None, None),
        "hipEventCreateWithFlags": (None, 2),
        "hipMemcpy": (None, d, 8, 4),
        "hipMemset": (None, 0, 8),
        "hipIpcGetMemHandle": (None, d),
        "hipIpcCloseMemHandle": (None,),
        "hipPointerGetAttributes": (None, d),
        "hipMemAddressReserve": (None, GRAN, 0, None, 0),
        "hipMemAddressFree": (None, GRAN),
        "hipMemCreate": (None, GRAN, prop, 0),
        "hipMemMap": (None, GRAN, 0, h, 0),
        "hipMemUnmap": (None, GRAN),
        "hipMemSetAccess": (None, GRAN, None, 1),
        "hipMemGetAccess": (None, None, d),
        "hipMemExportToShareableHandle": (None, h, 1, 0),
        "hipMemImportFromShareableHandle": (None, None, 1),
        "hipMemRetainAllocationHandle": (None, d),
        "hipMemGetAllocationPropertiesFromHandle": (None, h),
        "hipMemGetAllocationGranularity": (None, prop, 0),
    }
    for name, args in calls.items():
        assert getattr(hip, name)(*args) == INVALID_VALUE, name
    p = VOIDP()
    assert hip.hipIpcOpenMemHandle(None, IpcHandle(), 1) == INVALID_VALUE
    assert hip.hipIpcOpenMemHandle(ctypes.byref(p), IpcHandle(), 1) == INVALID_VALUE  # not a handle
    assert hip.hipMemCreate(ctypes.byref(p), GRAN, None, 0) == INVALID_VALUE
    assert hip.hipMemGetAllocationGranularity(ctypes.byref(SIZE()), None, 0) == INVALID_VALUE
    assert hip.hipMemRelease(h) == SUCCESS
    assert hip.hipFree(d) == SUCCESS
    assert hip.hipFree(m) == SUCCESS


def test_reset_frees_everything(hip: Hip, ctl: DoubleControl) -> None:
    fds_before = len(os.listdir("/proc/self/fd"))
    hip.malloc(64)
    hip.host_malloc(64)
    hip.managed(64)
    s, va, h = VOIDP(), VOIDP(), VOIDP()
    assert hip.hipStreamCreate(ctypes.byref(s)) == SUCCESS
    assert hip.hipMemAddressReserve(ctypes.byref(va), GRAN, 0, None, 0) == SUCCESS
    assert hip.hipMemCreate(ctypes.byref(h), GRAN, alloc_prop(V62), 0) == SUCCESS
    assert hip.hipMemMap(va, GRAN, 0, h, 0) == SUCCESS
    assert ctl.live("vmm_mapping") == 1
    assert len(os.listdir("/proc/self/fd")) == fds_before + 2  # two memfds
    ctl.reset()
    assert_no_leaks(ctl)
    assert len(os.listdir("/proc/self/fd")) == fds_before  # and no descriptor is left open


# ------------------------------------------------------------------------------------------
# forward mode (an NVIDIA GPU with CUDA): skipped elsewhere
# ------------------------------------------------------------------------------------------


def _cuda_usable() -> str | None:
    try:
        find_cuda()
    except DoubleBuildError as exc:
        return str(exc)
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver (libcuda.so.1)"
    return None


FORWARD_CHILD = """
import ctypes, os, struct, sys
lib = ctypes.CDLL(sys.argv[1])
V, S, I, U = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint
class P(ctypes.Structure):
    _fields_ = [("type", I), ("device", I), ("dp", V), ("hp", V), ("managed", I), ("flags", U)]
for n, a in {
    "hipMalloc": [ctypes.POINTER(V), S], "hipFree": [V], "hipMemcpy": [V, V, S, I], "hipMemset": [V, I, S],
    "hipHostMalloc": [ctypes.POINTER(V), S, U], "hipHostFree": [V], "hipHostGetFlags": [ctypes.POINTER(U), V],
    "hipMallocManaged": [ctypes.POINTER(V), S, U], "hipMemAdvise": [V, S, I, I],
    "hipMemPrefetchAsync": [V, S, I, V], "hipMemRangeGetAttribute": [V, S, I, V, S],
    "hipPointerGetAttributes": [ctypes.POINTER(P), V], "hipStreamCreate": [ctypes.POINTER(V)],
    "hipStreamDestroy": [V], "hipStreamSynchronize": [V],
    "hipMemGetAllocationGranularity": [ctypes.POINTER(S), ctypes.c_char_p, I],
    "hipMemAddressReserve": [ctypes.POINTER(V), S, S, V, ctypes.c_ulonglong],
    "hipMemCreate": [ctypes.POINTER(V), S, ctypes.c_char_p, ctypes.c_ulonglong],
    "hipMemMap": [V, S, S, V, ctypes.c_ulonglong], "hipMemSetAccess": [V, S, ctypes.c_char_p, S],
    "hipMemGetAccess": [ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_char_p, V],
    "hipMemExportToShareableHandle": [V, V, I, ctypes.c_ulonglong],
    "hipMemImportFromShareableHandle": [ctypes.POINTER(V), V, I],
    "hipMemRetainAllocationHandle": [ctypes.POINTER(V), V],
    "hipMemGetAllocationPropertiesFromHandle": [ctypes.c_char_p, V],
    "hipMemUnmap": [V, S], "hipMemRelease": [V], "hipMemAddressFree": [V, S],
    "hipMallocAsync": [ctypes.POINTER(V), S, V], "hipFreeAsync": [V, V],
    "hipEventCreateWithFlags": [ctypes.POINTER(V), U], "hipEventDestroy": [V], "hipEventRecord": [V, V],
    "hipEventQuery": [V], "hipEventSynchronize": [V], "hipStreamWaitEvent": [V, V, U],
    "hipStreamCreateWithFlags": [ctypes.POINTER(V), U],
}.items():
    getattr(lib, n).argtypes = a
lib.hipdouble_mode.restype = ctypes.c_char_p
out = []
def check(name, got, want):
    if got != want:
        out.append(f"{name}: got {got!r}, want {want!r}")
check("mode", lib.hipdouble_mode(), b"forward")
n = I()
check("count", lib.hipGetDeviceCount(ctypes.byref(n)), 0)
d = V()
check("malloc", lib.hipMalloc(ctypes.byref(d), 1 << 20), 0)
buf = ctypes.create_string_buffer(b"forward!", 8)
check("memcpy", lib.hipMemcpy(d, buf, 8, 1), 0)
back = ctypes.create_string_buffer(8)
check("memcpy back", lib.hipMemcpy(back, d, 8, 2), 0)
check("bytes", back.raw, b"forward!")
a = P()
check("attr dev", lib.hipPointerGetAttributes(ctypes.byref(a), d), 0)
check("attr dev type", (a.type, a.managed), (2, 0))
check("free", lib.hipFree(d), 0)
check("free twice", lib.hipFree(d), 1)
h = V()
check("hostmalloc", lib.hipHostMalloc(ctypes.byref(h), 4096, 0x40000003), 0)
f = U()
check("hostflags", (lib.hipHostGetFlags(ctypes.byref(f), h), f.value), (0, 0x40000003))
check("attr host", (lib.hipPointerGetAttributes(ctypes.byref(a), h), a.type), (0, 1))
check("hostfree", lib.hipHostFree(h), 0)
m = V()
check("managed", lib.hipMallocManaged(ctypes.byref(m), 1 << 21, 1), 0)
check("advise rm", lib.hipMemAdvise(m, 1 << 21, 1, 0), 0)
check("advise pref", lib.hipMemAdvise(m, 1 << 21, 3, 0), 0)
check("advise coarse", lib.hipMemAdvise(m, 1 << 21, 100, 0), 1)
r = I()
check("rm", (lib.hipMemRangeGetAttribute(ctypes.byref(r), 4, 1, m, 1 << 21), r.value), (0, 1))
check("pref", (lib.hipMemRangeGetAttribute(ctypes.byref(r), 4, 2, m, 1 << 21), r.value), (0, 0))
check("coherency", lib.hipMemRangeGetAttribute(ctypes.byref(r), 4, 100, m, 1 << 21), 1)
check("prefetch", lib.hipMemPrefetchAsync(m, 1 << 21, 0, None), 0)
check("prefetch cpu", lib.hipMemPrefetchAsync(m, 4096, -1, None), 0)
s = V()
check("stream", lib.hipStreamCreate(ctypes.byref(s)), 0)
check("sync", lib.hipStreamSynchronize(s), 0)
check("destroy", lib.hipStreamDestroy(s), 0)
check("destroy twice", lib.hipStreamDestroy(s), 400)
s1, s2, ev, ap = V(), V(), V(), V()
check("stream 1", lib.hipStreamCreateWithFlags(ctypes.byref(s1), 1), 0)
check("stream 2", lib.hipStreamCreateWithFlags(ctypes.byref(s2), 1), 0)
check("malloc async", lib.hipMallocAsync(ctypes.byref(ap), 1 << 20, s1), 0)
check("async live", lib.hipdouble_live(b"async"), 1)
check("memset async", lib.hipMemset(ap, 0x33, 16), 0)
check("event", lib.hipEventCreateWithFlags(ctypes.byref(ev), 2), 0)
check("event bad flags", lib.hipEventCreateWithFlags(ctypes.byref(ev), 4), 1)
check("record", lib.hipEventRecord(ev, s1), 0)
check("wait", lib.hipStreamWaitEvent(s2, ev, 0), 0)
check("wait flags", lib.hipStreamWaitEvent(s2, ev, 1), 1)
check("free async other stream", lib.hipFreeAsync(ap, s2), 0)
check("free async twice", lib.hipFreeAsync(ap, s2), 1)
check("event sync", lib.hipEventSynchronize(ev), 0)
check("sync s2", lib.hipStreamSynchronize(s2), 0)
check("query", lib.hipEventQuery(ev), 0)
check("query unknown", lib.hipEventQuery(ctypes.addressof(n)), 400)
check("malloc async bad stream", lib.hipMallocAsync(ctypes.byref(ap), 64, ctypes.addressof(n)), 1)
check("event destroy", lib.hipEventDestroy(ev), 0)
check("event destroy twice", lib.hipEventDestroy(ev), 709)
check("async after free", lib.hipdouble_live(b"async"), 0)
check("event live", lib.hipdouble_live(b"event"), 0)
check("destroy 1", lib.hipStreamDestroy(s1), 0)
check("destroy 2", lib.hipStreamDestroy(s2), 0)
check("attr managed", (lib.hipPointerGetAttributes(ctypes.byref(a), m), a.type, a.managed), (0, 3, 1))
lib.hipdouble_set_version(50221153)
check("attr managed 5.2", (lib.hipPointerGetAttributes(ctypes.byref(a), m), a.type, a.managed), (0, 3, 1))
check("attr unknown 5.2", lib.hipPointerGetAttributes(ctypes.byref(a), ctypes.addressof(r)), 1)
lib.hipdouble_set_version(60200000)
rc = lib.hipPointerGetAttributes(ctypes.byref(a), ctypes.addressof(r))
check("attr unknown", (rc, a.type, a.device), (0, 0, -2))
check("free managed", lib.hipFree(m), 0)
prop = struct.pack("<iiii8sBBH4x", 1, 1, 1, 0, bytes(8), 0, 0, 0)
g = S()
check("gran", (lib.hipMemGetAllocationGranularity(ctypes.byref(g), prop, 0), g.value), (0, 2 << 20))
va, vh, rh, ih = V(), V(), V(), V()
check("reserve bad", lib.hipMemAddressReserve(ctypes.byref(va), 4096, 0, None, 0), 2)
check("reserve", lib.hipMemAddressReserve(ctypes.byref(va), 2 << 20, 0, None, 0), 0)
check("create", lib.hipMemCreate(ctypes.byref(vh), 2 << 20, prop, 0), 0)
check("map", lib.hipMemMap(va, 2 << 20, 0, vh, 0), 0)
loc = struct.pack("<ii", 1, 0)
acc = ctypes.c_ulonglong(9)
check("access0", (lib.hipMemGetAccess(ctypes.byref(acc), loc, va), acc.value), (0, 0))
check("setaccess", lib.hipMemSetAccess(va, 2 << 20, struct.pack("<iii", 1, 0, 3), 1), 0)
check("access3", (lib.hipMemGetAccess(ctypes.byref(acc), loc, va), acc.value), (0, 3))
check("memset", lib.hipMemset(va, 0x41, 16), 0)
check("retain", (lib.hipMemRetainAllocationHandle(ctypes.byref(rh), va), rh.value), (0, vh.value))
pbuf = ctypes.create_string_buffer(32)
check("props", (lib.hipMemGetAllocationPropertiesFromHandle(pbuf, vh), pbuf.raw[:16]), (0, prop[:16]))
fd = I(-1)
check("export", lib.hipMemExportToShareableHandle(ctypes.byref(fd), vh, 1, 0), 0)
check("import by value on 6.2", lib.hipMemImportFromShareableHandle(ctypes.byref(ih), fd.value, 1), 1)
check("import", lib.hipMemImportFromShareableHandle(ctypes.byref(ih), ctypes.addressof(fd), 1), 0)
lib.hipdouble_set_version(60100000)
check("export 6.1", lib.hipMemExportToShareableHandle(ctypes.byref(fd), vh, 1, 0), 801)
lib.hipdouble_set_version(60200000)
check("release import", lib.hipMemRelease(ih), 0)
check("release retain", lib.hipMemRelease(rh), 0)
check("release", lib.hipMemRelease(vh), 0)
check("unmap", lib.hipMemUnmap(va, 2 << 20), 0)
check("free va", lib.hipMemAddressFree(va, 2 << 20), 0)
os.close(fd.value)
for k in (b"device", b"host", b"managed", b"stream", b"vmm_handle", b"vmm_reservation", b"vmm_mapping",
          b"event", b"async"):
    check(k.decode(), lib.hipdouble_live(k), 0)
print("\\n".join(out) if out else "ok")
"""


@pytest.mark.gpu
def test_forward_mode_on_a_real_gpu() -> None:
    reason = _cuda_usable()
    if reason:
        pytest.skip(reason)
    path = build_double(mode="forward")
    env = dict(os.environ)
    env.pop("HIPDOUBLE_FAULTS", None)
    env.pop("HIPDOUBLE_VERSION", None)
    proc = subprocess.run(
        [sys.executable, "-c", FORWARD_CHILD, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if "no CUDA-capable device" in proc.stdout:
        pytest.skip(proc.stdout)
    assert proc.stdout.strip() == "ok", proc.stdout


FORWARD_SHARE_PARENT = """
import ctypes, os, socket, struct, subprocess, sys
lib = ctypes.CDLL(sys.argv[1])
V, S, I = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
class H(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]
for n, a in {
    "hipMalloc": [ctypes.POINTER(V), S], "hipFree": [V], "hipMemcpy": [V, V, S, I],
    "hipIpcGetMemHandle": [ctypes.POINTER(H), V],
    "hipMemAddressReserve": [ctypes.POINTER(V), S, S, V, ctypes.c_ulonglong],
    "hipMemCreate": [ctypes.POINTER(V), S, ctypes.c_char_p, ctypes.c_ulonglong],
    "hipMemMap": [V, S, S, V, ctypes.c_ulonglong], "hipMemSetAccess": [V, S, ctypes.c_char_p, S],
    "hipMemExportToShareableHandle": [V, V, I, ctypes.c_ulonglong],
    "hipMemUnmap": [V, S], "hipMemRelease": [V], "hipMemAddressFree": [V, S], "hipMemset": [V, I, S],
}.items():
    getattr(lib, n).argtypes = a
G = 2 << 20
d = V()
assert lib.hipMalloc(ctypes.byref(d), 4096) == 0
assert lib.hipMemcpy(d, b"ipc-fwd!", 8, 1) == 0
h = H()
assert lib.hipIpcGetMemHandle(ctypes.byref(h), d) == 0
prop = struct.pack("<iiii8sBBH4x", 1, 1, 1, 0, bytes(8), 0, 0, 0)
va, vh = V(), V()
assert lib.hipMemAddressReserve(ctypes.byref(va), G, 0, None, 0) == 0
assert lib.hipMemCreate(ctypes.byref(vh), G, prop, 0) == 0
assert lib.hipMemMap(va, G, 0, vh, 0) == 0
assert lib.hipMemSetAccess(va, G, struct.pack("<iii", 1, 0, 3), 1) == 0
assert lib.hipMemset(va, 0x56, G) == 0
fd = I(-1)
assert lib.hipMemExportToShareableHandle(ctypes.byref(fd), vh, 1, 0) == 0
a, b = socket.socketpair()
kid = subprocess.Popen([sys.executable, "-c", os.environ["CHILD_SCRIPT"], sys.argv[1], bytes(h).hex(),
                        str(b.fileno())], pass_fds=[b.fileno()], stdout=subprocess.PIPE, text=True)
socket.send_fds(a, [b"fd"], [fd.value])
out, _ = kid.communicate(timeout=60)
back = ctypes.create_string_buffer(8)
assert lib.hipMemcpy(back, d, 8, 2) == 0
vback = ctypes.create_string_buffer(4)
assert lib.hipMemcpy(vback, va, 4, 2) == 0
os.close(fd.value)
assert lib.hipMemUnmap(va, G) == 0 and lib.hipMemRelease(vh) == 0 and lib.hipMemAddressFree(va, G) == 0
assert lib.hipFree(d) == 0
print(out.strip(), back.raw.decode(), vback.raw.decode(), kid.returncode)
"""

FORWARD_SHARE_CHILD = """
import ctypes, socket, struct, sys
lib = ctypes.CDLL(sys.argv[1])
V, S, I = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
class H(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]
for n, a in {
    "hipMemcpy": [V, V, S, I], "hipIpcOpenMemHandle": [ctypes.POINTER(V), H, ctypes.c_uint],
    "hipIpcCloseMemHandle": [V], "hipMemImportFromShareableHandle": [ctypes.POINTER(V), V, I],
    "hipMemAddressReserve": [ctypes.POINTER(V), S, S, V, ctypes.c_ulonglong],
    "hipMemMap": [V, S, S, V, ctypes.c_ulonglong], "hipMemSetAccess": [V, S, ctypes.c_char_p, S],
    "hipMemUnmap": [V, S], "hipMemRelease": [V], "hipMemAddressFree": [V, S],
}.items():
    getattr(lib, n).argtypes = a
G = 2 << 20
h = H(); ctypes.memmove(ctypes.byref(h), bytes.fromhex(sys.argv[2]), 64)
p = V()
rc0 = lib.hipIpcOpenMemHandle(ctypes.byref(p), h, 0)   # 6.2 wants 1
assert lib.hipIpcOpenMemHandle(ctypes.byref(p), h, 1) == 0
seen = ctypes.create_string_buffer(8)
assert lib.hipMemcpy(seen, p, 8, 2) == 0
assert lib.hipMemcpy(p, b"kidwrote", 8, 1) == 0
assert lib.hipIpcCloseMemHandle(p) == 0
sock = socket.socket(fileno=int(sys.argv[3]))
_, fds, _, _ = socket.recv_fds(sock, 16, 1)
fd = ctypes.c_int(fds[0])
vh, va = V(), V()
assert lib.hipMemImportFromShareableHandle(ctypes.byref(vh), ctypes.addressof(fd), 1) == 0
assert lib.hipMemAddressReserve(ctypes.byref(va), G, 0, None, 0) == 0
assert lib.hipMemMap(va, G, 0, vh, 0) == 0
assert lib.hipMemSetAccess(va, G, struct.pack("<iii", 1, 0, 3), 1) == 0
vseen = ctypes.create_string_buffer(4)
assert lib.hipMemcpy(vseen, va, 4, 2) == 0
assert lib.hipMemcpy(va, b"WXYZ", 4, 1) == 0
assert lib.hipMemUnmap(va, G) == 0 and lib.hipMemRelease(vh) == 0 and lib.hipMemAddressFree(va, G) == 0
print(rc0, seen.raw.decode(), vseen.raw.decode())
"""


@pytest.mark.gpu
def test_forward_mode_ipc_and_vmm_between_processes() -> None:
    reason = _cuda_usable()
    if reason:
        pytest.skip(reason)
    path = build_double(mode="forward")
    env = dict(os.environ)
    env.pop("HIPDOUBLE_FAULTS", None)
    env.pop("HIPDOUBLE_VERSION", None)
    env["CHILD_SCRIPT"] = FORWARD_SHARE_CHILD
    proc = subprocess.run(
        [sys.executable, "-c", FORWARD_SHARE_PARENT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "1 ipc-fwd! VVVV kidwrote WXYZ 0", proc.stdout + proc.stderr
