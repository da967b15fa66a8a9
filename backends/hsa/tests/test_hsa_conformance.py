"""aml_core's conformance kit on aml-hsa: the shared virtual-memory API (unchanged, over the
device's coarse-grained pool), the pool areas (device and host), and IPC (plain and under
a pool: a block that is not its slab's first, opened at its offset)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hsa_helpers import HsaDouble, aml_hsa

from aml_core import Area
from aml_core.gpu import VirtualMemory
from aml_core.testing import AreaConformance, PooledIpcConformance, VirtualMemoryConformance


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


@pytest.mark.host_double  # IPC between two processes: the double's host mode (as test_hsa_runtime)
class TestIpcConformance(PooledIpcConformance):
    """The kit's IPC classes over the double: ``hsa_amd_ipc_memory_create`` here, attach in
    a child process (the same double, through hsa.env()), write there, read back here; a
    pooled block that is not its slab's first too (the handle's offset honoured by the
    import aml-hsa shares with the other GPU backends, aml_core.gpu.ipc). The child reads
    and writes device memory through the double (HSA's import area has no copies)."""

    child_memory = "hsa_helpers:HsaDouble.in_child"

    @pytest.fixture
    def area(self, hsa: HsaDouble) -> Iterator[Area]:
        self.double = hsa
        area = aml_hsa.create(0)
        yield area
        area.close()

    def child_env(self, area: Area) -> dict[str, str]:
        return self.double.env()
