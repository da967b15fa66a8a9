"""Moving memory between nodes, rebinding, running a thread on each node and weighted
interleave, in the NUMA lab's emulated machines
(tests/numa/conftest.py; outside the lab these skip, inside a skip is a failure). BIND's
ENOMEM, PREFERRED's spill and interleave at the page size in use are test_placement.py's.

Every check reads back where the pages are (move_pages(2) queries, ``page_nodes``), with
a NumPy view of the buffer alive through the move."""

from __future__ import annotations

import os

import numpy as np
import pytest

from aml_core import _os
from aml_core.errors import AMLNotSupported, AMLValueError
from aml_core.host import (
    HostArea,
    Policy,
    allowed_nodes,
    current_node,
    interleave_weights,
    node_cpus,
    run_on_node,
    set_interleave_weights,
    weighted_interleave_supported,
)
from tests.support.numa_lab import LabTopology

PAGE = _os.PAGE_SIZE
MiB = 1 << 20

pytestmark = pytest.mark.numa_lab("two-node", "tiered", "small-node")


def _pages(n: int) -> int:
    return n // PAGE


@pytest.mark.parametrize("size", [64 * PAGE, 16 * MiB])
def test_move_between_nodes_with_a_numpy_view_live(lab_topology: LabTopology, size: int) -> None:
    """Every pair of nodes, both ways: the pages follow, the address and bytes do not
    change, the view reads and writes through the move."""
    nodes = [n for n in lab_topology.node_ids if lab_topology.node(n).memory_mib >= 128]
    with HostArea("bind", [nodes[0]]) as area:
        buf = area.mmap(size)
        arr = np.frombuffer(buf, dtype=np.uint32)
        arr[:] = np.arange(arr.size, dtype=np.uint32)
        ptr = buf.ptr
        assert area.page_nodes(buf, summary=True) == {nodes[0]: _pages(size)}
        for target in [*nodes[1:], nodes[0]]:
            report = area.move(buf, target)
            assert report.complete, report
            assert (report.pages, report.moved, report.untouched) == (_pages(size), _pages(size), 0)
            assert report.nodes == {target: _pages(size)}
            assert area.page_nodes(buf, summary=True) == {target: _pages(size)}
            assert buf.ptr == ptr
            assert arr.ctypes.data == ptr
            assert int(arr[-1]) == arr.size - 1
            assert np.array_equal(arr[:1024], np.arange(1024, dtype=np.uint32))
            arr[0] = target  # writable where it is now
            assert int(arr[0]) == target
            arr[0] = 0
        del arr


def test_move_interleaves_over_several_nodes(lab_topology: LabTopology) -> None:
    a, b = lab_topology.cpu_nodes[:2]
    with HostArea("bind", [a]) as area:
        buf = area.mmap(64 * PAGE)
        view = np.frombuffer(buf, dtype=np.uint8)
        view[::PAGE] = 1
        report = area.move(buf, [a, b])
        assert report.nodes == {a: 32, b: 32}
        placed = area.page_nodes(buf)
        assert placed[0::2] == [a] * 32
        assert placed[1::2] == [b] * 32
        del view


def test_a_move_leaves_untouched_pages_to_the_policy(lab_topology: LabTopology) -> None:
    a, b = lab_topology.cpu_nodes[:2]
    with HostArea("bind", [a]) as area:
        buf = area.mmap(32 * PAGE)
        _os.touch(buf.ptr, 16 * PAGE, PAGE, 1)
        report = area.move(buf, b)
        assert (report.moved, report.untouched, report.failed) == (16, 16, 0)
        _os.touch(buf.ptr, buf.size, PAGE, 2)  # the rest: placed by the buffer's BIND
        assert area.page_nodes(buf, summary=True) == {a: 16, b: 16}


