"""The managed-memory conformance class: host access, prefetch, advice, range
attributes and stream attachment."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from ..buffer import Buffer
from ..errors import (
    AMLTypeError,
    AMLValueError,
)
from ..specs import Capability

__all__ = ["ManagedConformance"]


class ManagedConformance:
    """Managed (unified) memory: needs a fixture ``area`` of managed memory with the
    GPU area methods (prefetch, advise, range_attribute(s), attach) and at least one
    device (device 0)."""

    size: ClassVar[int] = 1 << 21

    @pytest.fixture
    def buf(self, area: Any) -> Iterator[Buffer]:
        if not area.capabilities & Capability.MANAGED:
            pytest.skip("the area does not declare MANAGED")
        buf = area.mmap(self.size)
        yield buf
        if not buf.freed:
            area.munmap(buf)

    def test_host_access(self, area: Any, buf: Buffer) -> None:
        with memoryview(buf) as view:
            view[:5] = b"hello"
            assert bytes(view[:5]) == b"hello"

    def test_prefetch_records_location(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import CPU, RangeAttribute

        area.prefetch(buf, 0)
        area.runtime.synchronize()
        assert area.range_attribute(buf, RangeAttribute.LAST_PREFETCH_LOCATION) == 0
        area.prefetch(buf, "host")
        area.runtime.synchronize()
        assert area.range_attribute(buf, RangeAttribute.LAST_PREFETCH_LOCATION) == CPU

    def test_read_mostly_advice(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import Advice, RangeAttribute

        area.advise(buf, Advice.SET_READ_MOSTLY, 0)
        assert area.range_attribute(buf, RangeAttribute.READ_MOSTLY) is True
        area.advise(buf, Advice.UNSET_READ_MOSTLY, 0)
        assert area.range_attribute(buf, RangeAttribute.READ_MOSTLY) is False

    def test_preferred_location_advice(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import CPU, INVALID, Advice, RangeAttribute

        area.advise(buf, Advice.SET_PREFERRED_LOCATION, 0)
        assert area.range_attribute(buf, RangeAttribute.PREFERRED_LOCATION) == 0
        area.advise(buf, Advice.SET_PREFERRED_LOCATION, "host")
        assert area.range_attribute(buf, RangeAttribute.PREFERRED_LOCATION) == CPU
        area.advise(buf, Advice.UNSET_PREFERRED_LOCATION, 0)
        assert area.range_attribute(buf, RangeAttribute.PREFERRED_LOCATION) == INVALID

    def test_accessed_by_advice(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import Advice, RangeAttribute

        area.advise(buf, Advice.SET_ACCESSED_BY, 0)
        assert 0 in area.range_attribute(buf, RangeAttribute.ACCESSED_BY)
        area.advise(buf, Advice.UNSET_ACCESSED_BY, 0)
        assert 0 not in area.range_attribute(buf, RangeAttribute.ACCESSED_BY)

    def test_range_attributes_in_one_call(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import Advice, RangeAttribute

        area.advise(buf, Advice.SET_READ_MOSTLY, 0)
        got = area.range_attributes(buf, [RangeAttribute.READ_MOSTLY, RangeAttribute.ACCESSED_BY])
        assert got[RangeAttribute.READ_MOSTLY] is True
        assert isinstance(got[RangeAttribute.ACCESSED_BY], tuple)

    def test_sub_range(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import Advice, RangeAttribute

        half = self.size // 2
        area.advise(buf, Advice.SET_READ_MOSTLY, 0, offset=0, size=half)
        assert area.range_attribute(buf, RangeAttribute.READ_MOSTLY, offset=0, size=half) is True
        assert area.range_attribute(buf, RangeAttribute.READ_MOSTLY, offset=half, size=half) is False

    def test_bad_ranges_and_values(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import Advice, RangeAttribute

        with pytest.raises(AMLValueError):
            area.prefetch(buf, 0, offset=self.size + 1)
        with pytest.raises(AMLValueError):
            area.prefetch(buf, 0, offset=0, size=self.size + 4096)
        with pytest.raises(AMLValueError):
            area.advise(buf, 12345, 0)
        with pytest.raises(AMLValueError):
            area.range_attribute(buf, 12345)
        with pytest.raises(AMLValueError):
            area.prefetch(buf, 1 << 20)
        with pytest.raises(AMLTypeError):
            area.advise(buf, Advice.SET_READ_MOSTLY, 1.5)
        with pytest.raises(AMLValueError):
            area.range_attributes(buf, [])
        area.munmap(buf)
        with pytest.raises(AMLValueError):
            area.range_attribute(buf, RangeAttribute.READ_MOSTLY)

    def test_stream_attach(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import AttachFlags
        from ..gpu.stream import Stream

        with Stream(area.runtime) as stream:
            area.attach(buf, stream, AttachFlags.SINGLE)
            stream.synchronize()
            area.attach(buf, stream, AttachFlags.GLOBAL)
            stream.synchronize()
        with pytest.raises(AMLValueError):
            area.attach(buf, 0, 3)
