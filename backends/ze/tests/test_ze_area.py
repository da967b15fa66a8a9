"""AML's Level Zero area on the driver double: the conformance kit for device, shared
and host areas, and what aml_area_ze_* do (one context per area, the native call of
each kind, alignment, flags, allocation properties, the default areas, the registry)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import aml_ze
import pytest
from aml_ze import ZeDeviceFlags, ZeFlags, ZeHostFlags
from ze_helpers import ZeDouble

import aml_core.registry
from aml_core.area import Area
from aml_core.buffer import Buffer, DLDeviceType
from aml_core.errors import AMLTypeError
from aml_core.specs import Capability, Kind
from aml_core.testing import AreaConformance


class _OnDouble(AreaConformance):
    """Device memory is read and written through the double (aml-ze has no copies)."""

    double: ZeDouble | None = None

    def write(self, area: Area, buf: Buffer, data: bytes) -> None:
        if buf.host_accessible or self.double is None:
            super().write(area, buf, data)
        else:
            self.double.ctl.write(buf.ptr, data)

    def read(self, area: Area, buf: Buffer, size: int) -> bytes:
        if buf.host_accessible or self.double is None:
            return super().read(area, buf, size)
        data: bytes = self.double.ctl.read(buf.ptr, size)
        return data


class TestDeviceArea(_OnDouble):
    @pytest.fixture
    def area(self, ze: ZeDouble) -> Iterator[aml_ze.ZeArea]:
        self.double = ze
        with aml_ze.device_area() as area:
            yield area


class TestSharedArea(_OnDouble):
    @pytest.fixture
    def area(self, ze: ZeDouble) -> Iterator[aml_ze.ZeArea]:
        self.double = ze
        with aml_ze.device_area(flags=ZeFlags.SHARED) as area:
            yield area


class TestHostArea(_OnDouble):
    @pytest.fixture
    def area(self, ze: ZeDouble) -> Iterator[aml_ze.ZeArea]:
        self.double = ze
        with aml_ze.host_area() as area:
            yield area


@pytest.mark.parametrize(
    ("kind", "call", "live", "memory_type", "dl", "host"),
    [
        ("device", "zeMemAllocDevice", "device", "device", DLDeviceType.ONEAPI, False),
        ("shared", "zeMemAllocShared", "shared", "shared", DLDeviceType.ONEAPI, True),
        ("host", "zeMemAllocHost", "host", "host", DLDeviceType.CPU, True),
    ],
)
def test_each_kind_maps_with_its_call(
    ze: ZeDouble,
    areas: Callable[..., aml_ze.ZeArea],
    kind: str,
    call: str,
    live: str,
    memory_type: str,
    dl: DLDeviceType,
    host: bool,
) -> None:
    area = areas(kind)
    buf = area.mmap(1000)
    assert ze.calls(call) == 1
    assert ze.live()[live] == 1
    assert buf.host_accessible is host
    assert buf.__dlpack_device__() == (dl, 0)
    props = aml_ze.alloc_properties(buf)
    assert props.memory_type == memory_type
    assert props.device == (None if kind == "host" else 0)
    assert props.id > 0
    assert area.alloc_properties(buf.ptr) == props
    attrs = aml_ze.pointer_attributes(buf)
    assert attrs.memory_type == {"shared": "managed"}.get(memory_type, memory_type)
    assert attrs.is_managed is (kind == "shared")
    area.munmap(buf)
    assert ze.calls("zeMemFree") == 1
    assert ze.live()[live] == 0


def test_each_area_has_its_own_context(ze: ZeDouble) -> None:
    a = aml_ze.device_area()
    b = aml_ze.host_area()
    assert a.context != b.context
    assert ze.live()["context"] == 2
    buf = a.mmap(64)
    a.close()  # aml_area_ze_destroy: frees the mapping, then destroys the context
    assert buf.freed
    assert a.context == 0
    assert ze.live()["context"] == 1
    aml_ze.destroy(b)
    aml_ze.destroy(b)  # idempotent
    assert ze.live()["context"] == 0


@pytest.mark.parametrize("alignment", [1, 64, 4096, 1 << 16, 1 << 21])
def test_alignment_is_honoured(areas: Callable[..., aml_ze.ZeArea], alignment: int) -> None:
    for kind in ("device", "shared", "host"):
        area = areas(kind, alignment=alignment)
        bufs = [area.mmap(n) for n in (1, 100, 5000)]
        assert all(b.ptr % alignment == 0 for b in bufs)
        assert area.alignment == alignment


def test_descriptor_flags_reach_the_driver(ze: ZeDouble, areas: Callable[..., aml_ze.ZeArea]) -> None:
    area = areas("device", device_flags=ZeDeviceFlags.BIAS_UNCACHED | ZeDeviceFlags.BIAS_INITIAL_PLACEMENT)
    assert area.allocator.device_desc.flags == 0x6
    assert area.allocator.device_desc.stype == 0x15
    host = areas("host", host_flags=ZeHostFlags.BIAS_WRITE_COMBINED)
    assert host.allocator.host_desc.flags == 0x4
    assert host.allocator.host_desc.stype == 0x16
    area.munmap(area.mmap(8))
    host.munmap(host.mmap(8))


def test_default_areas(ze: ZeDouble) -> None:
    dev = aml_ze.default_device_area()
    host = aml_ze.default_host_area()
    assert aml_ze.default_device_area() is dev
    assert (dev.kind, dev.alignment, dev.device_flags) == (Kind.DEVICE, 64, ZeDeviceFlags.BIAS_CACHED)
    assert (host.kind, host.alignment, host.host_flags) == (Kind.HOST, 64, ZeHostFlags.BIAS_CACHED)
    dev.munmap(dev.mmap(10))
    host.munmap(host.mmap(10))


def test_second_device(ze: ZeDouble) -> None:
    ze.need_devices(2)
    with aml_ze.device_area(1, flags=ZeFlags.SHARED) as area:
        buf = area.mmap(128)
        assert buf.__dlpack_device__() == (DLDeviceType.ONEAPI, 1)
        assert aml_ze.alloc_properties(buf).device == 1
        area.munmap(buf)


def test_shared_memory_speaks_the_buffer_protocol(areas: Callable[..., aml_ze.ZeArea]) -> None:
    np = pytest.importorskip("numpy")
    area = areas("shared")
    buf = area.mmap(16)
    with memoryview(buf) as view:
        arr = np.frombuffer(view, dtype=np.uint8)
        arr[:] = 7
        assert bytes(view) == b"\x07" * 16
        del arr
    area.munmap(buf)


@pytest.mark.parametrize(
    ("kind", "flags", "expected"),
    [(Kind.DEVICE, ZeFlags.DEVICE, Kind.DEVICE), (Kind.MANAGED, ZeFlags.SHARED, Kind.MANAGED)],
)
def test_registry(ze: ZeDouble, kind: Kind, flags: ZeFlags, expected: Kind) -> None:
    aml_core.registry.reset()
    try:
        _registry_areas(kind, expected)
    finally:
        aml_core.registry.reset()


def _registry_areas(kind: Kind, expected: Kind) -> None:
    with aml_core.area(kind=kind.value, backend="ze") as area:
        assert isinstance(area, aml_ze.ZeArea)
        assert area.kind is expected
        area.munmap(area.mmap(10))
    with aml_core.area(kind="host", backend="ze", alignment=4096) as area:
        assert area.alignment == 4096
        buf = area.mmap(3)
        assert buf.ptr % 4096 == 0
        area.munmap(buf)


def test_registry_passes_ze_over_for_options_it_does_not_honour(ze: ZeDouble) -> None:
    """aml-ze declares its options by kind (aml_ze.plugin.AREA_OPTIONS): the host backend's
    memspace= is not one, so a host area with it comes from the host backend, not from ze's
    factory (which refused it as unknown); forced to ze it is AMLTypeError."""
    aml_core.registry.reset()
    try:
        assert aml_core.choose("host").backend == "ze"
        with aml_core.area(kind="host", memspace="highest_capacity") as area:
            assert type(area).__name__ == "HostArea"
        with pytest.raises(AMLTypeError, match=r"ze does not honour \['memspace'\]"):
            aml_core.area(kind="host", backend="ze", memspace="highest_capacity")
        with pytest.raises(AMLTypeError, match=r"ze does not honour \['host_flags'\]"):
            aml_core.area(kind="device", backend="ze", host_flags=0)  # a host option, not a device one
    finally:
        aml_core.registry.reset()


@pytest.mark.host_double
def test_probe_lists_devices(ze: ZeDouble) -> None:
    ze.need_devices(2, 1 << 28)
    result = aml_ze.probe()
    assert result.available, result.reason
    assert [d.name for d in result.devices] == ["ze double 0", "ze double 1"]
    dev = result.devices[0]
    assert dev.total_memory == 1 << 28
    assert dev.details["type"] == "GPU"
    assert dev.details["memory_ordinals"] == 1
    for cap in (Capability.IPC, Capability.VIRTUAL_MEMORY, Capability.MANAGED, Capability.DLPACK):
        assert cap in dev.capabilities
    assert not result.reason
    assert result.versions["Level Zero API"] == "1.4"


def test_probe_without_a_driver(ze: ZeDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    """zeInit fails: unavailable, and nothing else is called (the 1.8.12 loader segfaults
    in zeDriverGet after a failed zeInit when Intel's driver has no GPU)."""
    monkeypatch.setenv("ZEDOUBLE_NO_DRIVER", "1")
    aml_ze.BACKEND.reset()
    before = {f: ze.calls(f) for f in ("zeInit", "zeDriverGet", "zeDeviceGet")}  # forward mode loaded once
    result = aml_ze.probe()
    assert not result.available
    assert "zeInit" in result.reason
    assert "ZE_RESULT_ERROR_UNINITIALIZED" in result.reason
    assert ze.calls("zeInit") == before["zeInit"] + 1
    assert ze.calls("zeDriverGet") == before["zeDriverGet"]
    assert ze.calls("zeDeviceGet") == before["zeDeviceGet"]


@pytest.mark.host_double
def test_probe_with_no_device(ze: ZeDouble) -> None:
    ze.need_devices(0)
    result = aml_ze.probe()
    assert not result.available
    assert result.reason == "no ze device found"


def test_library_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    missing = tmp_path / "libze_loader.so.1"
    monkeypatch.setenv("AML_ZE_LIBRARY", str(missing))
    aml_ze.BACKEND.reset()
    try:
        result = aml_ze.probe()
    finally:
        aml_ze.BACKEND.reset()
    assert not result.available
    assert "AML_ZE_LIBRARY" in result.reason


def test_precheck_without_a_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """No loader anywhere: unavailable from the file system alone, nothing loaded."""
    from aml_ze import plugin

    monkeypatch.delenv("AML_ZE_LIBRARY", raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    monkeypatch.setattr(plugin, "_DIRS", ())
    assert plugin.precheck() == "no Level Zero loader (libze_loader.so.1; Debian: apt-get install libze1)"
    aml_ze.BACKEND.reset()
    try:
        result = aml_ze.probe()
    finally:
        aml_ze.BACKEND.reset()
    assert not result.available
    assert "no Level Zero loader" in result.reason
