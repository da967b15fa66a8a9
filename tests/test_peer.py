"""Several devices over a recording runtime of two devices whose memory is host memory:
the PEER group (aml_core.gpu.runtime.PeerOps), copy_peer (aml_core.gpu.peer),
selected_device (aml_core.gpu.devices) and one device per pool (GpuArea._pool_binding,
aml_core.protocols.PoolBinding):
what is checked before the native operation, which device each native call runs on, and
that the caller's device comes back, also on failure."""

from __future__ import annotations

import ctypes

import pytest

import aml_core
from aml_core.buffer import DLDeviceType
from aml_core.errors import AMLBusyError, AMLNotSupported, AMLTypeError, AMLValueError, ErrorTable
from aml_core.gpu import GpuArea, GpuFlags, Group, PeerOps
from aml_core.gpu.devices import selected_device
from aml_core.gpu.peer import copy_peer
from aml_core.gpu.runtime import AllocationOps, PointerAttributes, Runtime, RuntimeTraits
from aml_core.specs import DeviceInfo

TRAITS = RuntimeTraits(
    name="fake", dl_device=DLDeviceType.CUDA, dl_host=DLDeviceType.CUDA_HOST, dl_managed=DLDeviceType.CUDA
)
#: The native code the fake's failures carry (EBUSY in its table, to see it come through).
BUSY = 7


class TwoDevices(Runtime, AllocationOps, PeerOps):
    """Two devices over host memory, recording every native call with the device current
    when it ran; peer access enabled per (device, peer) as the runtimes keep it."""

    def __init__(self) -> None:
        self.traits = TRAITS
        self.errors = ErrorTable("fake", {BUSY: AMLBusyError.code})
        self.current = 0
        self.calls: list[tuple[str, int]] = []
        self.enabled: set[tuple[int, int]] = set()
        self.linked = {(0, 1), (1, 0)}
        self.fail: str | None = None
        self._blocks: dict[int, ctypes.Array[ctypes.c_char]] = {}

    def _record(self, name: str) -> None:
        self.calls.append((name, self.current))
        if self.fail == name:
            raise self.errors.error(name, BUSY)

    # devices
    def device_count(self) -> int:
        return 2

    def get_device(self) -> int:
        return self.current

    def _set_device(self, device: int) -> None:
        self._record("set_device")
        self.current = device

    def synchronize(self) -> None:
        pass

    def _device_info(self, device: int) -> DeviceInfo:
        return DeviceInfo(index=device, name="fake")

    # allocation: host memory
    def _malloc(self, size: int) -> int:
        block = ctypes.create_string_buffer(size)
        self._blocks[ctypes.addressof(block)] = block
        return ctypes.addressof(block)

    def _free(self, ptr: int) -> None:
        del self._blocks[ptr]

    def _host_alloc(self, size: int, portable: bool, mapped: bool) -> int:
        return self._malloc(size)

    def _free_host(self, ptr: int) -> None:
        self._free(ptr)

    def _host_register(self, ptr: int, size: int, portable: bool, mapped: bool) -> None:
        pass

    def _host_unregister(self, ptr: int) -> None:
        pass

    def _host_device_pointer(self, ptr: int) -> int:
        return ptr

    def _pointer_attributes(self, ptr: int) -> PointerAttributes:
        return PointerAttributes("device", self.current, ptr, 0, False)

    def _memcpy(self, dst: int, src: int, size: int) -> None:
        ctypes.memmove(dst, src, size)

    def _memset(self, ptr: int, value: int, size: int) -> None:
        ctypes.memset(ptr, value, size)

    # peer
    def _can_access_peer(self, device: int, peer: int) -> bool:
        self._record("can_access_peer")
        return (device, peer) in self.linked

    def _enable_peer_access(self, peer: int) -> bool:
        self._record("enable_peer_access")
        pair = (self.current, peer)
        if pair in self.enabled:
            return False
        self.enabled.add(pair)
        return True

    def _disable_peer_access(self, peer: int) -> bool:
        self._record("disable_peer_access")
        pair = (self.current, peer)
        if pair not in self.enabled:
            return False
        self.enabled.discard(pair)
        return True

    def _memcpy_peer(self, dst: int, dst_device: int, src: int, src_device: int, size: int) -> None:
        self._record("memcpy_peer")
        self.copies.append((dst_device, src_device, size))
        ctypes.memmove(dst, src, size)

    copies: list[tuple[int, int, int]]


