"""Peer access and copies between devices on the HIP double (docs/aml-contract.md#peer-access):
``hipDeviceCanAccessPeer``, the idempotent enable/disable with the caller's device restored,
the translation of HIP's answers, and ``copy_peer``. Host mode emulates two devices (every
pair linked unless ``set_peer`` says otherwise); forward mode needs two GPUs for those
tests (marked ``gpu2``) and runs the single-device ones on one."""

from __future__ import annotations

from collections.abc import Callable

import aml_hip
import pytest
from aml_hip.abi import hip_version
from hip_helpers import HipDouble

from aml_core.errors import AMLError, AMLFailure, AMLNotSupported, AMLTypeError, AMLValueError


# -- one device: what is answered or refused before a native call -----------------------------------
def test_a_device_is_not_its_own_peer(hip: HipDouble) -> None:
    assert aml_hip.can_access_peer(0, 0) is False
    assert hip.calls("hipDeviceCanAccessPeer") == 0
    with pytest.raises(AMLValueError, match="not its own peer"):
        aml_hip.enable_peer_access(0)
    with pytest.raises(AMLValueError, match="not its own peer"):
        aml_hip.disable_peer_access(0, device=0)
    assert hip.calls("hipDeviceEnablePeerAccess") == hip.calls("hipDeviceDisablePeerAccess") == 0


def test_devices_past_the_count_are_einval(hip: HipDouble) -> None:
    n = aml_hip.get_runtime().device_count()
    for call in (
        lambda: aml_hip.can_access_peer(0, n),
        lambda: aml_hip.can_access_peer(n, 0),
        lambda: aml_hip.enable_peer_access(n),
        lambda: aml_hip.disable_peer_access(0, device=n),
    ):
        with pytest.raises(AMLValueError, match=f"not in 0..{n - 1}"):
            call()
    with pytest.raises(AMLTypeError):
        aml_hip.can_access_peer(0, "1")  # type: ignore[arg-type]
    assert hip.calls("hipDeviceCanAccessPeer") == 0
    assert hip.calls("hipSetDevice") == 0


