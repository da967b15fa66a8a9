"""Free memory per device through Sysman (:mod:`aml_ze.sysman`), on the driver double.

The double lists Sysman devices in the reverse order of the core ones (only the UUID match
pairs them right) and gives each device a system-memory module before its own (only the
location filter leaves it out); it accepts core handles as Sysman handles only when
``ZES_ENABLE_SYSMAN=1`` was set at ``zeInit``, and Sysman's own handles only after
``zesInit``, as Intel's driver. Forward mode asks cuMemGetInfo: other processes count, so
its checks are bounds, not equalities."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import aml_ze
import pytest
from aml_ze import abi as C
from aml_ze.errors import result_name
from ze_helpers import ZeDouble

MiB = 1 << 20
#: Every Sysman function aml-ze calls, in the order it first calls them.
DISCOVERY = ("zesInit", "zesDriverGet", "zesDeviceGet", "zesDeviceGetProperties")
QUERIES = ("zesDeviceEnumMemoryModules", "zesMemoryGetProperties", "zesMemoryGetState")


@pytest.fixture
def ze_built(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., ZeDouble]]:
    """``ze_built(sysman=...)``: aml_ze on the double built for that Sysman variant."""
    with ZeDouble.factory(monkeypatch) as make:
        yield make


def _devices(ze: ZeDouble, count: int = 2) -> int:
    """Host mode: emulate ``count`` devices; forward mode: the machine's GPUs."""
    if ze.mode == "host":
        ze.need_devices(count)
        return count
    return aml_ze.get_runtime().device_count()


def _free() -> list[int | None]:
    return [d.free_memory for d in aml_ze.probe().devices]


def _check_lowered(
    ze: ZeDouble, n: int, before: list[int | None], during: list[int | None], size: int
) -> None:
    """``size`` bytes taken on the last device show there, and (host mode) only there."""
    last = n - 1
    assert before[last] is not None
    assert during[last] is not None
    assert before[last] - during[last] >= size, (before, during)
    if ze.mode == "host":
        assert before[last] - during[last] == size
        assert during[:last] == before[:last]


def test_probe_reports_free_memory(ze: ZeDouble) -> None:
    n = _devices(ze)
    result = aml_ze.probe()
    assert result.available
    assert len(result.devices) == n
    for d in result.devices:
        assert d.free_memory is not None, aml_ze.get_runtime().sysman.reason
        assert 0 < d.free_memory <= d.total_memory
    if ze.mode == "host":  # nothing allocated: all of it, and no system-memory module added
        assert [d.free_memory for d in result.devices] == [d.total_memory for d in result.devices]
    assert aml_ze.get_runtime().sysman.way == "zesInit"
    assert ze.calls("zesInit") == 1


def test_an_allocation_lowers_free_memory_on_its_device_only(ze: ZeDouble) -> None:
    n = _devices(ze)
    before = _free()
    with aml_ze.device_area(device=n - 1) as area:
        buf = area.mmap(64 * MiB)
        during = _free()
        area.munmap(buf)
    _check_lowered(ze, n, before, during, 64 * MiB)
    if ze.mode == "host":
        assert _free() == before


def test_physical_memory_lowers_free_memory(ze: ZeDouble) -> None:
    n = _devices(ze)
    before = _free()
    with aml_ze.virtual_memory(n - 1) as vm:
        size = max(vm.granularity(True), 32 * MiB)
        phys = vm.create(size)
        during = _free()
        vm.release(phys)
    _check_lowered(ze, n, before, during, size)


def test_zesinit_once_per_runtime(ze: ZeDouble) -> None:
    _devices(ze)
    for _ in range(3):
        assert None not in _free()
    assert ze.calls("zesInit") == 1
    assert ze.calls("zesDeviceGet") == 2  # the count, then the handles: once


@pytest.mark.parametrize("function", DISCOVERY)
def test_failed_discovery_is_not_known(ze: ZeDouble, function: str) -> None:
    """No Sysman handles: every device's free memory is not known, the probe still
    describes the devices, the reason names the call, and the search is not retried."""
    n = _devices(ze)
    ze.inject(function, C.ZE_RESULT_ERROR_UNSUPPORTED_FEATURE, times=-1)
    result = aml_ze.probe()
    assert result.available
    assert all(d.total_memory > 0 and d.free_memory is None for d in result.devices)
    reason = aml_ze.get_runtime().sysman.reason
    assert reason is not None
    assert function in reason
    assert result_name(C.ZE_RESULT_ERROR_UNSUPPORTED_FEATURE) in reason
    calls = ze.calls(function)
    assert _free() == [None] * n
    assert ze.calls(function) == calls
    with aml_ze.device_area() as area:  # the runtime is fine
        area.munmap(area.mmap(4096))


