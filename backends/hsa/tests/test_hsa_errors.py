"""The one error table: every row, and every status each hsa_amd_vmem_* call documents,
injected into the call through the double, becomes the AML error the table says, with the
documented meaning in the message; aml-hsa's tracking is unchanged by the failure."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from aml_hsa import abi as C
from aml_hsa.errors import DOCUMENTED, HSA_ERROR_CODES, NAMES, make_error_table
from hsa_helpers import HsaDouble, aml_hsa

from aml_core.errors import AMLError, ErrorCode, error_class


class _Setup:
    """A reservation, a mapped handle with RW access, a spare handle: what each call needs."""

    def __init__(self) -> None:
        self.pool = aml_hsa.device_pool(0)
        self.g = self.pool.granule
        self.gpu = aml_hsa.get_runtime().gpus[0]
        self.va = aml_hsa.address_reserve(4 * self.g)
        self.h = aml_hsa.handle_create(self.pool, self.g)
        aml_hsa.map(self.va, self.g, self.h)
        aml_hsa.set_access(self.va, self.g, [(self.gpu, aml_hsa.Permission.RW)])
        self.spare = aml_hsa.handle_create(self.pool, self.g)
        self.fd = aml_hsa.export_shareable_handle(self.spare)
        self.extra = aml_hsa.address_reserve(self.g)

    def close(self) -> None:
        if self.extra in aml_hsa.get_runtime()._reservations:
            aml_hsa.address_free(self.extra, self.g)
        os.close(self.fd)
        aml_hsa.handle_release(self.spare)
        aml_hsa.unmap(self.va, self.g)
        aml_hsa.handle_release(self.h)
        aml_hsa.address_free(self.va, 4 * self.g)


#: One call of each hsa_amd_vmem_* function (through aml_hsa) that would succeed.
CALLS: dict[str, Callable[[_Setup], Any]] = {
    "hsa_amd_vmem_address_reserve": lambda s: aml_hsa.address_reserve(s.g),
    "hsa_amd_vmem_address_reserve_align": lambda s: aml_hsa.address_reserve_align(s.g, 0, s.g),
    "hsa_amd_vmem_address_free": lambda s: aml_hsa.address_free(s.extra, s.g),
    "hsa_amd_vmem_handle_create": lambda s: aml_hsa.handle_create(s.pool, s.g),
    "hsa_amd_vmem_handle_release": lambda s: aml_hsa.handle_release(s.spare),
    "hsa_amd_vmem_map": lambda s: aml_hsa.map(s.va + 2 * s.g, s.g, s.spare),
    "hsa_amd_vmem_unmap": lambda s: aml_hsa.unmap(s.va, s.g),
    "hsa_amd_vmem_set_access": lambda s: aml_hsa.set_access(s.va, s.g, [(s.gpu, aml_hsa.Permission.RO)]),
    "hsa_amd_vmem_get_access": lambda s: aml_hsa.get_access(s.va, s.gpu),
    "hsa_amd_vmem_export_shareable_handle": lambda s: aml_hsa.export_shareable_handle(s.spare),
    "hsa_amd_vmem_import_shareable_handle": lambda s: aml_hsa.import_shareable_handle(s.fd),
    "hsa_amd_vmem_retain_alloc_handle": lambda s: aml_hsa.retain_alloc_handle(s.va),
    "hsa_amd_vmem_get_alloc_properties_from_handle": lambda s: aml_hsa.get_alloc_properties_from_handle(s.h),
}

#: (function, status) for every documented status of every call.
DOCUMENTED_ROWS = [(fn, status) for fn, statuses in DOCUMENTED.items() for status in statuses]


def test_every_call_is_covered() -> None:
    assert set(CALLS) == set(DOCUMENTED) == {*C.VMEM_FUNCTIONS, C.RESERVE_ALIGN}


@pytest.mark.parametrize(
    ("function", "status"), DOCUMENTED_ROWS, ids=[f"{f}-{NAMES[s]}" for f, s in DOCUMENTED_ROWS]
)
def test_documented_status(hsa: HsaDouble, function: str, status: int) -> None:
    setup = _Setup()
    try:
        before = aml_hsa.get_runtime().live()
        objects = hsa.objects()
        hsa.inject(function, status)
        with pytest.raises(AMLError) as info:
            CALLS[function](setup)
        err = info.value
        assert err.code == HSA_ERROR_CODES[status]
        assert type(err) is error_class(HSA_ERROR_CODES[status])
        assert err.native is not None
        assert (err.native.function, err.native.code, err.native.name) == (function, status, NAMES[status])
        assert DOCUMENTED[function][status] in str(err)
        assert aml_hsa.get_runtime().live() == before, "a failed call changed what aml-hsa tracks"
        assert hsa.objects() == objects
    finally:
        setup.close()


ROWS = sorted(HSA_ERROR_CODES.items())


@pytest.mark.parametrize(("status", "code"), ROWS, ids=[NAMES[s] for s, _ in ROWS])
def test_every_table_row(hsa: HsaDouble, status: int, code: ErrorCode) -> None:
    """Each row of the table, injected into a vmem call and into a core call."""
    g = aml_hsa.device_pool(0).granule
    hsa.inject("hsa_amd_vmem_address_reserve", status)
    with pytest.raises(error_class(code)) as info:
        aml_hsa.address_reserve(g)
    assert info.value.code == code
    hsa.inject("hsa_amd_memory_pool_allocate", status)
    # The one call with its own rule (aml_hsa.errors): pool_allocate's INVALID_ALLOCATION is
    # a size past what the pool can allocate, ENOMEM as HIP and Level Zero say.
    alloc_code = ErrorCode.ENOMEM if status == C.HSA_STATUS_ERROR_INVALID_ALLOCATION else code
    area = aml_hsa.create(0)
    try:
        with pytest.raises(error_class(alloc_code)) as alloc_info:
            area.mmap(100)
        assert alloc_info.value.code == alloc_code
    finally:
        area.close()


@pytest.mark.parametrize("status", [C.HSA_STATUS_INFO_BREAK, 0x1FFF, 7, -1])
def test_unknown_status_is_failure(hsa: HsaDouble, status: int) -> None:
    hsa.inject("hsa_amd_vmem_handle_create", status)
    with pytest.raises(AMLError) as info:
        aml_hsa.handle_create(aml_hsa.device_pool(0), aml_hsa.device_pool(0).granule)
    assert info.value.code == ErrorCode.FAILURE
    assert hsa.objects() == {}


def test_table_never_maps_to_success() -> None:
    table = make_error_table(str)
    assert ErrorCode.SUCCESS not in set(HSA_ERROR_CODES.values())
    for status in (*HSA_ERROR_CODES, C.HSA_STATUS_INFO_BREAK, 12345):
        assert table.translate(status) != ErrorCode.SUCCESS


def test_status_names_from_the_library(hsa: HsaDouble) -> None:
    names = aml_hsa.get_runtime().lib.names
    assert names(C.HSA_STATUS_ERROR_RESOURCE_FREE) == "HSA_STATUS_ERROR_RESOURCE_FREE"
    assert names(0x1FFF) == "hsa_status 0x1fff"
    assert names("x") == "hsa_status 'x'"  # type: ignore[arg-type]
