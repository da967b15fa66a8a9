"""Stress on the hsa driver double (issue 9): 16 threads mapping and unmapping on one area
for a bounded number of operations; the stats are consistent at the end and the double's
live counters are back to zero (the ``hsa`` fixture checks them after the test)."""

from __future__ import annotations

import aml_hsa
from hsa_helpers import HsaDouble

from tests.support.stress import hammer


def test_sixteen_threads_on_one_area(hsa: HsaDouble) -> None:
    area = aml_hsa.create(0)
    try:
        hammer(area, threads=16, rounds=200)
    finally:
        area.close()


def test_vm_mmap_while_the_release_fails(hsa: HsaDouble) -> None:
    """The creation reference's release fails after the mapping: the release's native error
    (not EBUSY), the mapping and reservation undone, the handle kept for close()."""
    from aml_hsa import abi as C

    from aml_core.errors import AMLError, ErrorCode

    vm = aml_hsa.virtual_memory(0)
    try:
        before = hsa.objects()
        hsa.inject("hsa_amd_vmem_handle_release", C.HSA_STATUS_ERROR_INVALID_ARGUMENT)
        try:
            vm.mmap(vm.granularity())
        except AMLError as exc:
            error = exc
        else:
            raise AssertionError("vm.mmap succeeded although the release failed")
        assert error.code is not ErrorCode.EBUSY
        assert error.native is not None
        assert error.native.function == "hsa_amd_vmem_handle_release"
        assert vm.stats.live_mappings == 0
        assert hsa.objects() != before  # the handle is still there, tracked by the area
    finally:
        vm.close()
