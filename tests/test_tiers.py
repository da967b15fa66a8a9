"""Memory as what it is, over fake sysfs trees: NUMA nodes with their CPUs and memory,
HMAT access attributes per initiator, CPU-less nodes, the kernel's memory tiers
(aml_core.topology); asking for memory by what it is (memspaces) and the host areas made
from the answer; and the readers' promise, "never an error: topology is a report", on
sysfs values no kernel writes (issue 32, root cause 9)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aml_core
from aml_core import cli, codec, topology
from aml_core.errors import AMLDomainError, AMLError, AMLNotSupported, AMLTypeError, AMLValueError
from aml_core.host import HostArea, Policy
from aml_core.host import numa as host_numa
from aml_core.topology import Access, MemoryTier, Memspace

from .support.fake_sysfs import has_cpu, hmat, kfd_gpu, memory_tier, numa_node, pci_device, tiered


def _two_nodes(root: Path) -> None:
    """The lab's ``two-node`` machine: two nodes with a CPU each, distance 21, no HMAT."""
    numa_node(root, 0, cpus="0", memory=1 << 30, distance=[10, 21])
    numa_node(root, 1, cpus="1", memory=1 << 30, distance=[21, 10])


# -- reading ------------------------------------------------------------------------------------
def test_two_nodes_without_hmat_or_tiers(tmp_path: Path) -> None:
    _two_nodes(tmp_path)
    topo = topology.memory_topology(str(tmp_path))
    assert [n.node for n in topo.nodes] == [0, 1]
    assert [(n.cpus, n.has_cpu, n.memory) for n in topo.nodes] == [
        ((0,), True, 1 << 30),
        ((1,), True, 1 << 30),
    ]
    assert topo.nodes[0].distances == ((0, 10), (1, 21))
    assert topo.nodes[1].distance(0) == 21
    assert topo.nodes[0].distance(7) is None
    assert not topo.hmat
    assert topo.tiers is None  # no memory_tiering directory: not "no tiers"
    assert all(n.tier is None and n.access == () for n in topo.nodes)


def test_four_nodes_with_hmat_cpu_less_nodes_and_tiers(tmp_path: Path) -> None:
    tiered(tmp_path)
    root = str(tmp_path)
    topo = topology.memory_topology(root)
    assert topo.hmat
    assert [(n.node, n.cpus, n.has_cpu) for n in topo.nodes] == [
        (0, (0,), True),
        (1, (1,), True),
        (2, (), False),
        (3, (), False),
    ]
    assert [n.memory for n in topo.nodes] == [1 << 30, 1 << 30, 512 << 20, 2 << 30]
    fast = topo.node(2)
    assert fast is not None
    assert topo.node(9) is None
    assert fast.access == (
        Access(0, (0,), read_bandwidth=51200, write_bandwidth=40960, read_latency=40, write_latency=50),
        Access(1, (0,), read_bandwidth=51200, write_bandwidth=40960, read_latency=40, write_latency=50),
    )
    assert fast.access_from(0) == fast.access[0]
    assert fast.access_from(1) is None  # node 1 is not one of its initiators
    far = topo.node(3)
    assert far is not None
    assert far.access[0].initiators == (0, 1)
    assert topology.hmat_access(3, root) == far.access
    assert topo.tiers == (MemoryTier(4, (0, 1, 2, 3)),)
    assert topo.tiers[0].abstract_distance == (512, 639)
    assert {n.tier for n in topo.nodes} == {4}


def test_has_cpu_is_the_kernels_list_when_there_is_one(tmp_path: Path) -> None:
    _two_nodes(tmp_path)
    assert [n.has_cpu for n in topology.numa_nodes(str(tmp_path))] == [True, True]
    has_cpu(tmp_path, "1")  # the kernel's N_CPU says node 0 has none (all its CPUs offline)
    assert [n.has_cpu for n in topology.numa_nodes(str(tmp_path))] == [False, True]
    numa_node(tmp_path, 0, cpus="", memory=1 << 30)
    (tmp_path / "devices/system/node/has_cpu").unlink()
    assert [n.has_cpu for n in topology.numa_nodes(str(tmp_path))] == [False, True]  # an empty cpulist


