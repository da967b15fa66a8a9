"""The topology aml-hip's probe reports (``aml info``), on the HIP double's two emulated
devices (PCI bus ids 0000:10:00.0 and 0000:11:00.0, ``hipDeviceAttributePci*``) over a
fake sysfs: each device's NUMA node, and the link between them (the PCIe path, or XGMI
where the amdgpu driver's KFD topology lists one)."""

from __future__ import annotations

from pathlib import Path

import aml_hip
import pytest
from hip_helpers import HipDouble

from aml_core import topology
from tests.support.fake_sysfs import kfd_cpu, kfd_gpu, numa_nodes, pci_device

pytestmark = pytest.mark.host_double


@pytest.fixture
def two(hip: HipDouble, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    hip.need_devices(2)
    numa_nodes(tmp_path, {0: [10, 32], 1: [32, 10]})
    pci_device(tmp_path, "pci0000:00/0000:00:01.0/0000:0f:00.0/0000:10:00.0", 0)
    pci_device(tmp_path, "pci0000:80/0000:80:01.0/0000:11:00.0", 1)
    monkeypatch.setattr(topology, "SYSFS", str(tmp_path))
    return tmp_path


def _details() -> list[dict[str, object]]:
    result = aml_hip.BACKEND.probe()
    assert result.available, result.reason
    return [dict(d.details) for d in result.devices]


def test_each_device_s_bus_id_numa_node_and_pcie_path(two: Path) -> None:
    first, second = _details()
    assert (first["pci_bus_id"], first["numa_node"], first["links"]) == ("0000:10:00.0", 0, {"1": "SYS"})
    assert (second["pci_bus_id"], second["numa_node"], second["links"]) == ("0000:11:00.0", 1, {"0": "SYS"})


def test_xgmi_where_the_kfd_topology_lists_it(two: Path) -> None:
    kfd_cpu(two)
    kfd_gpu(two, 1, "0000:10:00.0", xgmi_to=[2])
    kfd_gpu(two, 2, "0000:11:00.0", xgmi_to=[1])
    first, second = _details()
    assert first["links"] == {"1": "XGMI"}
    assert second["links"] == {"0": "XGMI"}


def test_what_sysfs_does_not_know_is_unknown(
    hip: HipDouble, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hip.need_devices(2)
    monkeypatch.setattr(topology, "SYSFS", str(tmp_path))  # an empty tree
    first, second = _details()
    assert (first["pci_bus_id"], first["numa_node"], first["links"]) == (
        "0000:10:00.0",
        None,
        {"1": "unknown"},
    )
    assert second["links"] == {"0": "unknown"}
