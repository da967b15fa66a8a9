"""aml_core's conformance kit on aml-hsa: the shared virtual-memory API (unchanged, over the
device's coarse-grained pool) and the pool areas (device and host)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hsa_helpers import HsaDouble, aml_hsa

from aml_core import Area
from aml_core.gpu import VirtualMemory
from aml_core.testing import AreaConformance, VirtualMemoryConformance


class TestVirtualMemoryConformance(VirtualMemoryConformance):
    @pytest.fixture
    def vm(self, hsa: HsaDouble) -> Iterator[VirtualMemory]:
        vm = aml_hsa.virtual_memory(0)
        yield vm
        vm.close()


class TestPoolAreaConformance(AreaConformance):
    """Device memory (a GPU's coarse-grained pool) and host memory (a CPU fine-grained pool)."""

    rounds = 10
    # ROCr answers a size above the pool with HSA_STATUS_ERROR_INVALID_ALLOCATION, which
    # aml-hsa makes ENOMEM for that call (as HIP and Level Zero answer): the kit's default
    # size (2**63 - 1) gives ENOMEM.

    @pytest.fixture(params=["device", "host"])
    def area(self, request: pytest.FixtureRequest, hsa: HsaDouble) -> Iterator[Area]:
        area = aml_hsa.create(0) if request.param == "device" else aml_hsa.host_area()
        yield area
        area.close()