def test_memory_tiers_fastest_first(tmp_path: Path) -> None:
    tiered(tmp_path, with_tiers=False)
    root = str(tmp_path)
    assert topology.memory_tiers(root) is None
    (tmp_path / "devices/virtual/memory_tiering").mkdir(parents=True)
    assert topology.memory_tiers(root) == ()  # the kernel has tiering and no tier yet
    memory_tier(tmp_path, 5, "3")  # e.g. dax/kmem memory (MEMTIER_DEFAULT_DAX_ADISTANCE)
    memory_tier(tmp_path, 4, "0-2")
    memory_tier(tmp_path, 12, "x")  # unreadable: left out
    (tmp_path / "devices/virtual/memory_tiering/power").mkdir()  # not a tier
    tiers = topology.memory_tiers(root)
    assert tiers == (MemoryTier(4, (0, 1, 2)), MemoryTier(5, (3,)))
    assert tiers[1].abstract_distance == (640, 767)
    assert [n.tier for n in topology.memory_topology(root).nodes] == [4, 4, 4, 5]


def test_hmat_with_some_attributes_missing(tmp_path: Path) -> None:
    _two_nodes(tmp_path)
    hmat(tmp_path, 1, [0], read_latency=120)  # firmware gave only a read latency
    (tmp_path / "devices/system/node/node0/access0/initiators").mkdir(parents=True)  # empty class
    root = str(tmp_path)
    assert topology.hmat_access(1, root) == (Access(0, (0,), read_latency=120),)
    assert topology.hmat_access(0, root) == ()
    assert topology.hmat_access(5, root) == ()


def test_an_empty_sysfs(tmp_path: Path) -> None:
    root = str(tmp_path)
    assert topology.memory_topology(root) == topology.MemoryTopology()
    assert topology.numa_nodes(root) == ()
    with pytest.raises(AMLNotSupported, match="no NUMA node"):
        topology.memspace("highest_bandwidth", root=root)


def test_the_sysfs_root_setting_applies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiered(tmp_path)
    monkeypatch.setattr(topology, "SYSFS", str(tmp_path))
    assert len(topology.memory_topology().nodes) == 4
    assert topology.memspace("highest_bandwidth", 0).nodes == (2,)


def test_the_calling_threads_node(tmp_path: Path) -> None:
    tiered(tmp_path)
    proc = tmp_path / "proc"
    (proc / "thread-self").mkdir(parents=True)
    fields = ["S"] + ["0"] * 35 + ["1"] + ["0"] * 15  # field 39 (processor): CPU 1
    (proc / "thread-self/stat").write_text("4242 (a (tricky) name) " + " ".join(fields) + "\n")
    assert topology.current_node(str(tmp_path), str(proc)) == 1
    (proc / "thread-self/stat").write_text("4242 (x) S 1 2\n")  # too short
    assert topology.current_node(str(tmp_path), str(proc)) is None
    assert topology.current_node(str(tmp_path), str(tmp_path / "none")) is None
    # on this machine: the node of the CPU this thread runs on
    assert topology.current_node() in {n.node for n in topology.numa_nodes()}


