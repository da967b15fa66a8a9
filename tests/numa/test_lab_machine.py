"""The guest is the machine its topology describes: the nodes, their CPUs and sizes, the
distances and the HMAT access attributes Linux shows, and aml's view of them. Every other
lab test relies on these."""

from __future__ import annotations

from pathlib import Path

import pytest

from aml_core.host import allowed_nodes, online_nodes
from aml_core.host.numa import node_memory
from tests.support.numa_lab import LabTopology

NODE = Path("/sys/devices/system/node")


def _read(path: Path) -> str:
    return path.read_text().strip()


def test_nodes_and_cpus(lab_topology: LabTopology) -> None:
    assert online_nodes() == list(lab_topology.node_ids)
    assert allowed_nodes() == frozenset(lab_topology.node_ids)
    for n in lab_topology.nodes:
        cpulist = _read(NODE / f"node{n.node}" / "cpulist")
        assert cpulist == ",".join(map(str, n.cpus)), (n, cpulist)


def test_node_sizes(lab_topology: LabTopology) -> None:
    # MemTotal is the node's memory less what the kernel reserved at boot (its code, the
    # struct pages of the node and, on the highest node, the initramfs virtme-ng loads at
    # the top of memory: node 3 of tiered had 205 MiB of 256 in one run): within 25 %.
    for n in lab_topology.nodes:
        total = node_memory(n.node)
        assert 0.75 * (n.memory_mib << 20) <= total <= n.memory_mib << 20, (n, total)


def test_distances(lab_topology: LabTopology) -> None:
    for a in lab_topology.node_ids:
        row = [int(x) for x in _read(NODE / f"node{a}" / "distance").split()]
        assert row == [lab_topology.distance(a, b) for b in lab_topology.node_ids], (a, row)


@pytest.mark.numa_lab("tiered")
def test_hmat_access_attributes(lab_topology: LabTopology) -> None:
    # access0 is the best initiator's: the node itself for a node with CPUs, its
    # initiator for a CPU-less node.
    for n in lab_topology.nodes:
        initiator = n.node if n.cpus else n.initiator
        assert initiator is not None
        link = lab_topology.link(initiator, n.node)
        assert link is not None
        access = NODE / f"node{n.node}" / "access0" / "initiators"
        assert (access / f"node{initiator}").exists(), sorted(p.name for p in access.iterdir())
        assert int(_read(access / "read_latency")) == link.latency_ns
        assert int(_read(access / "read_bandwidth")) == link.bandwidth_mbps
        assert int(_read(access / "write_bandwidth")) == link.bandwidth_mbps
    assert Path("/sys/devices/virtual/memory_tiering").is_dir()