@pytest.fixture
def rt() -> TwoDevices:
    runtime = TwoDevices()
    runtime.copies = []
    return runtime


def test_the_group_is_provided(rt: TwoDevices) -> None:
    assert Group.PEER in rt.groups()
    assert rt.require(Group.PEER) is rt


def test_a_device_is_not_its_own_peer(rt: TwoDevices) -> None:
    assert rt.can_access_peer(1, 1) is False
    assert rt.calls == []  # answered without a native call
    assert rt.can_access_peer(0, 1) is True
    rt.linked.clear()
    assert rt.can_access_peer(0, 1) is False
    for enable in (rt.enable_peer_access, rt.disable_peer_access):
        with pytest.raises(AMLValueError, match="not its own peer"):
            enable(0)  # the current device, 0, as its own peer
        with pytest.raises(AMLValueError, match="not its own peer"):
            enable(1, 1)
    assert [c for c, _ in rt.calls] == ["can_access_peer", "can_access_peer"]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda rt: rt.can_access_peer(0, 2), AMLValueError),
        (lambda rt: rt.can_access_peer(2, 0), AMLValueError),
        (lambda rt: rt.can_access_peer(-1, 0), AMLValueError),
        (lambda rt: rt.can_access_peer(0, "1"), AMLTypeError),
        (lambda rt: rt.can_access_peer(True, 1), AMLTypeError),
        (lambda rt: rt.enable_peer_access(2), AMLValueError),
        (lambda rt: rt.enable_peer_access(-1), AMLValueError),
        (lambda rt: rt.enable_peer_access(1, 2), AMLValueError),
        (lambda rt: rt.enable_peer_access(1.0), AMLTypeError),
        (lambda rt: rt.disable_peer_access(1, "0"), AMLTypeError),
        (lambda rt: rt.memcpy_peer(4096, 2, 8192, 0, 16), AMLValueError),
        (lambda rt: rt.memcpy_peer(4096, 0, 8192, -1, 16), AMLValueError),
        (lambda rt: rt.memcpy_peer(0, 0, 8192, 1, 16), AMLValueError),
        (lambda rt: rt.memcpy_peer(4096, 0, 8192, 1, 0), AMLValueError),
    ],
)
def test_bad_values_never_reach_the_native_operation(rt: TwoDevices, call: object, error: type) -> None:
    with pytest.raises(error):
        call(rt)  # type: ignore[operator]
    assert rt.calls == []


def test_enable_and_disable_are_idempotent(rt: TwoDevices) -> None:
    assert rt.enable_peer_access(1) is True
    assert rt.enable_peer_access(1) is False
    assert rt.enabled == {(0, 1)}
    assert rt.disable_peer_access(1) is True
    assert rt.disable_peer_access(1) is False
    assert rt.enabled == set()
    assert ("set_device", 0) not in rt.calls  # the current device: no selection


def test_another_device_is_selected_and_the_callers_restored(rt: TwoDevices) -> None:
    assert rt.enable_peer_access(0, device=1) is True
    assert rt.enabled == {(1, 0)}
    names = [c for c in rt.calls if c[0] != "can_access_peer"]
    assert names == [("set_device", 0), ("enable_peer_access", 1), ("set_device", 1)]
    assert rt.current == 0
    rt.calls.clear()
    # a negative device is the current device, as an area's
    rt.current = 1
    assert rt.disable_peer_access(0, -1) is True
    assert ("set_device", 1) not in rt.calls
    assert rt.current == 1


def test_the_callers_device_is_restored_when_the_native_call_fails(rt: TwoDevices) -> None:
    rt.fail = "enable_peer_access"
    with pytest.raises(AMLBusyError) as info:
        rt.enable_peer_access(0, device=1)
    assert info.value.native is not None
    assert info.value.native.function == "enable_peer_access"
    assert rt.current == 0
    assert rt.calls[-1] == ("set_device", 1)  # back to the caller's device 0
    assert rt.enabled == set()


