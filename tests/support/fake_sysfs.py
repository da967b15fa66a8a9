"""A fake ``/sys`` for the topology tests (aml_core.topology reads under a root that
tests point here): NUMA nodes with their distances, PCI devices placed in a PCI tree
with their NUMA node, and the amdgpu driver's KFD topology with its XGMI links."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path


def numa_nodes(root: Path, distances: Mapping[int, Sequence[int]]) -> None:
    """``devices/system/node/node<n>/distance`` for each node."""
    for node, row in distances.items():
        d = root / "devices/system/node" / f"node{node}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "distance").write_text(" ".join(map(str, row)) + "\n")


def pci_device(root: Path, path: str, numa_node: int = -1) -> str:
    """A PCI device at ``path`` below ``devices/`` (``"pci0000:00/0000:00:01.0/0000:01:00.0"``:
    the root complex, the bridges, the device), linked from ``bus/pci/devices`` as the
    kernel links it; its bus id (the last part) is returned."""
    where = root / "devices" / path
    where.mkdir(parents=True, exist_ok=True)
    (where / "numa_node").write_text(f"{numa_node}\n")
    bus = path.rsplit("/", 1)[-1]
    links = root / "bus/pci/devices"
    links.mkdir(parents=True, exist_ok=True)
    (links / bus).symlink_to(os.path.relpath(where, links))
    return bus


def kfd_gpu(root: Path, node: int, bus_id: str, xgmi_to: Sequence[int] = ()) -> None:
    """A GPU node of the KFD topology at ``bus_id`` (``"0000:03:00.0"``) with XGMI links
    to the other KFD nodes ``xgmi_to`` (and a PCIe link to node 0, the CPU)."""
    domain, bus, rest = bus_id.split(":")
    slot, function = rest.split(".")
    location = int(bus, 16) << 8 | int(slot, 16) << 3 | int(function)
    d = root / "class/kfd/kfd/topology/nodes" / str(node)
    d.mkdir(parents=True, exist_ok=True)
    (d / "properties").write_text(
        f"cpu_cores_count 0\ngpu_id {1000 + node}\nlocation_id {location}\ndomain {int(domain, 16)}\n"
    )
    links = [(2, 0)] + [(11, peer) for peer in xgmi_to]
    for i, (kind, peer) in enumerate(links):
        link = d / "io_links" / str(i)
        link.mkdir(parents=True)
        (link / "properties").write_text(f"type {kind}\nnode_from {node}\nnode_to {peer}\nweight 15\n")


def kfd_cpu(root: Path, node: int = 0) -> None:
    """The KFD node of a CPU (gpu_id 0)."""
    d = root / "class/kfd/kfd/topology/nodes" / str(node)
    d.mkdir(parents=True, exist_ok=True)
    (d / "properties").write_text("cpu_cores_count 16\ngpu_id 0\nlocation_id 0\ndomain 0\n")


def numa_node(
    root: Path,
    node: int,
    *,
    cpus: str = "",
    memory: int | None = 1 << 30,
    distance: Sequence[int] | None = None,
) -> None:
    """``devices/system/node/node<n>`` with its ``cpulist`` (``""``: CPU-less), its
    ``meminfo`` (``MemTotal`` of ``memory`` bytes; None: no meminfo) and its distance row."""
    d = root / "devices/system/node" / f"node{node}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "cpulist").write_text(cpus + "\n")
    if memory is not None:
        kib = memory // 1024
        (d / "meminfo").write_text(f"Node {node} MemTotal:  {kib} kB\nNode {node} MemFree:  {kib // 2} kB\n")
    if distance is not None:
        (d / "distance").write_text(" ".join(map(str, distance)) + "\n")


def has_cpu(root: Path, nodes: str) -> None:
    """``devices/system/node/has_cpu``: the nodes with CPUs, as a kernel list (``"0-1"``)."""
    d = root / "devices/system/node"
    d.mkdir(parents=True, exist_ok=True)
    (d / "has_cpu").write_text(nodes + "\n")


def hmat(
    root: Path,
    target: int,
    initiators: Sequence[int],
    *,
    access: int = 0,
    read_bandwidth: int | None = None,
    write_bandwidth: int | None = None,
    read_latency: int | None = None,
    write_latency: int | None = None,
) -> None:
    """A target node's ``access<access>/initiators``: a link to each initiator node (as
    the kernel links them, ``../../node<i>``) and the attributes given."""
    d = root / "devices/system/node" / f"node{target}" / f"access{access}" / "initiators"
    d.mkdir(parents=True, exist_ok=True)
    for i in initiators:
        link = d / f"node{i}"
        if not link.is_symlink():
            link.symlink_to(f"../../../node{i}")
    values = {
        "read_bandwidth": read_bandwidth,
        "write_bandwidth": write_bandwidth,
        "read_latency": read_latency,
        "write_latency": write_latency,
    }
    for name, value in values.items():
        if value is not None:
            (d / name).write_text(f"{value}\n")


def memory_tier(root: Path, tier: int, nodelist: str) -> None:
    """``devices/virtual/memory_tiering/memory_tier<tier>/nodelist``."""
    d = root / "devices/virtual/memory_tiering" / f"memory_tier{tier}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "nodelist").write_text(nodelist + "\n")


def tiered(root: Path, *, with_hmat: bool = True, with_tiers: bool = True) -> None:
    """The lab's ``tiered`` machine as sysfs shows it: nodes 0 and 1 with CPUs (1 GiB
    each), node 2 CPU-less and fast (512 MiB: HMAT 51200 MiB/s, 40 ns from node 0), node
    3 CPU-less and far (2 GiB: 6400 MiB/s, 400 ns from node 0 and 1); DRAM 25600 MiB/s,
    80 ns from its own node."""
    rows = {0: [10, 21, 12, 30], 1: [21, 10, 22, 30], 2: [12, 22, 10, 35], 3: [30, 30, 35, 10]}
    cpus = {0: "0", 1: "1", 2: "", 3: ""}
    memory = {0: 1 << 30, 1: 1 << 30, 2: 512 << 20, 3: 2 << 30}
    for node, row in rows.items():
        numa_node(root, node, cpus=cpus[node], memory=memory[node], distance=row)
    has_cpu(root, "0-1")
    if with_hmat:
        perf = {  # target: initiators, read and write MiB/s, read and write ns
            0: ([0], 25600, 25600, 80, 80),
            1: ([1], 25600, 25600, 80, 80),
            2: ([0], 51200, 40960, 40, 50),
            3: ([0, 1], 6400, 3200, 400, 500),
        }
        for target, (initiators, rbw, wbw, rlat, wlat) in perf.items():
            for access in (0, 1):  # the initiators are CPUs: class 1 is class 0
                values = {
                    "read_bandwidth": rbw,
                    "write_bandwidth": wbw,
                    "read_latency": rlat,
                    "write_latency": wlat,
                }
                hmat(root, target, initiators, access=access, **values)
    if with_tiers:
        memory_tier(root, 4, "0-3")