def test_copy_peer_on_one_device(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    """Both buffers on device 0: hipMemcpyPeer names device 0 twice, then the null stream is
    synchronized, and the bytes are there."""
    area = areas(0)
    src, dst = area.mmap(4096), area.mmap(4096)
    area.write(src, bytes(range(256)) * 16)
    aml_hip.copy_peer(dst, src, 1024, dst_offset=512, src_offset=256)
    assert area.read(dst, 1024, 512) == (bytes(range(256)) * 16)[256 : 256 + 1024]
    assert hip.last("hipMemcpyPeer") == (dst.ptr + 512, 0, src.ptr + 256, 0, 1024)
    assert hip.last("hipStreamSynchronize") == (0,)
    with pytest.raises(AMLValueError, match="do not fit"):
        aml_hip.copy_peer(dst, src, 4096, dst_offset=1)
    assert hip.calls("hipMemcpyPeer") == 1
    area.munmap(src)
    area.munmap(dst)


def test_copy_peer_refuses_host_memory(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    device, host = areas(0), areas(0, aml_hip.HipFlags.ALLOC_HOST)
    a, h = device.mmap(4096), host.mmap(4096)
    with pytest.raises(AMLValueError, match="copies device memory"):
        aml_hip.copy_peer(a, h)
    assert hip.calls("hipMemcpyPeer") == 0
    device.munmap(a)
    host.munmap(h)


# -- two devices ----------------------------------------------------------------------------------
@pytest.mark.gpu2
def test_enable_and_disable_are_idempotent(hip: HipDouble) -> None:
    hip.need_devices(2)
    rt = aml_hip.get_runtime()
    rt.set_device(0)
    if not aml_hip.can_access_peer(0, 1):
        pytest.skip("device 0 has no peer path to device 1 here")
    assert aml_hip.enable_peer_access(1) is True
    assert hip.live()["peer"] == 1
    assert aml_hip.enable_peer_access(1) is False  # hipErrorPeerAccessAlreadyEnabled: an answer
    assert hip.calls("hipDeviceEnablePeerAccess") == 2
    assert hip.last("hipDeviceEnablePeerAccess") == (1, 0)  # flags 0
    assert aml_hip.disable_peer_access(1) is True
    assert aml_hip.disable_peer_access(1) is False  # hipErrorPeerAccessNotEnabled: an answer
    assert hip.live()["peer"] == 0
    assert hip.calls("hipSetDevice") == 1  # rt.set_device(0) above: nothing selected


@pytest.mark.gpu2
def test_another_device_is_selected_and_restored(hip: HipDouble) -> None:
    hip.need_devices(2)
    rt = aml_hip.get_runtime()
    rt.set_device(0)
    sets = hip.calls("hipSetDevice")
    assert aml_hip.enable_peer_access(0, device=1) is True
    assert rt.get_device() == 0
    assert hip.calls("hipSetDevice") == sets + 2
    assert hip.last("hipSetDevice") == (0,)
    assert aml_hip.disable_peer_access(0, device=1) is True
    assert rt.get_device() == 0


@pytest.mark.gpu2
@pytest.mark.host_double
@pytest.mark.parametrize("version", [hip_version(6, 2), hip_version(7, 0)], ids=["6.2", "7.0"])
def test_an_answer_leaves_no_last_error(hip: HipDouble, version: int) -> None:
    """HIP 7 keeps the last real error until hipGetLastError reads it: the idempotent
    calls read it, so "already enabled" does not surface in a later check."""
    hip.use_version(version)
    hip.need_devices(2)
    peek = hip.ctl.lib.hipPeekAtLastError  # the same library, this thread's last error
    assert aml_hip.enable_peer_access(1) is True
    assert aml_hip.enable_peer_access(1) is False
    assert peek() == 0
    assert aml_hip.disable_peer_access(1) is True
    assert aml_hip.disable_peer_access(1) is False
    assert peek() == 0
    assert hip.calls("hipGetLastError") == 2


@pytest.mark.gpu2
@pytest.mark.host_double
def test_a_pair_without_a_peer_path(hip: HipDouble) -> None:
    hip.need_devices(2)
    hip.ctl.set_peer(0, 1, False)
    assert aml_hip.can_access_peer(0, 1) is False
    assert aml_hip.can_access_peer(1, 0) is True  # one-way
    with pytest.raises(AMLNotSupported, match="cannot access device 1's memory directly"):
        aml_hip.enable_peer_access(1)
    assert aml_hip.disable_peer_access(1) is False
    assert hip.calls("hipDeviceEnablePeerAccess") == hip.calls("hipDeviceDisablePeerAccess") == 0


@pytest.mark.gpu2
@pytest.mark.host_double
@pytest.mark.parametrize(
    ("error", "cls"),
    [(217, AMLNotSupported), (101, AMLValueError), (1, AMLValueError), (999, AMLFailure), (705, AMLFailure)],
)
def test_enable_errors_are_translated(hip: HipDouble, error: int, cls: type[AMLError]) -> None:
    """hipErrorPeerAccessUnsupported (217) is ENOTSUP; "not enabled" (705) is no answer of
    an enable: FAILURE. The caller's device comes back after the failure."""
    hip.need_devices(2)
    rt = aml_hip.get_runtime()
    hip.inject("hipDeviceEnablePeerAccess", error)
    with pytest.raises(cls) as info:
        aml_hip.enable_peer_access(0, device=1)
    assert info.value.native is not None
    assert (info.value.native.function, info.value.native.code) == ("hipDeviceEnablePeerAccess", error)
    assert rt.get_device() == 0
    assert hip.live()["peer"] == 0


@pytest.mark.gpu2
@pytest.mark.host_double
def test_raw_peer_calls_follow_clr(hip: HipDouble) -> None:
    """The double answers as CLR's hip_peer.cpp: 0 for a device and itself (even out of
    range), hipErrorInvalidDevice for a bad index or an unlinked pair, InvalidValue for
    flags, hipMemcpyPeer checks both devices."""
    import ctypes

    hip.need_devices(2)
    lib = aml_hip.get_runtime().lib
    can = ctypes.c_int(7)
    assert lib.raw("hipDeviceCanAccessPeer", ctypes.byref(can), 5, 5) == 0
    assert can.value == 0
    assert lib.raw("hipDeviceCanAccessPeer", ctypes.byref(can), 0, 2) == 101
    assert lib.raw("hipDeviceEnablePeerAccess", 1, 1) == 1
    assert lib.raw("hipDeviceEnablePeerAccess", 0, 0) == 101  # the current device itself
    assert lib.raw("hipDeviceDisablePeerAccess", 1) == 705
    assert lib.raw("hipMemcpyPeer", None, 2, None, 0, 0) == 101
    lib.raw("hipGetLastError")


@pytest.mark.gpu2
def test_copy_peer_between_devices(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    hip.need_devices(2)
    first, second = areas(0), areas(1)
    a, b = first.mmap(1 << 16), second.mmap(1 << 16)
    data = bytes(range(251)) * 261 + b"x" * 25
    first.write(a, data)
    aml_hip.copy_peer(b, a)
    assert second.read(b) == data
    assert hip.last("hipMemcpyPeer") == (b.ptr, 1, a.ptr, 0, 1 << 16)
    assert aml_hip.get_runtime().get_device() == 0
    first.munmap(a)
    second.munmap(b)
