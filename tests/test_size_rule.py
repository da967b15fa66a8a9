"""One size rule at every entry point (aml_core.checks.size;
docs/aml-contract.md#rules-common-to-every-aml-area): a size is an int (else AMLTypeError,
EINVAL), positive or, where allowed, zero (else AMLValueError, EINVAL), and at most
2**63 - 1 (else AMLDomainError, EDOM). Each entry point kind is tried at the boundary:
area.mmap, an IPC handle (made, or tampered and then revalidated), a runtime's capability
group, a pool. Virtual memory and a real IPC open are tried on the HIP driver double
(backends/hip/tests/test_hip_reliability.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import aml_core
from aml_core import checks
from aml_core.errors import AMLDomainError, AMLError, AMLTypeError, AMLValueError, ErrorCode
from aml_core.host import HostArea
from aml_core.ipc import IpcHandle, revalidate
from aml_core.specs import MAX_SIZE

from .test_groups import HostAllocation

EDGE = 2**63 - 1


@pytest.fixture
def host() -> Iterator[HostArea]:
    area = HostArea()
    yield area
    area.close()


def _code(call: Callable[[], object]) -> ErrorCode | None:
    try:
        call()
    except AMLError as exc:
        return exc.code
    return None


def test_the_rule() -> None:
    assert MAX_SIZE == checks.MAX_SIZE == EDGE
    assert checks.size(EDGE) == EDGE
    assert checks.size(0, zero=True) == 0
    for bad, error in ((EDGE + 1, AMLDomainError), (2**64, AMLDomainError), (2**200, AMLDomainError)):
        with pytest.raises(error) as info:
            checks.size(bad)
        assert info.value.code is ErrorCode.EDOM
    for bad in (0, -1, -(2**64)):
        with pytest.raises(AMLValueError) as einval:
            checks.size(bad)
        assert einval.value.code is ErrorCode.EINVAL
    for wrong in ("1", 1.0, True, None):
        with pytest.raises(AMLTypeError):
            checks.size(wrong)


@pytest.mark.parametrize("size", [EDGE + 1, 2**64], ids=["2**63", "2**64"])
def test_mmap(host: HostArea, size: int) -> None:
    assert _code(lambda: host.mmap(size)) is ErrorCode.EDOM
    assert host.stats.total_maps == 0


def test_mmap_at_the_edge_reaches_the_system(host: HostArea) -> None:
    """2**63 - 1 passes the rule: the kernel refuses it (ENOMEM), not the check."""
    assert _code(lambda: host.mmap(EDGE)) is ErrorCode.ENOMEM


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("size", EDGE, None),
        ("size", EDGE + 1, ErrorCode.EDOM),
        ("size", 2**64, ErrorCode.EDOM),
        ("size", 0, ErrorCode.EINVAL),
        ("offset", EDGE, None),
        ("offset", 2**64, ErrorCode.EDOM),
        ("offset", -1, ErrorCode.EINVAL),
    ],
)
def test_ipc_handle(field: str, value: int, code: ErrorCode | None) -> None:
    fields: dict[str, Any] = {"backend": "memfd", "device": 0, "size": 4096, "data": b"x", "pid": 1}
    fields[field] = value
    assert _code(lambda: IpcHandle(**fields)) is code
    # The same value in a tampered handle (unpickling bypasses the validators): what the
    # importer's revalidation says before any native open.
    tampered = copy.copy(IpcHandle(backend="memfd", device=0, size=4096, data=b"x", pid=1))
    object.__setattr__(tampered, field, value)
    assert _code(lambda: revalidate(tampered)) is code


@pytest.mark.parametrize(
    "call",
    [
        lambda rt: rt.malloc(EDGE + 1),
        lambda rt: rt.host_alloc(2**64, portable=False, mapped=False),
        lambda rt: rt.memcpy(4096, 8192, EDGE + 1),
        lambda rt: rt.memset(4096, 0, 2**64),
    ],
    ids=["malloc", "host_alloc", "memcpy", "memset"],
)
def test_runtime_groups(call: Callable[[HostAllocation], object]) -> None:
    rt = HostAllocation()
    assert _code(lambda: call(rt)) is ErrorCode.EDOM
    assert rt.calls == []


@pytest.mark.parametrize(
    "make",
    [
        lambda area: aml_core.pool(area, limit=EDGE + 1),
        lambda area: aml_core.pool(area, release_threshold=2**64),
        lambda area: aml_core.pool(area, granule=2**64),
        lambda area: aml_core.pool(area, small_slab=EDGE + 1),
    ],
    ids=["limit", "release_threshold", "granule", "small_slab"],
)
def test_pool_layout(host: HostArea, make: Callable[[HostArea], object]) -> None:
    assert _code(lambda: make(host)) is ErrorCode.EDOM


def test_pool_calls(host: HostArea) -> None:
    with aml_core.pool(host, limit=EDGE) as pool:
        assert _code(lambda: pool.mmap(EDGE + 1)) is ErrorCode.EDOM
        assert _code(lambda: pool.trim(2**64)) is ErrorCode.EDOM
        assert pool.trim(EDGE) == 0
        assert pool.stats.total_maps == 0
