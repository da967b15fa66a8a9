"""A hypothesis state machine over the HSA double (issue 9): the shared IPC machine
(:mod:`tests.support.ipc_machine`): mmap / munmap / close of a device pool area with
injected failures, its buffers opened (``hsa_amd_ipc_memory_attach``), written, read and
closed in a long-lived second process, tampered handles refused there; plus the shared
virtual-memory rules (:mod:`tests.support.vm_machine`: one-step and hand-made mappings,
growable buffers, refusals) on ``aml_hsa.virtual_memory``. Invariants are the areas' stats
and both processes' double live counters, all zero at the end of each example. Host mode
only: the forward mode has no HSA IPC (no CUDA counterpart of its 32-byte handle)."""

from __future__ import annotations

import aml_hsa
import pytest
from aml_hsa import abi as C
from hsa_helpers import HsaDouble, build_double

from aml_core.area import Area
from aml_core.gpu import VirtualMemory
from tests.support.dropped_machine import DroppedMachine

pytestmark = pytest.mark.host_double


class HsaMachine(DroppedMachine):
    double_class = HsaDouble
    ALLOC_KIND, IPC_KIND = "pool_alloc", "ipc_attach"
    ALLOC_FUNCTION, FREE_FUNCTION = "hsa_amd_memory_pool_allocate", "hsa_amd_memory_pool_free"
    FAIL_CODE = C.HSA_STATUS_ERROR_OUT_OF_RESOURCES

    VM_KINDS = ("reservation", "handle", "mapping")
    VM_FUNCTIONS = (  # reserve, create, map, set access, unmap
        "hsa_amd_vmem_address_reserve",
        "hsa_amd_vmem_handle_create",
        "hsa_amd_vmem_map",
        "hsa_amd_vmem_set_access",
        "hsa_amd_vmem_unmap",
    )
    VM_RELEASE = "hsa_amd_vmem_handle_release"

    def make_area(self) -> Area:
        return aml_hsa.create(0)

    def make_vm(self) -> VirtualMemory:
        return aml_hsa.virtual_memory(0)


def test_state_machine() -> None:
    HsaMachine.run(build_double())
