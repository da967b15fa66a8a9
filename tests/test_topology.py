"""aml_core.topology over fake sysfs trees: NUMA distances, a PCI device's NUMA node, the
PCIe path and XGMI link between two GPUs, and bus ids in every form drivers write them;
and the topology in ``aml info`` (text and JSON), and in a GPU runtime's devices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aml_core import cli, topology
from aml_core.specs import DeviceInfo

from .support.fake_sysfs import kfd_cpu, kfd_gpu, numa_nodes, pci_device

#: Two sockets: a switch with two GPUs under root port 01.0 of socket 0, a GPU under
#: another switch of the same root port, one under a second root complex of socket 0,
#: one under socket 1's.
TREE = {
    "a": ("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0", 0),
    "b": ("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:04:00.0", 0),
    "c": ("pci0000:00/0000:00:01.0/0000:05:00.0/0000:06:08.0/0000:07:00.0", 0),
    "d": ("pci0000:00/0000:00:02.0/0000:08:00.0", 0),
    "e": ("pci0000:40/0000:40:01.0/0000:41:00.0", 0),
    "f": ("pci0000:80/0000:80:01.0/0000:81:00.0", 1),
}


@pytest.fixture
def sysfs(tmp_path: Path) -> dict[str, str]:
    numa_nodes(tmp_path, {0: [10, 21], 1: [21, 10]})
    return {name: pci_device(tmp_path, path, node) for name, (path, node) in TREE.items()}


@pytest.mark.parametrize(
    ("written", "normal"),
    [
        ("0000:19:00.0", "0000:19:00.0"),
        ("00000000:19:00.0", "0000:19:00.0"),  # NVML
        ("0000:03:00", "0000:03:00.0"),  # HIP: no function
        ("19:00.1", "0000:19:00.1"),
        ("0001:AB:1f.7", "0001:ab:1f.7"),
        (" 0000:19:00.0\n", "0000:19:00.0"),
    ],
)
def test_bus_ids_in_the_forms_drivers_write(written: str, normal: str) -> None:
    assert topology.normalize_bus_id(written) == normal


@pytest.mark.parametrize("bad", ["?", "", "0000:19:20.0", "0000:19:00.8", "19", None, 25, b"0000:19:00.0"])
def test_what_is_not_a_bus_id(bad: object) -> None:
    assert topology.normalize_bus_id(bad) is None


def test_numa_distances(tmp_path: Path) -> None:
    assert topology.numa_distances(str(tmp_path)) == {}
    numa_nodes(tmp_path, {0: [10, 21], 1: [21, 10]})
    assert topology.numa_distances(str(tmp_path)) == {0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}}
    numa_nodes(tmp_path, {1: [21, "x"]})  # an unreadable row is left out
    assert topology.numa_distances(str(tmp_path)) == {0: {0: 10, 1: 21}}


def test_the_numa_node_of_a_pci_device(sysfs: dict[str, str], tmp_path: Path) -> None:
    root = str(tmp_path)
    assert topology.pci_numa_node(sysfs["a"], root) == 0
    assert topology.pci_numa_node(sysfs["f"].upper(), root) == 1
    assert topology.pci_numa_node("0000:99:00.0", root) is None  # not in sysfs
    assert topology.pci_numa_node("?", root) is None
    pci_device(tmp_path, "pci0000:c0/0000:c0:01.0/0000:c1:00.0", -1)
    assert topology.pci_numa_node("0000:c1:00.0", root) is None  # the firmware says none


def test_a_device_without_a_node_on_a_one_node_machine(tmp_path: Path) -> None:
    """-1 (a virtual machine's firmware) on a machine of one node is that node, as
    nvidia-smi's NUMA affinity says (seen on the H200 machine)."""
    numa_nodes(tmp_path, {0: [10]})
    bus = pci_device(tmp_path, "pci0000:00/0000:00:06.0", -1)
    assert topology.pci_numa_node(bus, str(tmp_path)) == 0


@pytest.mark.parametrize(
    ("x", "y", "link"),
    [
        ("a", "b", "PIX"),  # one switch
        ("a", "c", "PXB"),  # two switches below one root port
        ("a", "d", "PHB"),  # two root ports of one root complex
        ("a", "e", "NODE"),  # two root complexes of one NUMA node
        ("a", "f", "SYS"),  # across NUMA nodes
        ("f", "a", "SYS"),
    ],
)
def test_the_pcie_path_between_two_devices(
    sysfs: dict[str, str], tmp_path: Path, x: str, y: str, link: str
) -> None:
    assert topology.pcie_link(sysfs[x], sysfs[y], str(tmp_path)) == link
    assert topology.gpu_link(sysfs[x], sysfs[y], str(tmp_path)) == link


def test_a_pcie_path_sysfs_cannot_tell(sysfs: dict[str, str], tmp_path: Path) -> None:
    root = str(tmp_path)
    assert topology.pcie_link(sysfs["a"], "0000:99:00.0", root) is None
    assert topology.pcie_link(sysfs["a"], "?", root) is None
    pci_device(tmp_path, "pci0000:c0/0000:c0:01.0/0000:c1:00.0", -1)  # no NUMA node
    assert topology.pcie_link(sysfs["a"], "0000:c1:00.0", root) is None


def test_xgmi_from_the_kfd_topology(sysfs: dict[str, str], tmp_path: Path) -> None:
    root = str(tmp_path)
    kfd_cpu(tmp_path)
    kfd_gpu(tmp_path, 1, sysfs["a"], xgmi_to=[2])
    kfd_gpu(tmp_path, 2, sysfs["f"], xgmi_to=[1])
    kfd_gpu(tmp_path, 3, sysfs["b"])
    assert topology.xgmi_linked(sysfs["a"], sysfs["f"], root) is True
    assert topology.gpu_link(sysfs["a"], sysfs["f"], root) == "XGMI"
    assert topology.gpu_link(sysfs["f"], sysfs["a"], root) == "XGMI"
    assert topology.xgmi_linked(sysfs["a"], sysfs["b"], root) is False
    assert topology.gpu_link(sysfs["a"], sysfs["b"], root) == "PIX"  # PCIe only
    assert topology.xgmi_linked(sysfs["a"], sysfs["c"], root) is None  # not a KFD GPU


def test_the_sysfs_root_is_one_setting(
    sysfs: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(topology, "SYSFS", str(tmp_path))
    assert topology.pcie_link(sysfs["a"], sysfs["b"]) == "PIX"
    assert topology.numa_distances() == {0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}}


def test_every_link_name_is_documented() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "aml-info-json.md").read_text()
    for name in topology.LINKS:
        assert f"`{name}`" in doc, name


