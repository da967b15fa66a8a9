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
