"""Moving a live buffer's pages, rebinding an area, binding a fresh mapping without a
move, interleaving and transparent huge pages, weighted interleave: on this machine's
nodes (one node is enough: moves to node 0, bad input, injected native failures). The
moves between nodes run in the NUMA lab (tests/numa/test_moving.py)."""

from __future__ import annotations

import errno
import mmap
from typing import Any

import numpy as np
import pytest

from aml_core import _os
from aml_core.errors import (
    AMLDomainError,
    AMLFailure,
    AMLMemoryError,
    AMLNotSupported,
    AMLTypeError,
    AMLValueError,
)
from aml_core.host import (
    HostArea,
    MoveReport,
    Policy,
    allowed_nodes,
    interleave_weights,
    move_pages,
    set_interleave_weights,
    weighted_interleave_supported,
)
from aml_core.host import numa as numa_mod
from aml_core.host.area import THP_INTERLEAVE_MIN
from aml_core.host.plugin import transparent_huge_pages
from aml_core.host.stock import CARVE_MAX, STOCK_SIZE
from tests.support.smaps import vm_flags

NODES = sorted(allowed_nodes())
NODE = NODES[0]
OUTSIDE = max(NODES) + 1
PAGE = mmap.PAGESIZE
POPULATE = mmap.MAP_POPULATE


# -- moving ------------------------------------------------------------------------------


def test_move_with_a_numpy_view_live_keeps_address_and_bytes() -> None:
    with HostArea("bind", [NODE]) as area:  # bound: the page written last is on NODE too
        buf = area.mmap(64 * PAGE)
        arr = np.frombuffer(buf, dtype=np.uint8)
        arr[: 40 * PAGE] = np.arange(40 * PAGE, dtype=np.uint64).astype(np.uint8)
        before, ptr = arr.copy(), buf.ptr
        report = area.move(buf, NODE)
        assert isinstance(report, MoveReport)
        # 40 pages written, 24 never touched: nothing to move there.
        assert (report.pages, report.moved, report.untouched, report.failed) == (64, 40, 24, 0)
        assert report.nodes == {NODE: 40}
        assert report.errors == {}
        assert report.complete
        assert buf.ptr == ptr
        assert arr.ctypes.data == ptr
        assert np.array_equal(arr, before)
        arr[-1] = 9  # the view still writes the buffer's memory
        assert memoryview(buf)[-1] == 9
        # 41 pages written; the others were only read (the zero page, no node).
        assert area.page_nodes(buf, summary=True)[NODE] == 41
        del arr


def test_move_report_is_a_frozen_value() -> None:
    report = MoveReport(pages=3, moved=1, untouched=1, failed=1, nodes={0: 1}, errors={"EBUSY": 1})
    assert report == MoveReport(3, 1, 1, 1, {0: 1}, {"EBUSY": 1})
    assert not report.complete
    with pytest.raises(AttributeError):
        report.moved = 3  # type: ignore[misc]


def test_move_of_a_range_interleaves_over_several_targets() -> None:
    with HostArea() as area:
        buf = area.mmap(8 * PAGE)
        _os.touch(buf.ptr, buf.size, PAGE, 1)
        # The same node twice is one node: every page goes there.
        assert move_pages(buf.ptr, buf.size, [NODE, NODE]).nodes == {NODE: 8}


def test_move_bad_input_is_typed_and_leaves_nothing() -> None:
    with HostArea() as area, HostArea() as other:
        buf = area.mmap(4 * PAGE)
        foreign = other.mmap(PAGE)
        with pytest.raises(AMLDomainError, match="outside"):
            area.move(buf, OUTSIDE)
        with pytest.raises(AMLValueError, match="at least one"):
            area.move(buf, [])
        with pytest.raises(AMLTypeError):
            area.move(buf, "0")  # type: ignore[arg-type]
        with pytest.raises(AMLTypeError, match="Buffer"):
            area.move(buf.ptr, NODE)  # type: ignore[arg-type]
        with pytest.raises(AMLValueError, match="not mapped by this area"):
            area.move(foreign, NODE)
        area.munmap(buf)
        with pytest.raises(AMLValueError, match="already unmapped"):
            area.move(buf, NODE)
        assert area.stats.bytes_in_use == 0
        assert other.stats.bytes_in_use == PAGE
    with pytest.raises(AMLValueError, match=r"unmapped|not live"):
        other.move(foreign, NODE)  # its area is closed: freed with it


