"""The conformance kit on the built-in host backend, in each of its configurations."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aml_core.host import HostArea
from aml_core.testing import AreaConformance


class TestHostDefault(AreaConformance):
    @pytest.fixture
    def area(self) -> Iterator[HostArea]:
        area = HostArea()
        yield area
        area.close()


class TestHostBound(AreaConformance):
    @pytest.fixture
    def area(self) -> Iterator[HostArea]:
        area = HostArea("bind", [0])
        yield area
        area.close()


class TestHostInterleavedShared(AreaConformance):
    @pytest.fixture
    def area(self) -> Iterator[HostArea]:
        area = HostArea("interleave", [0], shared=True)
        yield area
        area.close()


class TestHostAligned(AreaConformance):
    sizes = (1, 4096, 1 << 21)

    @pytest.fixture
    def area(self) -> Iterator[HostArea]:
        area = HostArea(alignment=1 << 21, transparent_huge_pages=True)
        yield area
        area.close()
