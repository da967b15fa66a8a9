"""Stress on the hsa driver double (issue 9): 16 threads mapping and unmapping on one area
for a bounded number of operations; the stats are consistent at the end and the double's
live counters are back to zero (the ``hsa`` fixture checks them after the test)."""

from __future__ import annotations

import threading

import aml_hsa
from hsa_helpers import HsaDouble

from aml_core import Buffer


def test_sixteen_threads_on_one_area(hsa: HsaDouble) -> None:
    area = aml_hsa.create(0)
    errors: list[BaseException] = []
    barrier = threading.Barrier(16)

    def work(seed: int) -> None:
        try:
            barrier.wait()
            mine: list[Buffer] = []
            for i in range(200):
                if mine and (i + seed) % 3 == 0:
                    area.munmap(mine.pop())
                else:
                    mine.append(area.mmap(64 * (1 + (i + seed) % 7)))
            for buf in mine:
                area.munmap(buf)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors
        st = area.stats
        assert (st.live_mappings, st.bytes_in_use) == (0, 0)
        assert st.total_maps == st.total_unmaps
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