# -- asking for memory by what it is ------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "near", "nodes", "basis", "ranking"),
    [
        ("highest_bandwidth", 0, (2,), "hmat_read_bandwidth", ((2, 51200), (0, 25600), (3, 6400))),
        ("lowest_latency", 0, (2,), "hmat_read_latency", ((2, 40), (0, 80), (3, 400))),
        ("highest_bandwidth", 1, (1,), "hmat_read_bandwidth", ((1, 25600), (3, 6400))),
        (Memspace.LOWEST_LATENCY, 1, (1,), "hmat_read_latency", ((1, 80), (3, 400))),
        ("HIGHEST_CAPACITY", 0, (3,), "capacity", ((3, 2 << 30), (0, 1 << 30), (1, 1 << 30), (2, 512 << 20))),
        ("highest_capacity", 1, (3,), "capacity", ((3, 2 << 30), (1, 1 << 30), (0, 1 << 30), (2, 512 << 20))),
        ("cpu_less", 0, (2, 3), "cpu_less_distance", ((2, 12), (3, 30))),
        ("cpu_less", 1, (2, 3), "cpu_less_distance", ((2, 22), (3, 30))),
    ],
)
def test_memspaces_with_hmat(
    tmp_path: Path,
    kind: str,
    near: int,
    nodes: tuple[int, ...],
    basis: str,
    ranking: tuple[tuple[int, int], ...],
) -> None:
    tiered(tmp_path)
    got = topology.memspace(kind, near, root=str(tmp_path))
    assert (got.nodes, got.basis, got.ranking, got.near) == (nodes, basis, ranking, near)
    assert not got.by_distance


def test_nodes_hmat_says_nothing_of_are_not_ranked(tmp_path: Path) -> None:
    tiered(tmp_path)
    got = topology.memspace("highest_bandwidth", 1, root=str(tmp_path))
    assert "nodes [0, 2] have no HMAT attributes for node 1" in got.note


def test_ties_are_all_chosen(tmp_path: Path) -> None:
    tiered(tmp_path)
    hmat(tmp_path, 1, [0], read_bandwidth=51200, write_bandwidth=40960, read_latency=40, write_latency=50)
    got = topology.memspace("highest_bandwidth", 0, root=str(tmp_path))
    assert got.nodes == (1, 2)
    # the write bandwidth breaks a tie of read bandwidths
    hmat(tmp_path, 3, [0, 1], read_bandwidth=51200)  # no write bandwidth: ranked below
    (tmp_path / "devices/system/node/node3/access0/initiators/write_bandwidth").unlink()
    (tmp_path / "devices/system/node/node3/access1").rename(tmp_path / "gone")
    got = topology.memspace("highest_bandwidth", 0, root=str(tmp_path))
    assert got.nodes == (1, 2)
    assert got.ranking[-2][0] == 3


def test_without_hmat_bandwidth_and_latency_are_ranked_by_distance(tmp_path: Path) -> None:
    tiered(tmp_path, with_hmat=False)
    for kind in ("highest_bandwidth", "lowest_latency"):
        got = topology.memspace(kind, 0, root=str(tmp_path))
        assert got.by_distance
        assert got.basis == "distance"
        assert got.nodes == (0,)
        assert got.ranking == ((0, 10), (2, 12), (1, 21), (3, 30))
        assert "ranked by NUMA distance" in got.note
    # HMAT elsewhere, none for this initiator: by distance, and said so
    tiered(tmp_path)
    got = topology.memspace("highest_bandwidth", 2, root=str(tmp_path))
    assert got.by_distance
    assert got.nodes == (2,)
    assert "no HMAT read bandwidth for node 2" in got.note


def test_a_two_node_machine(tmp_path: Path) -> None:
    _two_nodes(tmp_path)
    root = str(tmp_path)
    assert topology.memspace("highest_bandwidth", 1, root=root).nodes == (1,)
    assert topology.memspace("highest_capacity", 1, root=root).nodes == (0, 1)  # equal sizes tie
    with pytest.raises(AMLNotSupported, match="every NUMA node with memory here has CPUs"):
        topology.memspace("cpu_less", 0, root=root)


