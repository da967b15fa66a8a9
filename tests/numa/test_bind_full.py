"""BIND never spills (issue 29): a populated mapping larger than its node set is
AMLMemoryError with nothing left mapped; one that fits is all on the set. In the
``small-node`` topology, whose node 2 (64 MiB, CPU-less) is too small for 128 MiB."""

from __future__ import annotations

import mmap

import pytest

from aml_core import _os
from aml_core.errors import AMLMemoryError
from aml_core.host import HostArea
from tests.support.numa_lab import LabTopology

PAGE = _os.PAGE_SIZE
MiB = 1 << 20

pytestmark = pytest.mark.numa_lab("small-node")


def _small(lab_topology: LabTopology) -> int:
    (node,) = [n.node for n in lab_topology.nodes if n.memory_mib < 128]
    return node


def test_a_populated_bind_past_the_node_is_enomem_and_leaves_nothing(lab_topology: LabTopology) -> None:
    small = _small(lab_topology)
    with HostArea("bind", [small]) as area:
        with pytest.raises(AMLMemoryError, match="does not spill"):
            area.mmap(128 * MiB, {"flags": mmap.MAP_POPULATE})
        assert area.stats.bytes_in_use == 0
        # What fits is placed there, populated, every page on the node.
        buf = area.mmap(16 * MiB, {"flags": mmap.MAP_POPULATE})
        assert area.page_nodes(buf, summary=True) == {small: (16 * MiB) // PAGE}


def test_a_preferred_node_spills_when_full(lab_topology: LabTopology) -> None:
    small = _small(lab_topology)
    with HostArea("preferred", small) as area:
        buf = area.mmap(128 * MiB)
        _os.touch(buf.ptr, buf.size, PAGE, 1)
        counts = area.page_nodes(buf, summary=True)
        assert sum(counts.values()) == (128 * MiB) // PAGE
        assert counts.get(small, 0) > 0
        assert set(counts) - {small}, counts  # the rest spilled to the other nodes
