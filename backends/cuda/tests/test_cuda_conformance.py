"""The conformance kit of aml_core on every CUDA area flag combination, on managed
memory and on virtual memory (real GPU)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cuda_flagsets import ALL_FLAGS, flag_name, make_area

from aml_core.testing import AreaConformance, ManagedConformance, VirtualMemoryConformance

pytestmark = pytest.mark.gpu


class TestCudaAreaConformance(AreaConformance):
    @pytest.fixture(params=ALL_FLAGS, ids=flag_name)
    def area(self, request: pytest.FixtureRequest) -> Iterator[Any]:
        area = make_area(request.param)
        yield area
        area.close()


class TestCudaManagedConformance(ManagedConformance):
    @pytest.fixture(params=[2, 2 | 8], ids=flag_name)
    def area(self, request: pytest.FixtureRequest) -> Iterator[Any]:
        area = make_area(request.param)
        yield area
        area.close()


class TestCudaVirtualMemoryConformance(VirtualMemoryConformance):
    @pytest.fixture
    def vm(self) -> Iterator[Any]:
        import aml_cuda

        vm = aml_cuda.virtual_memory(0)
        yield vm
        vm.close()