def test_a_tier_query_on_a_machine_without_the_attribute(tmp_path: Path) -> None:
    for n in (0, 1):  # nodes with no distance files and no HMAT
        numa_node(tmp_path, n, cpus=str(n), memory=None)
    root = str(tmp_path)
    for kind in ("highest_bandwidth", "lowest_latency"):
        with pytest.raises(AMLNotSupported, match="no HMAT attributes for node 0 and no NUMA distances"):
            topology.memspace(kind, 0, root=root)
    with pytest.raises(AMLNotSupported, match="MemTotal"):
        topology.memspace("highest_capacity", 0, root=root)
    with pytest.raises(AMLNotSupported, match="has CPUs"):
        topology.memspace("cpu_less", 0, root=root)
    # the calling thread's node cannot be read: say so, and how to ask
    with pytest.raises(AMLNotSupported, match="pass near="):
        topology.memspace("highest_bandwidth", root=root, proc=str(tmp_path / "no-proc"))


def test_bad_memspace_requests(tmp_path: Path) -> None:
    tiered(tmp_path)
    root = str(tmp_path)
    with pytest.raises(AMLValueError, match="unknown memspace 'fastest'; allowed: highest_bandwidth"):
        topology.memspace("fastest", 0, root=root)
    with pytest.raises(AMLTypeError):
        topology.memspace(3, 0, root=root)  # type: ignore[arg-type]
    with pytest.raises(AMLTypeError):
        topology.memspace("cpu_less", True, root=root)
    with pytest.raises(AMLTypeError):
        topology.memspace("cpu_less", "0", root=root)  # type: ignore[arg-type]
    with pytest.raises(AMLDomainError, match="near=7 is not a NUMA node"):
        topology.memspace("cpu_less", 7, root=root)


def test_only_the_allowed_nodes_and_those_with_memory(tmp_path: Path) -> None:
    tiered(tmp_path)
    root = str(tmp_path)
    assert topology.memspace("highest_bandwidth", 0, allowed=[0, 1, 3], root=root).nodes == (0,)
    assert topology.memspace("cpu_less", 0, allowed={0, 1, 3}, root=root).nodes == (3,)
    with pytest.raises(AMLNotSupported, match="has CPUs"):
        topology.memspace("cpu_less", 0, allowed=[0, 1], root=root)
    with pytest.raises(AMLNotSupported, match="no NUMA node with memory"):
        topology.memspace("cpu_less", 0, allowed=[], root=root)
    numa_node(tmp_path, 2, cpus="", memory=0, distance=[12, 22, 10, 35])  # a node with no memory
    assert topology.memspace("cpu_less", 0, root=root).nodes == (3,)
    assert topology.memspace("highest_bandwidth", 0, root=root).nodes == (0,)


# -- host areas made by what the memory is ------------------------------------------------------
@pytest.fixture
def fake_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiered machine's sysfs, where this process may use node 0 only (the real
    machine's node): every memspace answer is then a node the kernel can bind to."""
    tiered(tmp_path)
    monkeypatch.setattr(topology, "SYSFS", str(tmp_path))
    monkeypatch.setattr(host_numa, "allowed_nodes", lambda: frozenset({0}))
    return tmp_path