def test_a_failing_restore_is_raised(rt: TwoDevices) -> None:
    """The enable ran on device 1; restoring device 0 fails: the caller learns it (the
    enable stays in effect, as the runtime did it)."""
    calls = 0

    def set_device(device: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise rt.errors.error("set_device", BUSY)
        rt.current = device

    rt._set_device = set_device  # type: ignore[method-assign]
    with pytest.raises(AMLBusyError):
        rt.enable_peer_access(0, device=1)
    assert rt.enabled == {(1, 0)}


def test_an_error_and_a_failing_restore_are_both_told(rt: TwoDevices) -> None:
    rt.fail = "enable_peer_access"
    real = rt._set_device

    def set_device(device: int) -> None:
        if device == 0:
            raise rt.errors.error("set_device", BUSY)
        real(device)

    rt._set_device = set_device  # type: ignore[method-assign]
    with pytest.raises(AMLBusyError) as info:
        rt.enable_peer_access(0, device=1)
    assert info.value.native is not None
    assert info.value.native.function == "enable_peer_access"
    assert any("restoring the caller's device 0 failed too" in n for n in info.value.__notes__)


def test_a_pair_without_a_peer_path(rt: TwoDevices) -> None:
    rt.linked = {(1, 0)}
    with pytest.raises(AMLNotSupported, match="cannot access device 1's memory directly"):
        rt.enable_peer_access(1)
    assert rt.disable_peer_access(1) is False  # never enabled
    assert [c for c, _ in rt.calls] == ["can_access_peer", "can_access_peer"]


def test_selected_device_yields_the_callers(rt: TwoDevices) -> None:
    with selected_device(rt, 1) as caller:
        assert caller == 0
        assert rt.current == 1
    assert rt.current == 0
    with selected_device(rt, 0) as caller:
        assert caller == 0
    assert rt.calls == [("set_device", 0), ("set_device", 1)]
    with pytest.raises(KeyError), selected_device(rt, 1):
        raise KeyError("the block's own error")
    assert rt.current == 0


# -- copy_peer -----------------------------------------------------------------------------------
def test_copy_peer_names_each_buffers_device(rt: TwoDevices) -> None:
    with GpuArea(rt, 0, GpuFlags.DEFAULT) as first, GpuArea(rt, 1, GpuFlags.DEFAULT) as second:
        a, b = first.mmap(64), second.mmap(64)
        assert (a.device, b.device) == (0, 1)
        first.write(a, bytes(range(64)))
        copy_peer(rt, b, a)
        assert second.read(b) == bytes(range(64))
        copy_peer(rt, a, b, 8, dst_offset=56, src_offset=0)
        assert first.read(a, 8, 56) == bytes(range(8))
        assert rt.copies == [(1, 0, 64), (0, 1, 8)]


def test_copy_peer_checks_before_the_copy(rt: TwoDevices) -> None:
    with (
        GpuArea(rt, 0, GpuFlags.DEFAULT) as first,
        GpuArea(rt, 1, GpuFlags.DEFAULT) as second,
        GpuArea(rt, 0, GpuFlags.ALLOC_HOST) as host,
    ):
        a, b, h = first.mmap(64), second.mmap(32), host.mmap(64)
        for call, error in [
            (lambda: copy_peer(rt, b, a), AMLValueError),  # 64 bytes do not fit in 32
            (lambda: copy_peer(rt, b, a, 16, dst_offset=17), AMLValueError),
            (lambda: copy_peer(rt, a, b, 16, src_offset=17), AMLValueError),
            (lambda: copy_peer(rt, a, b, 0), AMLValueError),
            (lambda: copy_peer(rt, a, b, src_offset=32), AMLValueError),  # nothing left to copy
            (lambda: copy_peer(rt, a, b, dst_offset=-1), AMLValueError),
            (lambda: copy_peer(rt, a, h, 16), AMLValueError),  # pinned host memory
            (lambda: copy_peer(rt, a, b"bytes", 16), AMLTypeError),  # type: ignore[arg-type]
        ]:
            with pytest.raises(error):
                call()
        second.munmap(b)
        with pytest.raises(AMLValueError, match="freed"):
            copy_peer(rt, a, b, 16)
        other = TwoDevices()
        other.traits = RuntimeTraits(
            name="other", dl_device=DLDeviceType.CUDA, dl_host=DLDeviceType.CUDA, dl_managed=DLDeviceType.CUDA
        )
        with GpuArea(other, 0, GpuFlags.DEFAULT) as foreign:
            f = foreign.mmap(64)
            with pytest.raises(AMLValueError, match="'other' backend"):
                copy_peer(rt, a, f)
        assert ("memcpy_peer", 0) not in rt.calls
        assert rt.copies == []


def test_copy_peer_sizes_and_offsets_follow_the_size_rule(rt: TwoDevices) -> None:
    """The compiled checks take exact ints at C speed and give anything else to the one
    size rule (aml_core.checks.size): integers such as NumPy's are taken, a bool, a float
    or a size past the address space refused, as every size in aml is."""
    import numpy as np

    from aml_core._buffer import BufferBase
    from aml_core.errors import AMLDomainError

    with GpuArea(rt, 0, GpuFlags.DEFAULT) as first, GpuArea(rt, 1, GpuFlags.DEFAULT) as second:
        a, b = first.mmap(64), second.mmap(64)
        first.write(a, bytes(range(64)))
        copy_peer(rt, b, a, np.int64(8), dst_offset=np.uint16(8), src_offset=np.int32(4))
        assert second.read(b, 8, 8) == bytes(range(4, 12))
        assert rt.copies == [(1, 0, 8)]
        assert all(type(v) is int for v in rt.copies[0])
        for kwargs, error, words in [
            ({"size": True}, AMLTypeError, "bool"),
            ({"size": 8.0}, AMLTypeError, "size"),
            ({"size": 1 << 63}, AMLDomainError, "larger than the address space"),
            ({"size": -8}, AMLValueError, "> 0"),
            ({"dst_offset": 1.5}, AMLTypeError, "dst_offset"),
            ({"src_offset": 1 << 64}, AMLDomainError, "src_offset"),
            ({"src_offset": -1}, AMLValueError, "src_offset must be >= 0"),
        ]:
            with pytest.raises(error, match=words):
                copy_peer(rt, b, a, **kwargs)  # type: ignore[arg-type]
        with pytest.raises(AMLValueError, match="src was never mapped by an area"):
            copy_peer(rt, b, BufferBase(), 8)  # type: ignore[arg-type]
        assert len(rt.copies) == 1


# -- one device per pool ---------------------------------------------------------------------
def test_a_pool_over_the_current_device_is_bound_to_one_device(rt: TwoDevices) -> None:
    """A pool over an area of the current device caches the device current when it is
    made: a block freed there is never handed out as the other device's memory."""
    with GpuArea(rt, -1, GpuFlags.DEFAULT) as area:
        pool = aml_core.pool(area)
        assert pool.device == 0
        rt.current = 1
        buf = pool.mmap(4096)
        assert buf.device == 0  # the slab was allocated with device 0 selected
        assert rt.calls == [("set_device", 1), ("set_device", 0)]
        assert rt.current == 1
        ptr = buf.ptr
        pool.munmap(buf)
        again = pool.mmap(4096)
        assert (again.ptr, again.device) == (ptr, 0)
        other = aml_core.pool(area)  # made on device 1: device 1's pool
        assert other.device == 1
        mine = other.mmap(4096)
        assert mine.device == 1
        assert mine.ptr != ptr
        other.close()
        pool.close()


def test_a_pool_keeps_a_fixed_device(rt: TwoDevices) -> None:
    with GpuArea(rt, 1, GpuFlags.DEFAULT) as area:
        pool = aml_core.pool(area)
        assert pool.device == 1
        with pool.mmap(64) as buf:
            assert buf.device == 1
        named = aml_core.pool(area, options={"device": 0})  # options name the device
        assert named.device == 0
        with named.mmap(64) as buf:
            assert buf.device == 0
        named.close()
        pool.close()
