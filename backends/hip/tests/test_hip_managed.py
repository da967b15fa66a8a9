"""HIP managed memory on the driver double (hipMallocManaged, hipMemAdvise,
hipMemPrefetchAsync, hipMemRangeGetAttribute(s), hipStreamAttachMemAsync), with the
advice state read back, HIP's 4 KiB granules and page-aligned advise ranges checked
before the native call, and every error path (docs/aml-contract.md#hip-managed-memory)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import aml_hip
import pytest
from aml_hip import CPU, INVALID, Advice, AttachFlags, CoherencyMode, HipFlags, RangeAttribute
from aml_hip.abi import hip_version
from hip_helpers import HipDouble

from aml_core.errors import AMLError, AMLFailure, AMLMemoryError, AMLNotSupported, AMLValueError
from aml_core.testing import ManagedConformance

F = HipFlags
PAGE = 4096


class TestManagedConformance(ManagedConformance):
    @pytest.fixture(params=[F.ALLOC_UNIFIED, F.ALLOC_UNIFIED | F.ALLOC_GLOBAL], ids=["host", "global"])
    def area(self, request: pytest.FixtureRequest, hip: HipDouble) -> Iterator[aml_hip.HipArea]:
        area = aml_hip.create(0, request.param)
        yield area
        area.close()


@pytest.fixture
def managed(areas: Callable[..., aml_hip.HipArea]) -> aml_hip.HipArea:
    return areas(0, F.ALLOC_UNIFIED | F.ALLOC_GLOBAL)


@pytest.mark.parametrize(
    ("size", "native"), [(1, PAGE), (PAGE, PAGE), (PAGE + 1, 2 * PAGE), (3 * PAGE - 5, 3 * PAGE)]
)
def test_allocations_are_4k_granules(
    hip: HipDouble, managed: aml_hip.HipArea, size: int, native: int
) -> None:
    buf = managed.mmap(size)
    assert hip.last("hipMallocManaged") == (hip.last("hipMallocManaged")[0], native, 0x1)  # type: ignore[index]
    assert buf.size == size
    assert buf.native.alloc_size == native
    managed.munmap(buf)


@pytest.mark.parametrize(
    ("offset", "size"),
    [(1, PAGE), (100, 2 * PAGE), (0, PAGE + 1), (0, 100), (PAGE, PAGE - 1), (2048, 2048)],
)
def test_advise_ranges_are_page_aligned_before_the_call(
    hip: HipDouble, managed: aml_hip.HipArea, offset: int, size: int
) -> None:
    buf = managed.mmap(4 * PAGE)
    with pytest.raises(AMLValueError, match="4096-byte pages"):
        managed.advise(buf, Advice.SET_READ_MOSTLY, 0, offset=offset, size=size)
    assert hip.calls("hipMemAdvise") == 0
    managed.advise(buf, Advice.SET_READ_MOSTLY, 0, offset=PAGE, size=2 * PAGE)
    assert hip.last("hipMemAdvise") == (buf.ptr + PAGE, 2 * PAGE, 1, 0)
    managed.munmap(buf)


def test_advice_native_arguments(hip: HipDouble, managed: aml_hip.HipArea) -> None:
    buf = managed.mmap(2 * PAGE)
    managed.advise(buf, Advice.SET_PREFERRED_LOCATION, "host")
    assert hip.last("hipMemAdvise") == (buf.ptr, 2 * PAGE, 3, -1)  # hipCpuDeviceId
    managed.advise(buf, Advice.SET_ACCESSED_BY, CPU)
    assert hip.last("hipMemAdvise") == (buf.ptr, 2 * PAGE, 5, -1)
    managed.munmap(buf)


def test_read_back_advice_state(hip: HipDouble, managed: aml_hip.HipArea) -> None:
    buf = managed.mmap(4 * PAGE)
    managed.advise(buf, Advice.SET_ACCESSED_BY, 0)
    managed.advise(buf, Advice.SET_ACCESSED_BY, "host")
    got = managed.range_attributes(
        buf,
        [
            RangeAttribute.READ_MOSTLY,
            RangeAttribute.PREFERRED_LOCATION,
            RangeAttribute.ACCESSED_BY,
            RangeAttribute.LAST_PREFETCH_LOCATION,
        ],
    )
    assert hip.calls("hipMemRangeGetAttributes") == 1
    assert got[RangeAttribute.READ_MOSTLY] is False
    assert got[RangeAttribute.PREFERRED_LOCATION] == INVALID
    accessed = got[RangeAttribute.ACCESSED_BY]
    assert isinstance(accessed, tuple)
    assert set(accessed) == {0, CPU}
    assert got[RangeAttribute.LAST_PREFETCH_LOCATION] == INVALID
    managed.prefetch(buf, 0, offset=0, size=PAGE)
    aml_hip.get_runtime().synchronize()
    assert managed.range_attribute(buf, RangeAttribute.LAST_PREFETCH_LOCATION, size=PAGE) == 0
    # a range whose pages disagree has no single last-prefetch location
    assert managed.range_attribute(buf, RangeAttribute.LAST_PREFETCH_LOCATION) == INVALID
    assert hip.calls("hipMemRangeGetAttribute") == 2
    managed.munmap(buf)


@pytest.mark.host_double
def test_coarse_grain_advice_and_coherency_mode(hip: HipDouble, managed: aml_hip.HipArea) -> None:
    """HIP-only advice 100/101 and range attribute 100 (docs/native-abi.md#hip-managed-memory-enums)."""
    buf = managed.mmap(4 * PAGE)
    assert managed.range_attribute(buf, RangeAttribute.COHERENCY_MODE) is CoherencyMode.FINE_GRAIN
    managed.advise(buf, Advice.SET_COARSE_GRAIN, 0, offset=0, size=2 * PAGE)
    assert hip.last("hipMemAdvise")[2] == 100  # type: ignore[index]
    assert (
        managed.range_attribute(buf, RangeAttribute.COHERENCY_MODE, size=2 * PAGE)
        is CoherencyMode.COARSE_GRAIN
    )
    assert managed.range_attribute(buf, RangeAttribute.COHERENCY_MODE) is CoherencyMode.INDETERMINATE
    managed.advise(buf, Advice.UNSET_COARSE_GRAIN, 0, offset=0, size=2 * PAGE)
    assert managed.range_attribute(buf, RangeAttribute.COHERENCY_MODE) is CoherencyMode.FINE_GRAIN
    managed.munmap(buf)


@pytest.mark.parametrize(
    "attribute",
    [
        RangeAttribute.PREFERRED_LOCATION_TYPE,
        RangeAttribute.PREFERRED_LOCATION_ID,
        RangeAttribute.LAST_PREFETCH_LOCATION_TYPE,
        RangeAttribute.LAST_PREFETCH_LOCATION_ID,
    ],
)
def test_cuda_only_range_attributes(
    hip: HipDouble, managed: aml_hip.HipArea, attribute: RangeAttribute
) -> None:
    buf = managed.mmap(PAGE)
    with pytest.raises(AMLNotSupported):
        managed.range_attribute(buf, attribute)
    assert hip.calls("hipMemRangeGetAttribute") == 0
    managed.munmap(buf)


def test_prefetch_on_a_stream(hip: HipDouble, managed: aml_hip.HipArea) -> None:
    buf = managed.mmap(3 * PAGE + 7)  # prefetch ranges need no alignment
    with aml_hip.stream(non_blocking=True) as stream:
        assert hip.last("hipStreamCreateWithFlags")[1] == 1  # type: ignore[index]
        managed.prefetch(buf, 0, offset=5, size=100, stream=stream)
        assert hip.last("hipMemPrefetchAsync") == (buf.ptr + 5, 100, 0, stream.handle)
        managed.prefetch(buf, "host", stream=stream.handle)
        assert hip.last("hipMemPrefetchAsync") == (buf.ptr, 3 * PAGE + 7, -1, stream.handle)
        stream.synchronize()
        managed.attach(buf, stream, AttachFlags.HOST)
        assert hip.last("hipStreamAttachMemAsync") == (stream.handle, buf.ptr, 0, 2)
    assert hip.calls("hipStreamDestroy") == 1
    managed.munmap(buf)


def test_managed_calls_on_other_areas(hip: HipDouble, areas: Callable[..., aml_hip.HipArea]) -> None:
    device = areas(0, F.DEFAULT)
    buf = device.mmap(PAGE)
    with pytest.raises(AMLNotSupported):
        device.advise(buf, Advice.SET_READ_MOSTLY, 0)
    with pytest.raises(AMLNotSupported):
        device.prefetch(buf, 0)
    device.munmap(buf)


@pytest.mark.parametrize(
    ("error", "cls"),
    [
        (2, AMLMemoryError),
        (801, AMLNotSupported),
        (1, AMLValueError),
        (100, AMLNotSupported),
        (999, AMLFailure),
        (12345, AMLFailure),
    ],
)
def test_malloc_managed_errors(
    hip: HipDouble, managed: aml_hip.HipArea, error: int, cls: type[AMLError]
) -> None:
    hip.inject("hipMallocManaged", error)
    with pytest.raises(cls) as info:
        managed.mmap(PAGE)
    assert info.value.native is not None
    assert info.value.native.function == "hipMallocManaged"


@pytest.mark.parametrize(
    ("function", "call"),
    [
        ("hipMemAdvise", lambda a, b: a.advise(b, Advice.SET_READ_MOSTLY, 0)),
        ("hipMemPrefetchAsync", lambda a, b: a.prefetch(b, 0)),
        ("hipMemRangeGetAttribute", lambda a, b: a.range_attribute(b, RangeAttribute.READ_MOSTLY)),
        ("hipMemRangeGetAttributes", lambda a, b: a.range_attributes(b, list(RangeAttribute)[:4])),
        ("hipStreamAttachMemAsync", lambda a, b: a.attach(b, None, AttachFlags.GLOBAL)),
    ],
)
@pytest.mark.parametrize(("error", "cls"), [(1, AMLValueError), (101, AMLValueError), (999, AMLFailure)])
def test_managed_call_errors(
    hip: HipDouble,
    managed: aml_hip.HipArea,
    function: str,
    call: Callable[[aml_hip.HipArea, object], object],
    error: int,
    cls: type[AMLError],
) -> None:
    buf = managed.mmap(PAGE)
    hip.inject(function, error)
    with pytest.raises(cls) as info:
        call(managed, buf)
    assert info.value.native is not None
    assert (info.value.native.function, info.value.native.code) == (function, error)
    managed.munmap(buf)


def test_bad_locations(hip: HipDouble, managed: aml_hip.HipArea) -> None:
    buf = managed.mmap(PAGE)
    for location in (-2, 99, "gpu"):
        with pytest.raises(AMLValueError):
            managed.advise(buf, Advice.SET_PREFERRED_LOCATION, location)
    assert hip.calls("hipMemAdvise") == 0
    managed.munmap(buf)


@pytest.mark.parametrize("version", [hip_version(5, 2, 21153), hip_version(6, 2), hip_version(7, 0)])
def test_managed_pointer_attributes_per_version(hip: HipDouble, version: int) -> None:
    """hipMemoryType numbering changed in 6.0 (native-abi.md#hip-pointer-attributes): managed is managed."""
    hip.use_version(version)
    area = aml_hip.create(0, F.ALLOC_UNIFIED)
    buf = area.mmap(PAGE)
    attrs = aml_hip.get_runtime().pointer_attributes(buf.ptr)
    assert attrs.memory_type == "managed"
    assert attrs.is_managed
    area.close()