@pytest.mark.parametrize("function", QUERIES)
def test_failed_query_is_not_known_on_that_device(ze: ZeDouble, function: str) -> None:
    """One failed query (device 0's, the first asked): not known there, the other device
    answers, and the next probe answers for both."""
    ze.need_devices(2)
    ze.inject(function, C.ZE_RESULT_ERROR_DEVICE_LOST)
    first = _free()
    assert first[0] is None
    assert first[1] is not None
    assert None not in _free()


@pytest.mark.parametrize("function", QUERIES)
def test_success_without_an_answer_is_not_known(ze: ZeDouble, function: str) -> None:
    """SUCCESS with nothing filled in (no module listed, no location, a state of size 0)
    is never read as a number."""
    n = _devices(ze)
    ze.inject(function, C.ZE_RESULT_SUCCESS, times=-1)
    result = aml_ze.probe()
    assert result.available
    assert [d.free_memory for d in result.devices] == [None] * n


def test_no_sysman_device_matches(ze: ZeDouble) -> None:
    """zesDeviceGet "succeeds" with no device: nothing to match, not known, said why."""
    n = _devices(ze)
    ze.inject("zesDeviceGet", C.ZE_RESULT_SUCCESS)  # the count call leaves 0
    assert _free() == [None] * n
    assert aml_ze.get_runtime().sysman.reason == "no Sysman device matches a core device (by UUID)"


def test_the_legacy_variable_wins_over_zesinit(ze: ZeDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ZES_ENABLE_SYSMAN=1 at zeInit the core handles are used, and zesInit is not
    called (the specification asks not to use both)."""
    n = _devices(ze)
    monkeypatch.setenv("ZES_ENABLE_SYSMAN", "1")
    ze.forget()
    before = _free()
    assert None not in before
    assert aml_ze.get_runtime().sysman.way == "legacy"
    assert ze.calls("zesInit") == 0
    with aml_ze.device_area(device=n - 1) as area:
        buf = area.mmap(64 * MiB)
        _check_lowered(ze, n, before, _free(), 64 * MiB)
        area.munmap(buf)


def test_a_loader_without_zesinit(ze_built: Callable[..., ZeDouble], monkeypatch: pytest.MonkeyPatch) -> None:
    """As Debian's 1.8.12 loader (API 1.4): without ZES_ENABLE_SYSMAN, not known and no
    Sysman call made (a core handle is no Sysman handle then); with it, known."""
    ze = ze_built(sysman="legacy")
    n = _devices(ze)
    assert _free() == [None] * n
    reason = aml_ze.get_runtime().sysman.reason
    assert reason is not None
    assert "zesInit" in reason
    assert "ZES_ENABLE_SYSMAN=1" in reason
    assert all(ze.calls(f) == 0 for f in QUERIES)
    monkeypatch.setenv("ZES_ENABLE_SYSMAN", "1")
    ze.forget()
    before = _free()
    assert None not in before
    with aml_ze.device_area(device=n - 1) as area:
        buf = area.mmap(64 * MiB)
        _check_lowered(ze, n, before, _free(), 64 * MiB)
        area.munmap(buf)


@pytest.mark.parametrize("legacy", ["", "1"])
def test_a_loader_without_sysman(
    ze_built: Callable[..., ZeDouble], monkeypatch: pytest.MonkeyPatch, legacy: str
) -> None:
    ze = ze_built(sysman="none")
    monkeypatch.setenv("ZES_ENABLE_SYSMAN", legacy)
    ze.forget()
    n = _devices(ze)
    result = aml_ze.probe()
    assert result.available
    assert [d.free_memory for d in result.devices] == [None] * n
    reason = aml_ze.get_runtime().sysman.reason
    assert reason is not None
    assert "does not export" in reason
    assert "zesMemoryGetState" in reason