def _touch_and_check(area: HostArea, node: int) -> None:
    buf = area.mmap(1 << 20)
    try:
        ctypes.memset(buf.ptr, 0x5A, buf.size)
        assert bytes(memoryview(buf)[:4]) == b"ZZZZ"
        assert area.page_nodes(buf, summary=True) == {node: buf.size // os.sysconf("SC_PAGE_SIZE")}
        assert area.policy_of(buf)[1] == (node,)
    finally:
        buf.free()


@pytest.mark.usefixtures("fake_machine")
def test_an_area_by_what_its_memory_is() -> None:
    with aml_core.area(kind="host", backend="host", memspace="highest_bandwidth", near=0) as area:
        assert isinstance(area, HostArea)
        assert (area.policy, area.nodes) == (Policy.BIND, (0,))  # node 2 is faster, not allowed
        assert area.memspace is not None
        assert area.memspace.basis == "hmat_read_bandwidth"
        _touch_and_check(area, 0)
    with aml_core.area(
        kind="host", backend="host", memspace=Memspace.LOWEST_LATENCY, near=0, policy="preferred"
    ) as area:
        assert (area.policy, area.nodes) == (Policy.PREFERRED, (0,))
        _touch_and_check(area, 0)
    with aml_core.area(
        kind="host", backend="host", memspace="highest_capacity", policy=Policy.INTERLEAVE
    ) as area:
        assert (area.policy, area.nodes) == (Policy.INTERLEAVE, (0,))
    assert HostArea().memspace is None  # an area given its nodes says nothing of memspaces


@pytest.mark.usefixtures("fake_machine")
def test_a_pool_over_such_an_area() -> None:
    from aml_core.pool import pool

    with aml_core.area(kind="host", backend="host", memspace="lowest_latency", near=0) as area:
        p = pool(area)
        try:
            block = p.mmap(8192)
            ctypes.memset(block.ptr, 1, block.size)
            page = os.sysconf("SC_PAGE_SIZE")
            assert host_numa.page_nodes(block.ptr - block.ptr % page, page, summary=True) == {0: 1}
            block.free()
        finally:
            p.close()


@pytest.mark.usefixtures("fake_machine")
def test_bad_memspace_area_requests() -> None:
    with pytest.raises(AMLNotSupported, match="no memspace cpu_less"):  # every CPU-less node is forbidden
        aml_core.area(kind="host", backend="host", memspace="cpu_less")
    with pytest.raises(AMLValueError, match="not both"):
        aml_core.area(kind="host", device=0, memspace="highest_bandwidth")
    with pytest.raises(AMLValueError, match="not both"):
        aml_core.area(kind="host", nodes=[0], memspace="highest_bandwidth")
    with pytest.raises(AMLValueError, match="not DEFAULT"):
        aml_core.area(kind="host", backend="host", memspace="highest_bandwidth", policy="default")
    with pytest.raises(AMLValueError, match="give memspace= too"):
        aml_core.area(kind="host", near=0)
    with pytest.raises(AMLValueError, match="unknown memspace"):
        aml_core.area(kind="host", backend="host", memspace="hbm")
    with pytest.raises(AMLDomainError):
        aml_core.area(kind="host", backend="host", memspace="highest_bandwidth", near=9)


# -- aml info -----------------------------------------------------------------------------------
def _info(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    monkeypatch.setattr(topology, "SYSFS", str(tmp_path))
    return {
        "aml_core": "0",
        "python": "3.11",
        "aml_core_path": "/x",
        "warnings": [],
        "backends": [],
        "chosen": {"host": {"backend": "host", "rejected": []}},
        "topology": cli.topology_data(),
    }


def test_aml_info_shows_the_memory_nodes_and_tiers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiered(tmp_path)
    cpu_only = {"read_bandwidth": 20000, "write_bandwidth": 20000, "read_latency": 90, "write_latency": 90}
    hmat(tmp_path, 1, [1], access=1, **cpu_only)
    text = cli.render(_info(tmp_path, monkeypatch), width=80)
    lines = text.splitlines()
    first = lines.index('Memory nodes (HMAT: bandwidth and latency from the initiator nodes in "from"):')
    assert lines[first + 1 : first + 9] == [
        "  node  CPUs     memory  tier  from       rd MiB/s  wr MiB/s  rd ns  wr ns",
        "     0  0       1.0 GiB     4  0             25600     25600     80     80",
        "     1  1       1.0 GiB     4  1             25600     25600     80     80",
        "                               CPUs of 1     20000     20000     90     90",
        "     2  none  512.0 MiB     4  0             51200     40960     40     50",
        "     3  none    2.0 GiB     4  0-1            6400      3200    400    500",
        "Memory tiers (fastest first):",
        "  memory_tier4: nodes 0-3 (abstract distance 512-639)",
    ]
    assert all(len(line) <= 80 for line in lines)


def test_aml_info_without_hmat_or_tiers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiered(tmp_path, with_hmat=False, with_tiers=False)
    lines = cli.render(_info(tmp_path, monkeypatch)).splitlines()
    first = lines.index('Memory nodes (HMAT: bandwidth and latency from the initiator nodes in "from"):')
    assert lines[first + 1 : first + 8] == [
        "  node  CPUs     memory  tier",
        "     0  0       1.0 GiB     -",
        "     1  1       1.0 GiB     -",
        "     2  none  512.0 MiB     -",
        "     3  none    2.0 GiB     -",
        "  (no HMAT attributes: memspaces rank bandwidth and latency by NUMA distance)",
        "Memory tiers: none listed (no /sys/devices/virtual/memory_tiering)",
    ]


def test_aml_info_json_has_the_memory_nodes_and_tiers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tiered(tmp_path)
    monkeypatch.setattr(topology, "SYSFS", str(tmp_path))
    monkeypatch.setenv("AML_DISABLE_BACKENDS", "cuda,hip,ze,hsa")
    assert cli.main(["info", "--json"]) == 0
    topo = json.loads(capsys.readouterr().out)["topology"]
    assert topo["hmat"] is True
    assert topo["memory_tiers"] == [{"tier": 4, "nodes": [0, 1, 2, 3], "abstract_distance": [512, 639]}]
    assert topo["nodes"][2] == {
        "node": 2,
        "cpus": [],
        "has_cpu": False,
        "memory": 512 << 20,
        "distances": [[0, 12], [1, 22], [2, 10], [3, 35]],
        "access": [
            {
                "access_class": c,
                "initiators": [0],
                "read_bandwidth": 51200,
                "write_bandwidth": 40960,
                "read_latency": 40,
                "write_latency": 50,
            }
            for c in (0, 1)
        ],
        "tier": 4,
    }
    # the codec reads back what it wrote
    assert codec.memory_topology_from_json(topo) == topology.memory_topology(str(tmp_path))


def test_every_topology_key_is_documented() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "aml-info-json.md").read_text()
    topo = codec.memory_topology_to_json(
        topology.MemoryTopology(
            nodes=(topology.NumaNode(0, access=(Access(0, (0,)),)),), tiers=(MemoryTier(4, (0,)),)
        )
    )
    keys = set(topo) | set(topo["nodes"][0]) | set(topo["nodes"][0]["access"][0])  # type: ignore[index]
    keys |= set(topo["memory_tiers"][0])  # type: ignore[index]
    for key in keys:
        assert f"`{key}`" in doc, key


# -- the user guide's examples ----------------------------------------------------------------
def tiers_guide_examples() -> list[str]:
    """The Python blocks of docs/numa.md's "Memory tiers and asking for memory by what it
    is" section (tests/numa/test_tiers.py runs them in the tiered guest too)."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "numa.md").read_text()
    section = text.split("## Memory tiers and asking for memory by what it is", 1)[1].split("\n## ", 1)[0]
    return [block.split("\n```", 1)[0] for block in section.split("```python\n")[1:]]


def test_the_guides_examples_run_here(capsys: pytest.CaptureFixture[str]) -> None:
    blocks = tiers_guide_examples()
    assert len(blocks) == 5
    for block in blocks:
        exec(compile(block, "docs/numa.md", "exec"), {})
    assert "no HMAT" in capsys.readouterr().out or topology.memory_topology().hmat


# -- "never an error: topology is a report" (issue 32, root cause 9) ----------------------------
#: What the readers read, relative to a fake sysfs root made by _hostile_tree.
_FILES = [
    "devices/system/node/node0/distance",
    "devices/system/node/node1/distance",
    "devices/system/node/node0/cpulist",
    "devices/system/node/node2/cpulist",
    "devices/system/node/node0/meminfo",
    "devices/system/node/node3/meminfo",
    "devices/system/node/has_cpu",
    "devices/system/node/node2/access0/initiators/read_bandwidth",
    "devices/system/node/node2/access0/initiators/write_latency",
    "devices/system/node/node3/access1/initiators/read_latency",
    "devices/virtual/memory_tiering/memory_tier4/nodelist",
    "bus/pci/devices/0000:03:00.0/numa_node",
    "class/kfd/kfd/topology/nodes/1/properties",
    "class/kfd/kfd/topology/nodes/1/io_links/1/properties",
    "proc/thread-self/stat",
]
_BUSES = ("0000:03:00.0", "0000:81:00.0")

#: Numbers no kernel writes: Unicode digits (superscript, circled, Arabic-Indic, full
#: width), and more digits than int() takes from a string (4300, sys.int_info).
_NOT_NUMBERS = st.sampled_from(
    [
        "\u00b2",
        "\u2460",
        "1\u00b2",
        "\u0663",
        "\uff11\uff12",
        "1" * 4301,
        "9" * 5000,
        "-" + "1" * 4400,
        "1e3",
        "0x10",
    ]
)


def _hostile_tree(root: Path) -> None:
    tiered(root)
    a = pci_device(root, "pci0000:00/0000:00:01.0/0000:03:00.0", 0)
    b = pci_device(root, "pci0000:80/0000:80:01.0/0000:81:00.0", 1)
    kfd_gpu(root, 1, a, xgmi_to=[2])
    kfd_gpu(root, 2, b, xgmi_to=[1])
    (root / "proc/thread-self").mkdir(parents=True)
    (root / "proc/thread-self/stat").write_text("1 (x) S " + " ".join(["0"] * 50) + "\n")


def _every_reader(root: str) -> None:
    """Call every reader over ``root``: none may raise (memspace: only AML errors). The
    readers that existed before the fix come first (they raised ValueError here)."""
    topology.numa_distances(root)
    for bus in _BUSES:
        topology.pci_numa_node(bus, root)
    topology.pcie_link(*_BUSES, root)
    topology.xgmi_linked(*_BUSES, root)
    topology.gpu_link(*_BUSES, root)
    topology.numa_nodes(root)
    for node in range(4):
        topology.hmat_access(node, root)
    topology.memory_tiers(root)
    topo = topology.memory_topology(root)
    json.dumps(codec.memory_topology_to_json(topo))
    topology.current_node(root, f"{root}/proc")
    for kind in Memspace:
        for near in (None, 0, 3):
            with contextlib.suppress(AMLError):
                topology.memspace(kind, near, root=root, proc=f"{root}/proc")
    with mock.patch.object(topology, "SYSFS", root):
        data = cli.topology_data()
        cli.render({**_INFO, "topology": data}, width=80)
        cli.render({**_INFO, "topology": data}, width=80, verbose=True)


_INFO: dict[str, object] = {
    "aml_core": "0",
    "python": "3",
    "aml_core_path": "/x",
    "warnings": [],
    "backends": [],
    "chosen": {},
}


@pytest.mark.parametrize("value", ["\u00b2", "\u2460", "1" * 4301, "10 \u00b2 12 30", "location_id \u00b2"])
@pytest.mark.parametrize("where", _FILES)
def test_numbers_no_kernel_writes_are_not_known(tmp_path: Path, where: str, value: str) -> None:
    """Before the fix, numa_distances, pci_numa_node and the KFD readers raised ValueError
    on these (str.isdigit() is true for '²' and '①'; int() refuses 4,301 digits)."""
    _hostile_tree(tmp_path)
    (tmp_path / where).write_text(value + "\n")
    _every_reader(str(tmp_path))


def test_what_a_bad_value_reads_as(tmp_path: Path) -> None:
    _hostile_tree(tmp_path)
    root = str(tmp_path)
    node = tmp_path / "devices/system/node"
    (node / "node1/distance").write_text("21 \u00b2 22 30\n")
    assert sorted(topology.numa_distances(root)) == [0, 2, 3]  # the row is left out
    (node / "node0/meminfo").write_text("Node 0 MemTotal: " + "9" * 5000 + " kB\n")
    (node / "node2/access0/initiators/read_bandwidth").write_text("\u2460\n")
    (node / "node3/cpulist").write_text("0-99999999\n")  # no hundred million CPUs
    (tmp_path / "devices/virtual/memory_tiering/memory_tier4/nodelist").write_text("\u0663\n")
    topo = topology.memory_topology(root)
    assert topo.node(0).memory is None  # type: ignore[union-attr]
    assert topo.node(2).access[0].read_bandwidth is None  # type: ignore[union-attr]
    assert topo.node(2).access[0].write_bandwidth == 40960  # type: ignore[union-attr]
    assert topo.node(3).cpus == ()  # type: ignore[union-attr]
    assert topo.tiers == ()
    (tmp_path / "bus/pci/devices/0000:03:00.0/numa_node").write_text("\u0661\n")  # Arabic-Indic one
    assert topology.pci_numa_node("0000:03:00.0", root) is None  # int() would have read 1


def test_files_that_are_not_files(tmp_path: Path) -> None:
    """A FIFO would block open() and read(); a directory, a dangling link, bytes that are
    not UTF-8 and a file past MAX_FILE are not known either."""
    _hostile_tree(tmp_path)
    node = tmp_path / "devices/system/node"
    (node / "node0/distance").unlink()
    os.mkfifo(node / "node0/distance")
    (node / "node1/distance").unlink()
    (node / "node1/distance").mkdir()
    (node / "node2/meminfo").unlink()
    (node / "node2/meminfo").symlink_to("nowhere")
    (node / "node3/meminfo").write_bytes(b"Node 3 MemTotal: \xff\xfe kB\n")
    (node / "has_cpu").write_text("0," * (topology.MAX_FILE // 2 + 1))
    (node / "node2/access0/initiators/node9999999999999999999999").mkdir()  # an absurd initiator
    (node / "node77777777777777777777777").mkdir()  # an absurd node
    root = str(tmp_path)
    _every_reader(root)
    assert sorted(topology.numa_distances(root)) == [2, 3]
    topo = topology.memory_topology(root)
    assert [n.node for n in topo.nodes] == [0, 1, 2, 3]
    assert [n.memory for n in topo.nodes] == [1 << 30, 1 << 30, None, None]
    assert [n.has_cpu for n in topo.nodes] == [True, True, False, False]  # from the CPU lists
    assert topo.node(2).access[0].initiators == (0,)  # type: ignore[union-attr]


_TEXT = st.one_of(
    _NOT_NUMBERS,
    st.text(max_size=40),
    st.text(alphabet="0123456789-, \n\u00b2\u2460\u0663", max_size=30),
    st.builds(lambda a, b: f"{a} {b}", _NOT_NUMBERS, st.integers(-(2**70), 2**70)),
)


_WRITES = st.lists(
    st.tuples(st.sampled_from(_FILES), st.one_of(_TEXT, st.binary(max_size=40))), min_size=1, max_size=4
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_WRITES)
def test_no_sysfs_value_makes_a_reader_raise(writes: list[tuple[str, str | bytes]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _hostile_tree(root)
        for where, value in writes:
            path = root / where
            if isinstance(value, bytes):
                path.write_bytes(value)
            else:
                path.write_text(value, encoding="utf-8", errors="surrogatepass")
        _every_reader(tmp)


def test_aml_info_json_with_bad_sysfs_values_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 32: ``aml info --json`` exited 1 with a traceback on such values."""
    _hostile_tree(tmp_path)
    for where in _FILES:
        (tmp_path / where).write_text("\u00b2 " + "7" * 4400 + "\n")
    monkeypatch.setattr(topology, "SYSFS", str(tmp_path))
    monkeypatch.setenv("AML_DISABLE_BACKENDS", "cuda,hip,ze,hsa")
    assert cli.main(["info", "--json"]) == 0
    topo = json.loads(capsys.readouterr().out)["topology"]
    assert topo["numa_nodes"] == [2, 3]  # the rows of nodes 0 and 1 are not known
    assert [n["memory"] for n in topo["nodes"]] == [None, 1 << 30, 512 << 20, None]
    assert cli.main(["info"]) == 0