def test_move_failures_are_translated(monkeypatch: pytest.MonkeyPatch) -> None:
    """The call failing is the backend's error; pages it could not move are counted by
    errno; a page left on a node outside the targets counts as failed."""
    with HostArea() as area:
        buf = area.mmap(8 * PAGE)

        def refused(*args: Any) -> Any:
            raise OSError(errno.ENOMEM, "Cannot allocate memory", "move_pages")

        monkeypatch.setattr(_os, "move_pages", refused)
        with pytest.raises(AMLMemoryError, match="move_pages"):
            area.move(buf, NODE)

        def partial(
            address: int, length: int, nodes: list[int], flags: int, retries: int
        ) -> tuple[int, dict[int, int]]:
            assert flags == numa_mod.MPOL_MF_MOVE
            assert retries == numa_mod.MOVE_RETRIES
            return 3, {NODE: 3, -errno.EBUSY: 2, -errno.ENOENT: 1, OUTSIDE: 1, -4096: 1}

        monkeypatch.setattr(_os, "move_pages", partial)
        report = area.move(buf, NODE)
        assert report.pages == 8
        assert (report.moved, report.untouched, report.failed) == (3, 1, 4)
        assert report.errors == {"EBUSY": 2, "not moved": 1, "unknown": 1}
        assert report.nodes == {NODE: 3}
        assert not report.complete


# -- rebinding ---------------------------------------------------------------------------


def test_rebind_changes_the_policy_of_future_buffers_only() -> None:
    with HostArea() as area:
        old = area.mmap(4 * PAGE)
        area.rebind("bind", [NODE])
        assert (area.policy, area.nodes, area.device) == (Policy.BIND, (NODE,), NODE)
        new = area.mmap(4 * PAGE)
        with_options = area.mmap(4 * PAGE, {"alignment": 1 << 16})
        assert area.policy_of(old) == (Policy.DEFAULT, ())
        assert area.policy_of(new) == (Policy.BIND, (NODE,))
        assert area.policy_of(with_options) == (Policy.BIND, (NODE,))
        area.rebind(Policy.INTERLEAVE, NODES)
        assert area.policy_of(area.mmap(4 * PAGE)) == (Policy.INTERLEAVE, tuple(NODES))
        area.rebind("default")
        assert (area.policy, area.nodes, area.device) == (Policy.DEFAULT, (), None)
        assert area.policy_of(area.mmap(PAGE)) == (Policy.DEFAULT, ())
        assert "default" in repr(area)


def test_rebind_bad_input_changes_nothing() -> None:
    with HostArea("bind", [NODE]) as area:
        for policy, nodes, error in (
            ("bind", [OUTSIDE], AMLDomainError),
            ("bind", [], AMLValueError),
            ("default", [NODE], AMLValueError),
            ("nowhere", [NODE], AMLValueError),
            ("preferred", [NODE, NODE + 1], (AMLValueError, AMLDomainError)),
        ):
            with pytest.raises(error):
                area.rebind(policy, nodes)
            assert (area.policy, area.nodes) == (Policy.BIND, (NODE,))
    with pytest.raises(AMLValueError, match="closed"):
        area.rebind("default")


# -- a fresh mapping is bound without a move -----------------------------------------------


@pytest.fixture
def mbind_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, list[int], int]]:
    calls: list[tuple[int, int, list[int], int]] = []
    real = _os.mbind

    def spy(address: int, length: int, mode: int, nodes: list[int], flags: int) -> None:
        calls.append((length, mode, list(nodes), flags))
        real(address, length, mode, nodes, flags)

    monkeypatch.setattr(_os, "mbind", spy)
    return calls


