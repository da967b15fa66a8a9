"""The pinned pool's placement in the NUMA lab (emulated machines, issue 33 item 6): every
page of a block on the node asked, on each node with CPUs; a CPU-less node refused unless
allowed, then placed there; an absent node EDOM; a full node ENOMEM with nothing left behind,
never a spill. Registration goes through the HIP driver double (host mode): placement is the
kernel's, which the lab emulates; pinning by a real driver needs a GPU."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aml_core.errors import AMLDomainError, AMLValueError
from tests.support.numa_lab import LabTopology

from .support import run_child

ROOT = Path(__file__).resolve().parents[2]
KiB, MiB = 1 << 10, 1 << 20


def _double() -> Any:
    """The HIP double's module (build and control), loaded from its file."""
    from tests.support.build_double import double_module

    return double_module("hip")


@pytest.fixture
def hip(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """aml_hip over the HIP double (``AML_HIP_LIBRARY`` when the runner passes one built on
    the host, else built here); after the test, nothing registered is left."""
    aml_hip = pytest.importorskip("aml_hip")
    module = _double()
    library = os.environ.get("AML_HIP_LIBRARY") or str(module.build_double("host"))
    monkeypatch.setenv("AML_HIP_LIBRARY", library)
    aml_hip.BACKEND.reset()
    control = module.DoubleControl(library)
    control.reset()
    yield aml_hip
    assert control.live("registered") == 0
    aml_hip.BACKEND.reset()


@pytest.mark.numa_lab("two-node", "tiered", "small-node")
def test_blocks_are_placed_on_each_cpu_node(lab_topology: LabTopology, hip: Any) -> None:
    for node in lab_topology.cpu_nodes:
        with hip.pinned_pool(node) as pool:
            for size in (4 * KiB, 100 * KiB + 1, 3 * MiB + 4 * KiB):
                buf = pool.mmap(size)
                length = -(-size // 4096) * 4096
                assert pool.page_nodes(buf) == {node: length // 4096}, (node, size)
                assert pool.pinned_stats.bytes_reserved == length
                pool.munmap(buf)
                pool.trim()


@pytest.mark.numa_lab("tiered", "small-node")
def test_a_cpu_less_node_is_refused_unless_allowed(lab_topology: LabTopology, hip: Any) -> None:
    node = lab_topology.cpuless_nodes[0]
    with pytest.raises(AMLValueError, match="no CPUs"):
        hip.pinned_pool(node)
    with hip.pinned_pool(node, allow_cpu_less=True) as pool:
        buf = pool.mmap(1 * MiB)
        assert pool.page_nodes(buf) == {node: 256}
        pool.munmap(buf)


@pytest.mark.numa_lab("two-node", "tiered", "small-node")
def test_an_absent_node_is_edom(lab_topology: LabTopology, hip: Any) -> None:
    absent = max(n.node for n in lab_topology.nodes) + 1
    with pytest.raises(AMLDomainError, match="does not exist"):
        hip.pinned_pool(absent)


_FILL = """
import json, os, sys
os.environ["AML_HIP_LIBRARY"] = sys.argv[3]
import aml_hip
from aml_core.errors import AMLMemoryError
node, step = int(sys.argv[1]), int(sys.argv[2])
pool = aml_hip.pinned_pool(node, allow_cpu_less=True, max_cached=0)
held, where = [], {}
try:
    while True:
        buf = pool.mmap(step)
        held.append(buf)
        for k, v in pool.page_nodes(buf).items():
            where[k] = where.get(k, 0) + v
except AMLMemoryError as exc:
    s = pool.pinned_stats
    print(json.dumps({"buffers": len(held), "pages": where, "code": int(exc.code),
                      "live": s.live_blocks, "registrations": s.registrations,
                      "reserved": s.bytes_reserved, "host_live": pool._host.stats.live_mappings}))
"""


@pytest.mark.numa_lab("small-node")
def test_a_full_node_is_enomem_never_a_spill(lab_topology: LabTopology, hip: Any) -> None:
    # Blocks on the small CPU-less node until it is full: every page of every block on it,
    # then ENOMEM from the prefault, before any registration of the block that did not fit
    # (in a child: were the OOM killer to come, it takes the child).
    node = lab_topology.cpuless_nodes[0]
    rc, outs, err = run_child(_FILL, str(node), str(4 * MiB), os.environ["AML_HIP_LIBRARY"])
    assert rc == 0, f"the child died (rc {rc}): {err[-2000:]}"
    out = outs[-1]
    assert out["code"] == 2, out  # ENOMEM
    assert out["buffers"] >= 4, out
    assert out["live"] == out["buffers"] == out["registrations"], out  # the failed one: none
    assert out["host_live"] == out["buffers"], out  # its mapping was given back
    assert out["reserved"] == out["buffers"] * 4 * MiB, out
    assert set(out["pages"]) == {str(node)}, out
