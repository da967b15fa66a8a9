"""A hypothesis state machine over the Level Zero double (issue 9): the shared IPC machine
(:mod:`tests.support.ipc_machine`): mmap / munmap / close of a device area with injected
failures, its buffers opened, written, read and closed in a long-lived second process,
tampered handles refused there; plus the shared virtual-memory rules
(:mod:`tests.support.vm_machine`: one-step and hand-made mappings, growable buffers,
refusals; no export/import of physical memory: Level Zero 1.4 cannot export it as an fd).
Invariants are the areas' stats and both processes' double live counters, all zero at the
end of each example."""

from __future__ import annotations

from pathlib import Path

import aml_ze
import pytest
from aml_ze import abi as C
from ze_helpers import ZeDouble

from aml_core.area import Area
from aml_core.gpu import VirtualMemory
from tests.support.dropped_machine import DroppedMachine

pytestmark = pytest.mark.host_double


class ZeMachine(DroppedMachine):
    double_class = ZeDouble
    ALLOC_KIND, IPC_KIND = "device", "ipc_open"
    ALLOC_FUNCTION, FREE_FUNCTION = "zeMemAllocDevice", "zeMemFree"
    FAIL_CODE = C.ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY

    VM_KINDS = ("reservation", "physical", "mapping")
    VM_FUNCTIONS = (  # reserve, create, map, set access, unmap
        "zeVirtualMemReserve",
        "zePhysicalMemCreate",
        "zeVirtualMemMap",
        "zeVirtualMemSetAccessAttribute",
        "zeVirtualMemUnmap",
    )

    def make_area(self) -> Area:
        return aml_ze.device_area()

    def make_vm(self) -> VirtualMemory:
        return aml_ze.virtual_memory(0)


def test_state_machine(double_library: Path) -> None:
    ZeMachine.run(double_library)