def test_fresh_bound_mappings_are_not_asked_to_move(
    mbind_calls: list[tuple[int, int, list[int], int]],
) -> None:
    move, strict = numa_mod.MPOL_MF_MOVE, numa_mod.MPOL_MF_STRICT
    with HostArea("bind", [NODE]) as bound, HostArea("preferred", NODE) as preferred:
        bound.mmap(1 << 20)  # the fast path
        bound.mmap(1 << 20, {"alignment": 1 << 16})  # the option path
        preferred.mmap(PAGE)
        assert [c[3] for c in mbind_calls] == [0, 0, 0]
        mbind_calls.clear()
        # Pages made before the mbind (MAP_POPULATE, MAP_LOCKED) are moved (AML's flag);
        # under BIND strictly, so that one left off the set is an error, not a spill.
        buf = bound.mmap(16 * PAGE, {"flags": POPULATE})
        preferred.mmap(16 * PAGE, {"flags": POPULATE})
        assert [c[3] for c in mbind_calls] == [move | strict, move]
        assert bound.page_nodes(buf, summary=True) == {NODE: 16}


def test_populated_bind_that_cannot_be_placed_is_enomem_without_a_leak(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """mbind(MOVE|STRICT) says EIO when pages could not be moved onto the set (a full
    node): ENOMEM, and the mapping is unmapped."""
    unmapped: list[int] = []
    real_munmap = _os.munmap

    def eio(*args: Any) -> None:
        raise OSError(errno.EIO, "Input/output error", "mbind")

    def munmap(address: int, length: int) -> None:
        unmapped.append(length)
        real_munmap(address, length)

    monkeypatch.setattr(_os, "mbind", eio)
    monkeypatch.setattr(_os, "munmap", munmap)
    with HostArea("bind", [NODE]) as area:
        with pytest.raises(AMLMemoryError, match="does not spill"):
            area.mmap(16 * PAGE, {"flags": POPULATE})
        assert unmapped == [16 * PAGE]
        assert area.stats.bytes_in_use == 0

        def enomem(*args: Any) -> None:
            raise OSError(errno.ENOMEM, "Cannot allocate memory", "mbind")

        monkeypatch.setattr(_os, "mbind", enomem)
        with pytest.raises(AMLMemoryError):  # the fast path: its stock, then its own mapping
            area.mmap(PAGE)
        assert unmapped == [16 * PAGE, STOCK_SIZE, PAGE]
        with pytest.raises(AMLMemoryError):  # one past what a stock carves: its own mapping
            area.mmap(CARVE_MAX + PAGE)
        assert unmapped == [16 * PAGE, STOCK_SIZE, PAGE, CARVE_MAX + PAGE]
        assert area.stats.bytes_in_use == 0


# -- interleave and transparent huge pages ---------------------------------------------------

THP = transparent_huge_pages() is not None


@pytest.mark.skipif(not THP, reason="this kernel has no transparent huge pages")
def test_interleaved_buffers_are_not_huge_unless_asked() -> None:
    """ "auto" and False in an interleaving area advise MADV_NOHUGEPAGE from 2 MiB
    (page-by-page interleave); True advises MADV_HUGEPAGE and aligns to 2 MiB (whole huge pages
    interleave evenly); a bound area's 4 MiB still gets MADV_HUGEPAGE (NumPy's rule)."""
    with HostArea("interleave", NODES, transparent_huge_pages=False) as off:
        buf = off.mmap(8 << 20)
        assert "nh" in vm_flags(buf.ptr)  # off: off also where the kernel's mode is "always"
    with (
        HostArea("interleave", NODES) as auto,
        HostArea("interleave", NODES, transparent_huge_pages=True) as huge,
        HostArea("bind", [NODE]) as bound,
    ):
        for buf in (auto.mmap(64 << 20), auto.mmap(THP_INTERLEAVE_MIN, {"alignment": 1 << 16})):
            assert "nh" in vm_flags(buf.ptr)
            assert "hg" not in vm_flags(buf.ptr)
        assert "nh" not in vm_flags(auto.mmap(THP_INTERLEAVE_MIN - PAGE).ptr)
        big = huge.mmap(8 << 20)
        assert "hg" in vm_flags(big.ptr)
        assert big.ptr % (2 << 20) == 0
        assert "hg" in vm_flags(bound.mmap(4 << 20).ptr)


# -- weighted interleave -----------------------------------------------------------------


@pytest.fixture
def no_weighted_interleave(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """A kernel before 6.9: no weighted_interleave directory in sysfs."""
    monkeypatch.setattr(numa_mod, "WEIGHTED_INTERLEAVE_ROOT", str(tmp_path / "absent"))


def test_policy_names_weighted_interleave() -> None:
    assert Policy.parse("weighted_interleave") is Policy.WEIGHTED_INTERLEAVE
    assert int(Policy.WEIGHTED_INTERLEAVE) == 6


@pytest.mark.usefixtures("no_weighted_interleave")
def test_weighted_interleave_without_kernel_support_is_not_supported() -> None:
    assert not weighted_interleave_supported()
    with pytest.raises(AMLNotSupported, match=r"6\.9"):
        HostArea("weighted_interleave", NODES)
    with pytest.raises(AMLNotSupported, match=r"6\.9"):
        interleave_weights()
    with pytest.raises(AMLNotSupported, match=r"6\.9"):
        set_interleave_weights({NODE: 2})
    with HostArea() as area:
        with pytest.raises(AMLNotSupported):
            area.rebind("weighted_interleave", NODES)
        assert area.policy is Policy.DEFAULT


def test_a_kernel_refusing_the_mode_is_not_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numa_mod, "weighted_interleave_supported", lambda: True)

    def einval(*args: Any) -> None:
        raise OSError(errno.EINVAL, "Invalid argument", "mbind")

    monkeypatch.setattr(_os, "mbind", einval)
    with HostArea("weighted_interleave", NODES) as area:
        with pytest.raises(AMLNotSupported, match="refused"):
            area.mmap(PAGE, {"alignment": 1 << 16})
        assert area.stats.bytes_in_use == 0


@pytest.mark.skipif(
    not weighted_interleave_supported(), reason="this kernel has no weighted interleave (Linux < 6.9)"
)
def test_weighted_interleave_where_the_kernel_has_it() -> None:
    weights = interleave_weights()
    assert set(NODES) <= set(weights)
    assert all(1 <= w <= 255 for w in weights.values())
    with HostArea("weighted_interleave", NODES) as area:
        buf = area.mmap(32 * PAGE)
        assert area.policy_of(buf) == (Policy.WEIGHTED_INTERLEAVE, tuple(NODES))
        _os.touch(buf.ptr, buf.size, PAGE, 1)
        assert sum(area.page_nodes(buf, summary=True).values()) == 32
        assert set(area.page_nodes(buf)) <= set(NODES)


def test_interleave_weights_bad_input_writes_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    root = tmp_path / "weighted_interleave"
    root.mkdir()
    for node in NODES:
        (root / f"node{node}").write_text("1\n")
    monkeypatch.setattr(numa_mod, "WEIGHTED_INTERLEAVE_ROOT", str(root))
    assert interleave_weights() == dict.fromkeys(NODES, 1)
    for weights, error in (
        ({NODE: 0}, AMLValueError),
        ({NODE: 256}, AMLValueError),
        ({NODE: 2, OUTSIDE: 2}, AMLDomainError),
        ({NODE: "2"}, AMLTypeError),
        ([(NODE, 2)], AMLTypeError),
    ):
        with pytest.raises(error):
            set_interleave_weights(weights)  # type: ignore[arg-type]
        assert interleave_weights() == dict.fromkeys(NODES, 1)
    set_interleave_weights({NODE: 3})
    assert interleave_weights()[NODE] == 3
    (root / f"node{NODE}").unlink()
    (root / f"node{NODE}").mkdir()  # a write that fails (EISDIR): the OS error, typed
    with pytest.raises(AMLFailure, match="cannot write"):
        set_interleave_weights({NODE: 2})


@pytest.mark.parametrize("call", ["page_nodes", "move_pages"])
@pytest.mark.parametrize(
    ("offset", "pages", "code"),
    [(1, 1, errno.EINVAL), (0, 0, errno.EINVAL), (0, (1 << 24) + 1, errno.E2BIG)],
    ids=["misaligned", "empty", "past 2**24 pages"],
)
def test_the_native_move_pages_range_rules(call: str, offset: int, pages: int, code: int) -> None:
    """Both move_pages(2) entry points of aml_core._os refuse a range the same way, before
    any system call or allocation: EINVAL for a misaligned or empty range, E2BIG past 2**24
    pages (the kernel's own limit on one call)."""
    page = mmap.PAGESIZE
    args: tuple[Any, ...] = (page + offset, pages * page)
    if call == "move_pages":
        args += ([NODES[0]], 0)
    with pytest.raises(OSError, match="move_pages") as info:
        getattr(_os, call)(*args)
    assert info.value.errno == code
    assert info.value.filename == "move_pages"