def test_rebind_places_future_buffers_on_the_new_nodes(lab_topology: LabTopology) -> None:
    a, b = lab_topology.cpu_nodes[:2]
    with HostArea("bind", [a]) as area:
        old = area.mmap(32 * PAGE)
        area.rebind("bind", [b])
        new = area.mmap(32 * PAGE)
        area.rebind("interleave", [a, b])
        mixed = area.mmap(32 * PAGE)
        for buf in (old, new, mixed):
            _os.touch(buf.ptr, buf.size, PAGE, 1)
        assert area.page_nodes(old, summary=True) == {a: 32}
        assert area.page_nodes(new, summary=True) == {b: 32}
        assert area.page_nodes(mixed, summary=True) == {a: 16, b: 16}


def test_a_thread_runs_on_each_node_and_its_local_memory_is_there(lab_topology: LabTopology) -> None:
    before = os.sched_getaffinity(0)
    for node in lab_topology.cpu_nodes:
        with run_on_node(node) as cpus:
            assert cpus == set(lab_topology.node(node).cpus)
            assert current_node() == node
            with HostArea() as area:  # DEFAULT: the running CPU's node
                buf = area.mmap(4 * MiB)
                _os.touch(buf.ptr, buf.size, PAGE, 1)
                assert area.page_nodes(buf, summary=True) == {node: _pages(4 * MiB)}
        assert os.sched_getaffinity(0) == before


@pytest.mark.numa_lab("tiered", "small-node")
def test_a_cpu_less_node_is_refused_by_the_thread_helper(lab_topology: LabTopology) -> None:
    before = os.sched_getaffinity(0)
    for node in lab_topology.cpuless_nodes:
        assert node_cpus(node) == frozenset()
        with pytest.raises(AMLValueError, match="has no CPUs"), run_on_node(node):
            pytest.fail("the block ran")
        assert os.sched_getaffinity(0) == before


def _restore_weights(saved: dict[int, int]) -> None:
    set_interleave_weights(saved)


def test_weighted_interleave(lab_topology: LabTopology) -> None:
    """Linux 6.9+: pages in proportion to the weights (3:1 here); before 6.9 the policy
    and the weights are AMLNotSupported. The topology names the kernel it boots
    (numa_lab.TOPOLOGIES): two-node boots Debian's 6.12 (placed), the others Debian 12's
    6.1 (refused). A guest booted on another kernel than its topology's fails here."""
    a, b = lab_topology.cpu_nodes[:2]
    release = os.uname().release
    if lab_topology.kernel is not None:
        assert release.startswith(f"{lab_topology.kernel}."), (
            f"{lab_topology.name} should boot Linux {lab_topology.kernel} ({lab_topology.kernel_reason}), "
            f"not {release}: run-tests unpacks it (see python -m tests.support.numa_lab --list)"
        )
    major, minor = (int(x) for x in release.split(".")[:2])
    if (major, minor) < (6, 9):
        assert not weighted_interleave_supported()
        with pytest.raises(AMLNotSupported, match=r"6\.9"):
            HostArea("weighted_interleave", [a, b])
        with pytest.raises(AMLNotSupported):
            set_interleave_weights({a: 3, b: 1})
        return
    assert weighted_interleave_supported(), release
    saved = interleave_weights()
    try:
        set_interleave_weights({a: 3, b: 1})
        assert interleave_weights()[a] == 3
        with HostArea(Policy.WEIGHTED_INTERLEAVE, [a, b]) as area:
            buf = area.mmap(64 * PAGE)
            assert area.policy_of(buf) == (Policy.WEIGHTED_INTERLEAVE, (a, b))
            _os.touch(buf.ptr, buf.size, PAGE, 1)
            assert area.page_nodes(buf, summary=True) == {a: 48, b: 16}
            # page by page: any four pages in a row hold three on a and one on b
            each = area.page_nodes(buf)
            assert all(each[i : i + 4].count(b) == 1 for i in range(len(each) - 3)), each[:16]
    finally:
        _restore_weights({n: w for n, w in saved.items() if n in allowed_nodes()})
