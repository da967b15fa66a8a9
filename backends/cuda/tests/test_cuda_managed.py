"""Managed memory on a real GPU (docs/aml-contract.md#hip-managed-memory, CUDA 13): every advice read back
through the range attributes (every attribute), prefetch to the device and the host
with the last prefetch location read back, and stream attach with aml, CuPy and
PyTorch streams."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import aml_cuda
import pytest
from aml_cuda import CPU, INVALID, Advice, AttachFlags, CudaFlags, LocationType, RangeAttribute

pytestmark = pytest.mark.gpu

SIZE = 4 << 20
ALL = list(RangeAttribute)[:8]  # the CUDA ones (COHERENCY_MODE is HIP's)


@pytest.fixture(
    params=[CudaFlags.ALLOC_UNIFIED, CudaFlags.ALLOC_UNIFIED | CudaFlags.ALLOC_GLOBAL],
    ids=["attach-host", "attach-global"],
)
def area(request: pytest.FixtureRequest) -> Iterator[Any]:
    area = aml_cuda.create(0, request.param)
    yield area
    area.close()


@pytest.fixture
def buf(area: Any) -> Iterator[Any]:
    buf = area.mmap(SIZE)
    with memoryview(buf) as view:
        view[:] = b"\x5a" * SIZE  # touch every page on the host
    yield buf
    if not buf.freed:
        area.munmap(buf)


def attrs_of(area: Any, buf: Any, **kw: Any) -> dict[RangeAttribute, object]:
    got: dict[RangeAttribute, object] = area.range_attributes(buf, ALL, **kw)
    # One call for all, or one call each: the same answers.
    for attr in ALL:
        assert area.range_attribute(buf, attr, **kw) == got[attr], attr
    return got


def test_fresh_range(area: Any, buf: Any) -> None:
    got = attrs_of(area, buf)
    assert got[RangeAttribute.READ_MOSTLY] is False
    assert got[RangeAttribute.PREFERRED_LOCATION] == INVALID
    assert got[RangeAttribute.ACCESSED_BY] == ()
    assert got[RangeAttribute.PREFERRED_LOCATION_TYPE] is LocationType.INVALID


def test_read_mostly(area: Any, buf: Any) -> None:
    area.advise(buf, Advice.SET_READ_MOSTLY, 0)
    assert attrs_of(area, buf)[RangeAttribute.READ_MOSTLY] is True
    area.advise(buf, Advice.UNSET_READ_MOSTLY, 0)
    assert attrs_of(area, buf)[RangeAttribute.READ_MOSTLY] is False


def test_preferred_location(area: Any, buf: Any) -> None:
    area.advise(buf, Advice.SET_PREFERRED_LOCATION, 0)
    got = attrs_of(area, buf)
    assert got[RangeAttribute.PREFERRED_LOCATION] == 0
    assert got[RangeAttribute.PREFERRED_LOCATION_TYPE] is LocationType.DEVICE
    assert got[RangeAttribute.PREFERRED_LOCATION_ID] == 0
    area.advise(buf, Advice.SET_PREFERRED_LOCATION, "host")
    got = attrs_of(area, buf)
    assert got[RangeAttribute.PREFERRED_LOCATION] == CPU
    assert got[RangeAttribute.PREFERRED_LOCATION_TYPE] is LocationType.HOST
    area.advise(buf, Advice.UNSET_PREFERRED_LOCATION, 0)
    got = attrs_of(area, buf)
    assert got[RangeAttribute.PREFERRED_LOCATION] == INVALID
    assert got[RangeAttribute.PREFERRED_LOCATION_TYPE] is LocationType.INVALID


def test_accessed_by(area: Any, buf: Any) -> None:
    area.advise(buf, Advice.SET_ACCESSED_BY, 0)
    assert attrs_of(area, buf)[RangeAttribute.ACCESSED_BY] == (0,)
    area.advise(buf, Advice.UNSET_ACCESSED_BY, 0)
    assert attrs_of(area, buf)[RangeAttribute.ACCESSED_BY] == ()


def test_advice_on_part_of_the_range(area: Any, buf: Any) -> None:
    half = SIZE // 2
    area.advise(buf, Advice.SET_PREFERRED_LOCATION, 0, offset=half, size=half)
    assert attrs_of(area, buf, offset=half, size=half)[RangeAttribute.PREFERRED_LOCATION] == 0
    assert attrs_of(area, buf, offset=0, size=half)[RangeAttribute.PREFERRED_LOCATION] == INVALID
    # Over both halves the pages disagree: no single location.
    assert attrs_of(area, buf)[RangeAttribute.PREFERRED_LOCATION] == INVALID


def test_prefetch_to_device_and_host(area: Any, buf: Any, rt: Any) -> None:
    with aml_cuda.stream() as s:
        area.prefetch(buf, 0, stream=s)
        s.synchronize()
        got = attrs_of(area, buf)
        assert got[RangeAttribute.LAST_PREFETCH_LOCATION] == 0
        assert got[RangeAttribute.LAST_PREFETCH_LOCATION_TYPE] is LocationType.DEVICE
        assert got[RangeAttribute.LAST_PREFETCH_LOCATION_ID] == 0
        area.prefetch(buf, "host", stream=s)
        s.synchronize()
        got = attrs_of(area, buf)
        assert got[RangeAttribute.LAST_PREFETCH_LOCATION] == CPU
        assert got[RangeAttribute.LAST_PREFETCH_LOCATION_TYPE] is LocationType.HOST
    # The data survived both migrations.
    with memoryview(buf) as view:
        assert bytes(view[:4]) == b"\x5a" * 4
        assert bytes(view[-4:]) == b"\x5a" * 4
    # The default stream (None) works as well.
    area.prefetch(buf, 0, offset=4096, size=8192)
    rt.synchronize()
    assert area.range_attribute(buf, RangeAttribute.LAST_PREFETCH_LOCATION, offset=4096, size=8192) == 0


def test_prefetch_on_cupy_and_torch_streams(area: Any, buf: Any, cupy: Any) -> None:
    s = cupy.cuda.Stream(non_blocking=True)
    area.prefetch(buf, 0, stream=s)
    s.synchronize()
    assert area.range_attribute(buf, RangeAttribute.LAST_PREFETCH_LOCATION) == 0
    torch = pytest.importorskip("torch")
    ts = torch.cuda.Stream()
    area.prefetch(buf, "host", stream=ts)
    ts.synchronize()
    assert area.range_attribute(buf, RangeAttribute.LAST_PREFETCH_LOCATION) == CPU


def test_stream_attach(area: Any, buf: Any, cupy: Any) -> None:
    with aml_cuda.stream(non_blocking=True) as s:
        for flags in (AttachFlags.SINGLE, AttachFlags.HOST, AttachFlags.GLOBAL):
            area.attach(buf, s, flags)
            s.synchronize()
    cs = cupy.cuda.Stream()
    area.attach(buf, cs, AttachFlags.SINGLE)
    cs.synchronize()
    # A kernel on that stream sees the data; the host sees its result.
    with cs:
        arr = cupy.asarray(buf)
        arr[:8] += 1
    cs.synchronize()
    with memoryview(buf) as view:
        assert bytes(view[:8]) == b"\x5b" * 8
    del arr
    area.attach(buf, 0, AttachFlags.GLOBAL)


def test_managed_errors(area: Any, buf: Any) -> None:
    from aml_core.errors import AMLNotSupported, AMLValueError

    with pytest.raises(AMLNotSupported):
        area.advise(buf, Advice.SET_COARSE_GRAIN, 0)  # HIP only
    with pytest.raises(AMLNotSupported):
        area.range_attribute(buf, RangeAttribute.COHERENCY_MODE)
    with pytest.raises(AMLValueError):
        area.prefetch(buf, 7)
    with pytest.raises(AMLValueError):
        area.attach(buf, 0, 3)
    device_area = aml_cuda.create(0)
    try:
        dbuf = device_area.mmap(4096)
        with pytest.raises(AMLNotSupported):
            device_area.prefetch(dbuf, 0)
        with pytest.raises(AMLValueError):
            area.prefetch(dbuf, 0)  # not this area's buffer
    finally:
        device_area.close()