# -- a GPU runtime's devices ------------------------------------------------------------------
class _Runtime:
    """Runtime.device_topology over a fake runtime: only its _link is this test's."""

    from aml_core.gpu.runtime import Runtime

    device_topology = Runtime.device_topology
    _link_or_unknown = Runtime._link_or_unknown
    _link = Runtime._link


def test_a_runtime_adds_the_topology_to_its_devices(
    sysfs: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(topology, "SYSFS", str(tmp_path))
    devices = [
        DeviceInfo(index=0, name="g0", details={"pci_bus_id": sysfs["a"].upper()}),
        DeviceInfo(index=1, name="g1", details={"pci_bus_id": sysfs["f"]}),
        DeviceInfo(index=2, name="g2", details={"pci_bus_id": "?"}),
        DeviceInfo(index=3, name="g3"),
    ]
    found = _Runtime().device_topology(devices)  # type: ignore[arg-type]
    assert [dict(d.details) for d in found] == [
        {"pci_bus_id": sysfs["a"], "numa_node": 0, "links": {"1": "SYS", "2": "unknown", "3": "unknown"}},
        {"pci_bus_id": sysfs["f"], "numa_node": 1, "links": {"0": "SYS", "2": "unknown", "3": "unknown"}},
        {"pci_bus_id": None, "numa_node": None, "links": {"0": "unknown", "1": "unknown", "3": "unknown"}},
        {"pci_bus_id": None, "numa_node": None, "links": {"0": "unknown", "1": "unknown", "2": "unknown"}},
    ]


def test_a_link_query_that_fails_is_unknown(sysfs: dict[str, str]) -> None:
    class Failing(_Runtime):
        def _link(self, bus: str, peer: str) -> str | None:
            raise RuntimeError("driver refused")

    devices = [DeviceInfo(index=i, name="g", details={"pci_bus_id": sysfs[x]}) for i, x in enumerate("ab")]
    found = Failing().device_topology(devices)  # type: ignore[arg-type]
    assert found[0].details["links"] == {"1": "unknown"}


# -- aml info -----------------------------------------------------------------------------
def _gpu(index: int, links: dict[str, str], bus: str | None, node: int | None) -> dict[str, object]:
    details = {"compute_capability": "9.0", "pci_bus_id": bus, "numa_node": node, "links": links}
    return {
        "index": index,
        "name": "NVIDIA H100 80GB HBM3",
        "total_memory": 80 << 30,
        "free_memory": 79 << 30,
        "capabilities": [],
        "details": details,
    }


def _data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    monkeypatch.setattr(topology, "SYSFS", str(tmp_path))
    backend = {
        "name": "cuda",
        "distribution": "aml-cuda",
        "version": "1",
        "priority": 100,
        "state": "available",
        "available": True,
        "detail": "2 device(s)",
        "reason": None,
        "versions": {"driver": "580"},
        "capabilities": ["ipc"],
        "devices": [
            _gpu(0, {"1": "NV18"}, "0000:19:00.0", 0),
            _gpu(1, {"0": "NV18"}, None, None),
        ],
    }
    return {
        "aml_core": "0",
        "python": "3.11",
        "aml_core_path": "/x",
        "warnings": [],
        "backends": [backend],
        "chosen": {"device": {"backend": "cuda", "rejected": []}},
        "topology": cli.topology_data(),
    }


def test_aml_info_shows_the_topology(
    sysfs: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = cli.render(_data(tmp_path, monkeypatch), width=100)
    lines = text.splitlines()
    first = lines.index("  0: NVIDIA H100 80GB HBM3, 80.0 GiB, 79.0 GiB free")
    assert lines[first + 1] == "     PCI 0000:19:00.0, NUMA node 0, links: 1 NV18"
    assert lines[first + 3] == "     PCI unknown, NUMA node unknown, links: 0 NV18"
    table = lines.index("NUMA distances:")
    assert lines[table + 1 : table + 4] == ["  node   0   1", "     0  10  21", "     1  21  10"]
    verbose = cli.render(_data(tmp_path, monkeypatch), width=100, verbose=True)
    assert "compute_capability 9.0" in verbose
    assert "links {" not in verbose  # the topology line says it, not the details


def test_one_numa_node_has_no_distance_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    numa_nodes(tmp_path, {0: [10]})
    data = _data(tmp_path, monkeypatch)
    topo = data["topology"]
    assert isinstance(topo, dict)
    assert (topo["numa_nodes"], topo["numa_distances"]) == ([0], [[10]])
    text = cli.render(data)
    assert "NUMA distances" not in text
    assert "Memory nodes" not in text  # one node, no HMAT: the host backend's device says it


def test_aml_info_json_has_the_topology(
    sysfs: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(topology, "SYSFS", str(tmp_path))
    monkeypatch.setenv("AML_DISABLE_BACKENDS", "cuda,hip,ze,hsa")
    assert cli.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    topo = data["topology"]
    assert (topo["numa_nodes"], topo["numa_distances"]) == ([0, 1], [[10, 21], [21, 10]])
    for backend in data["backends"]:
        for device in backend["devices"]:
            if backend["name"] == "host":  # a NUMA node has no PCI place
                assert "links" not in device["details"]
