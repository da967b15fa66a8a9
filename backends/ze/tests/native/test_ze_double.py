"""The driver double itself: its control interface, its validation-layer-like checks, and
that its forward-to-CUDA mode compiles (against CUDA's cuda.h where one is found:
``ZEDOUBLE_CUDA_INCLUDE``, ``$CUDA_HOME/include`` or /usr/local/cuda/include)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest
from aml_ze import abi as C
from ze_helpers import ZeDouble, build


def _cuda_include() -> Path | None:
    for candidate in (
        os.environ.get("ZEDOUBLE_CUDA_INCLUDE"),
        os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include"),
    ):
        if candidate and Path(candidate, "cuda.h").exists():
            return Path(candidate)
    return None


@pytest.mark.parametrize("sysman", sorted(build.SYSMAN_VARIANTS))
def test_forward_mode_compiles(tmp_path: Path, sysman: str) -> None:
    include = _cuda_include()
    if include is None:
        pytest.skip("no cuda.h (set ZEDOUBLE_CUDA_INCLUDE to CUDA 13's include directory)")
    build.compile_forward_object(include, tmp_path / "double.o", sysman)
    assert (tmp_path / "double.o").stat().st_size > 0


def test_control_interface(ze: ZeDouble) -> None:
    with pytest.raises(ValueError, match="no function"):
        ze.inject("cudaMalloc", 1)
    with pytest.raises(ValueError, match="bad skip"):
        ze.inject("zeMemFree", 1, skip=-1)
    with pytest.raises(ValueError, match="unknown kind"):
        ze.ctl.live("streams")
    assert ze.ctl.mode in ("host", "forward")


def test_injection_skip_and_times(ze: ZeDouble) -> None:
    lib = ctypes.CDLL(str(ze.path))
    lib.zeInit.restype = ctypes.c_uint32
    before = ze.calls("zeInit")  # forward mode has initialised already
    ze.inject("zeInit", C.ZE_RESULT_ERROR_DEVICE_LOST, skip=1, times=2)
    results = [lib.zeInit(0) for _ in range(4)]
    assert results == [0, C.ZE_RESULT_ERROR_DEVICE_LOST, C.ZE_RESULT_ERROR_DEVICE_LOST, 0]
    assert ze.calls("zeInit") == before + 4


def test_checks_like_the_validation_layer(ze: ZeDouble) -> None:
    lib = ctypes.CDLL(str(ze.path))
    for name in ("zeInit", "zeContextCreate", "zeMemAllocDevice"):
        getattr(lib, name).restype = ctypes.c_uint32
    assert lib.zeInit(0x4) == C.ZE_RESULT_ERROR_INVALID_ENUMERATION
    assert lib.zeContextCreate(None, None, None) == C.ZE_RESULT_ERROR_INVALID_NULL_HANDLE
    out = ctypes.c_void_p()
    assert lib.zeMemAllocDevice(None, None, 64, 64, None, ctypes.byref(out)) == (
        C.ZE_RESULT_ERROR_INVALID_NULL_HANDLE
    )


def test_sysman_handles_need_their_initialisation(ze: ZeDouble) -> None:
    """As Intel's driver: a core device handle is a Sysman handle only with
    ZES_ENABLE_SYSMAN=1 at zeInit (the fixture clears it), Sysman's own only after zesInit."""
    lib = ctypes.CDLL(str(ze.path))
    for name in ("zeInit", "zeDriverGet", "zeDeviceGet", "zesInit", "zesDriverGet", "zesDeviceGet"):
        getattr(lib, name).restype = ctypes.c_uint32
    lib.zesDeviceEnumMemoryModules.restype = ctypes.c_uint32
    count = ctypes.c_uint32(1)
    driver, device = ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.zeInit(0) == C.ZE_RESULT_SUCCESS
    assert lib.zeDriverGet(ctypes.byref(count), ctypes.byref(driver)) == C.ZE_RESULT_SUCCESS
    assert lib.zeDeviceGet(driver, ctypes.byref(count), ctypes.byref(device)) == C.ZE_RESULT_SUCCESS
    modules = ctypes.c_uint32(0)
    assert lib.zesDeviceEnumMemoryModules(device, ctypes.byref(modules), None) == (
        C.ZE_RESULT_ERROR_UNINITIALIZED
    )
    assert lib.zesDriverGet(ctypes.byref(count), None) == C.ZE_RESULT_ERROR_UNINITIALIZED
    assert lib.zesInit(0x2) == C.ZE_RESULT_ERROR_INVALID_ENUMERATION
    assert lib.zesInit(0) == C.ZE_RESULT_SUCCESS
    count.value = 1
    assert lib.zesDriverGet(ctypes.byref(count), ctypes.byref(driver)) == C.ZE_RESULT_SUCCESS
    assert lib.zesDeviceGet(driver, ctypes.byref(count), ctypes.byref(device)) == C.ZE_RESULT_SUCCESS
    assert lib.zesDeviceEnumMemoryModules(device, ctypes.byref(modules), None) == C.ZE_RESULT_SUCCESS
    assert modules.value == 2  # system memory, then the device's own
