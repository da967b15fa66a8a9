"""Memory tiers in the NUMA lab. On the ``tiered`` guest: what aml_core.topology reads
from the guest's sysfs is what QEMU was given (nodes, CPUs, sizes, distances, the HMAT
attributes Linux derives from QEMU's table, the kernel's memory tiers), memspaces choose
the nodes the lab's table says they should, areas made by what their memory is place
every page there, and ``aml info --json`` and the user guide's examples show the same. On
the ``two-node`` guest (no HMAT): memspaces rank by distance and say so."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import aml_core
from aml_core import topology
from aml_core.errors import AMLNotSupported
from aml_core.host import HostArea, Policy
from tests.support.numa_lab import LabTopology
from tests.test_tiers import tiers_guide_examples

tiered = pytest.mark.numa_lab("tiered")

ROOT = Path(__file__).resolve().parents[2]
PAGE = os.sysconf("SC_PAGE_SIZE")


def _best_initiators(lab: LabTopology, target: int) -> tuple[int, ...]:
    """The initiators Linux lists under ``node<target>/access0/initiators``: those with the
    best latency and the best bandwidth to the target among every initiator of the
    table (drivers/acpi/numa/hmat.c keeps an initiator only when it is best for each)."""
    links = [link for link in lab.hmat if link.target == target]
    best_latency = min(link.latency_ns for link in links)
    best_bandwidth = max(link.bandwidth_mbps for link in links)
    return tuple(
        sorted(
            link.initiator
            for link in links
            if link.latency_ns == best_latency and link.bandwidth_mbps == best_bandwidth
        )
    )


def _expected(lab: LabTopology, kind: str, near: int) -> tuple[int, ...]:
    """The nodes a memspace should choose, from the lab's own table: among the targets
    whose best initiators include ``near`` (the only pairs Linux shows), the best value."""
    rated = [link for link in lab.hmat if link.initiator == near]
    rated = [link for link in rated if near in _best_initiators(lab, link.target)]
    if kind == "highest_bandwidth":
        best = max(link.bandwidth_mbps for link in rated)
        return tuple(sorted(link.target for link in rated if link.bandwidth_mbps == best))
    best = min(link.latency_ns for link in rated)
    return tuple(sorted(link.target for link in rated if link.latency_ns == best))


@contextlib.contextmanager
def _on_cpus(cpus: set[int]) -> Iterator[None]:
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _place(area: HostArea, size: int = 4 << 20) -> dict[int, int]:
    buf = area.mmap(size)
    try:
        ctypes.memset(buf.ptr, 0xA5, size)
        assert bytes(memoryview(buf)[size - 2 :]) == b"\xa5\xa5"
        return area.page_nodes(buf, summary=True)
    finally:
        buf.free()


@tiered
def test_the_nodes_are_what_qemu_was_given(lab_topology: LabTopology) -> None:
    topo = topology.memory_topology()
    assert [n.node for n in topo.nodes] == list(lab_topology.node_ids)
    for n in topo.nodes:
        lab = lab_topology.node(n.node)
        assert (n.cpus, n.has_cpu) == (lab.cpus, lab.has_cpu), n
        assert n.memory is not None
        # The kernel keeps part of a node for its own structures (its page structs): the
        # same bound as test_lab_machine's node sizes (node 2 had 208 of 256 MiB in CI).
        assert 0.75 * (lab.memory_mib << 20) <= n.memory <= lab.memory_mib << 20, n
        assert n.distances == tuple((b, lab_topology.distance(n.node, b)) for b in lab_topology.node_ids)
    assert [n.node for n in topo.nodes if not n.has_cpu] == list(lab_topology.cpuless_nodes)


@tiered
def test_the_hmat_attributes_are_the_labs_table(lab_topology: LabTopology) -> None:
    topo = topology.memory_topology()
    assert topo.hmat
    for n in topo.nodes:
        initiators = _best_initiators(lab_topology, n.node)
        link = lab_topology.link(initiators[0], n.node)
        assert link is not None
        access0 = n.access[0]
        assert (access0.access_class, access0.initiators) == (0, initiators), n
        assert (access0.read_latency, access0.write_latency) == (link.latency_ns, link.latency_ns), n
        bandwidth = link.bandwidth_mbps
        assert (access0.read_bandwidth, access0.write_bandwidth) == (bandwidth, bandwidth), n
        # every initiator of the lab is a CPU node: class 1 (best CPU initiators), where the
        # kernel lists it, is class 0 again
        for other in n.access[1:]:
            assert other.access_class == 1
            assert (other.initiators, other.read_bandwidth, other.read_latency) == (
                access0.initiators,
                access0.read_bandwidth,
                access0.read_latency,
            )


@tiered
def test_the_memory_tiers_hold_every_node(lab_topology: LabTopology) -> None:
    tiers = topology.memory_tiers()
    assert tiers is not None, "Linux 6.1 lists /sys/devices/virtual/memory_tiering"
    listed = sorted(node for t in tiers for node in t.nodes)
    assert listed == list(lab_topology.node_ids)  # each node in exactly one tier
    assert [t.tier for t in tiers] == sorted(t.tier for t in tiers)
    for t in tiers:
        first, last = t.abstract_distance
        assert first == t.tier * 128
        assert last == first + 127
    assert {n.node: n.tier for n in topology.memory_topology().nodes} == {
        node: t.tier for t in tiers for node in t.nodes
    }


@tiered
@pytest.mark.parametrize("kind", ["highest_bandwidth", "lowest_latency"])
def test_memspaces_follow_the_hmat_table(lab_topology: LabTopology, kind: str) -> None:
    for near in lab_topology.cpu_nodes:
        got = topology.memspace(kind, near)
        assert got.basis.startswith("hmat_"), got
        assert got.nodes == _expected(lab_topology, kind, near), got
    # a CPU-less node initiates nothing: by distance, and said so
    far = lab_topology.cpuless_nodes[-1]
    got = topology.memspace(kind, far)
    assert got.by_distance
    assert got.nodes == (far,)
    assert "ranked by NUMA distance" in got.note


@tiered
def test_capacity_and_cpu_less_memspaces(lab_topology: LabTopology) -> None:
    sizes = {n.node: n.memory or 0 for n in topology.numa_nodes()}
    got = topology.memspace("highest_capacity", 0)
    assert got.nodes
    assert all(sizes[n] == max(sizes.values()) for n in got.nodes)
    assert lab_topology.node(got.nodes[0]).memory_mib == max(n.memory_mib for n in lab_topology.nodes)
    cpu_less = topology.memspace("cpu_less", 0)
    assert cpu_less.nodes == lab_topology.cpuless_nodes
    assert [n for n, _ in cpu_less.ranking] == sorted(
        lab_topology.cpuless_nodes, key=lambda n: (lab_topology.distance(0, n), n)
    )


@tiered
def test_the_calling_threads_node(lab_topology: LabTopology) -> None:
    for node in lab_topology.cpu_nodes:
        with _on_cpus(set(lab_topology.node(node).cpus)):
            assert topology.current_node() == node
            got = topology.memspace("highest_bandwidth")
            assert got.near == node
            assert got.nodes == _expected(lab_topology, "highest_bandwidth", node)


@tiered
def test_areas_by_what_their_memory_is_place_every_page_there(lab_topology: LabTopology) -> None:
    fast = _expected(lab_topology, "highest_bandwidth", 0)
    with aml_core.area(kind="host", backend="host", memspace="highest_bandwidth", near=0) as area:
        assert isinstance(area, HostArea)
        assert (area.policy, area.nodes) == (Policy.BIND, fast)
        assert area.memspace is not None
        assert area.memspace.basis == "hmat_read_bandwidth"
        assert _place(area) == {fast[0]: (4 << 20) // PAGE}
    cpu_less = lab_topology.cpuless_nodes
    for near in lab_topology.cpu_nodes:
        cpus = set(lab_topology.node(near).cpus)
        with _on_cpus(cpus), aml_core.area(kind="host", backend="host", memspace="cpu_less") as area:
            placed = _place(area)
            assert set(placed) <= set(cpu_less), placed
            # BIND over several nodes: the kernel fills the nearest of them to the CPU first
            nearest = min(cpu_less, key=lambda n: (lab_topology.distance(near, n), n))
            assert placed == {nearest: (4 << 20) // PAGE}, (near, placed)
    with aml_core.area(
        kind="host", backend="host", memspace="lowest_latency", near=1, policy="preferred"
    ) as area:
        want = _expected(lab_topology, "lowest_latency", 1)[0]
        assert (area.policy, area.nodes) == (Policy.PREFERRED, (want,))
        assert _place(area) == {want: (4 << 20) // PAGE}


@tiered
def test_a_pool_over_the_fast_memory(lab_topology: LabTopology) -> None:
    from aml_core.pool import pool

    fast = _expected(lab_topology, "highest_bandwidth", 0)
    with aml_core.area(kind="host", backend="host", memspace="highest_bandwidth", near=0) as area:
        p = pool(area)
        try:
            blocks = [p.mmap(1 << 20) for _ in range(3)]
            for block in blocks:
                ctypes.memset(block.ptr, 7, block.size)
                first = block.ptr - block.ptr % PAGE
                assert set(aml_core.host.page_nodes(first, block.size, summary=True)) == set(fast)
            for block in blocks:
                block.free()
        finally:
            p.close()


#: ``aml info --json`` then ``aml info`` in one interpreter (a child Python costs ~15 s
#: under TCG): the two outputs, split by a line of their own.
_INFO_BOTH = """
import sys
from aml_core.cli import main
rc = main(["info", "--json"])
print("\\n-- aml info --", flush=True)
sys.exit(rc or main(["info"]))
"""


@tiered
def test_aml_info_json_shows_the_tiers(lab_topology: LabTopology) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _INFO_BOTH],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    as_json, _, text = done.stdout.partition("\n-- aml info --\n")
    topo = json.loads(as_json)["topology"]
    assert topo["hmat"] is True
    assert [n["node"] for n in topo["nodes"]] == list(lab_topology.node_ids)
    assert [n["has_cpu"] for n in topo["nodes"]] == [n.has_cpu for n in lab_topology.nodes]
    fast = lab_topology.cpuless_nodes[0]
    link = lab_topology.link(_best_initiators(lab_topology, fast)[0], fast)
    assert link is not None
    assert topo["nodes"][fast]["access"][0]["read_bandwidth"] == link.bandwidth_mbps
    assert topo["memory_tiers"]
    assert "Memory nodes (HMAT" in text
    print(text)  # the lab log keeps what the guest showed


@tiered
def test_the_guides_examples(capsys: pytest.CaptureFixture[str], lab_topology: LabTopology) -> None:
    for block in tiers_guide_examples():
        exec(compile(block, "docs/numa.md", "exec"), {})
    out = capsys.readouterr().out
    fast = _expected(lab_topology, "highest_bandwidth", 0)
    assert f"{fast} hmat_read_bandwidth" in out
    assert str(lab_topology.cpuless_nodes) in out
    print(out)


@pytest.mark.numa_lab("two-node")
def test_without_hmat_memspaces_rank_by_distance(lab_topology: LabTopology) -> None:
    topo = topology.memory_topology()
    assert not topo.hmat
    assert all(n.access == () and n.has_cpu for n in topo.nodes)
    for near in lab_topology.cpu_nodes:
        for kind in ("highest_bandwidth", "lowest_latency"):
            got = topology.memspace(kind, near)
            assert got.by_distance
            assert got.nodes == (near,)
            assert got.ranking == tuple(
                sorted(
                    ((n, lab_topology.distance(near, n)) for n in lab_topology.node_ids),
                    key=lambda x: (x[1], x[0]),
                )
            )
            assert "ranked by NUMA distance" in got.note
        cpus = set(lab_topology.node(near).cpus)
        with _on_cpus(cpus), aml_core.area(kind="host", backend="host", memspace="lowest_latency") as area:
            assert area.memspace is not None
            assert area.memspace.by_distance
            assert _place(area) == {near: (4 << 20) // PAGE}
    with pytest.raises(AMLNotSupported, match="every NUMA node with memory here has CPUs"):
        topology.memspace("cpu_less", 0)
    with pytest.raises(AMLNotSupported):
        aml_core.area(kind="host", backend="host", memspace="cpu_less")
