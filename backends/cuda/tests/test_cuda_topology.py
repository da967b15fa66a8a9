"""The links between NVIDIA GPUs that aml-cuda reports in ``aml info`` (aml_cuda.nvml.link):
on the CPU, NVML's answers faked (NVLinks to a peer, NVSwitch boards, PCIe paths, a
driver that refuses); on the GPU machine (``gpu``), what the probe reports checked
against sysfs and ``nvidia-smi topo -m``, and printed (``pytest -s``) for the record."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from aml_core import cli, topology

pytest.importorskip("cuda.bindings.runtime")

from aml_cuda import nvml  # after the importorskip
from aml_cuda.runtime import CudaRuntime

A, B, C = "00000000:19:00.0", "00000000:3B:00.0", "00000000:4C:00.0"
SWITCH = "00000000:F0:00.0"


class _FakeNvml:
    """cuda.bindings.nvml's topology calls over a made-up board: ``links[bus]`` lists each
    link of a GPU as (active, remote device type, remote bus); a GPU without NVLink has
    None (its first query raises NotSupported); ``ancestors`` is the common ancestor level
    of two GPUs (missing: the driver refuses)."""

    NVLINK_MAX_LINKS = 18

    class NvmlError(Exception):
        pass

    def __init__(
        self,
        links: dict[str, list[tuple[bool, int, str]] | None],
        ancestors: dict[frozenset[str], int],
        no_remote_type: bool = False,
    ) -> None:
        self.links, self.ancestors, self.no_remote_type = links, ancestors, no_remote_type

    def device_get_handle_by_pci_bus_id_v2(self, bus: str) -> str:
        if bus not in self.links:
            raise self.NvmlError("NotFound")
        return bus

    def _link(self, handle: str, index: int) -> tuple[bool, int, str]:
        links = self.links[handle]
        if links is None:
            raise self.NvmlError("NotSupported")
        if index >= len(links):
            raise self.NvmlError("InvalidArgument")
        return links[index]

    def device_get_nvlink_state(self, handle: str, index: int) -> int:
        return int(self._link(handle, index)[0])

    def device_get_nvlink_remote_device_type(self, handle: str, index: int) -> int:
        if self.no_remote_type:
            raise self.NvmlError("FunctionNotFound")
        return self._link(handle, index)[1]

    def device_get_nvlink_remote_pci_info_v2(self, handle: str, index: int) -> Any:
        return type("PciInfo", (), {"bus_id": self._link(handle, index)[2]})()

    def device_get_topology_common_ancestor(self, one: str, other: str) -> int:
        try:
            return self.ancestors[frozenset((one, other))]
        except KeyError:
            raise self.NvmlError("NotSupported") from None


GPU, SWITCH_TYPE = 0, 2


def _use(monkeypatch: pytest.MonkeyPatch, fake: _FakeNvml) -> None:
    monkeypatch.setattr(nvml, "_nvml", fake)


def test_nvlinks_between_two_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    a_links = [(True, GPU, B)] * 4 + [(False, GPU, B)] * 2 + [(True, GPU, C)] * 2
    b_links = [(True, GPU, A)] * 4 + [(False, GPU, A)] * 2
    fake = _FakeNvml({A: a_links, B: b_links, C: None}, {frozenset((A, C)): 50, frozenset((B, C)): 20})
    _use(monkeypatch, fake)
    assert nvml.link(A, B) == nvml.link(B, A) == "NV4"  # inactive links do not count
    assert nvml.link(A, C) == "NV2"  # A's links to C, although C itself refuses NVLink queries
    assert nvml.link(B, C) == "PXB"  # no NVLink: the PCIe path


def test_nvlinks_through_nvswitches(monkeypatch: pytest.MonkeyPatch) -> None:
    """An HGX board: every GPU's 18 links go to NVSwitches; nvidia-smi shows NV18."""
    board = {bus: [(True, SWITCH_TYPE, SWITCH)] * 18 for bus in (A, B)}
    _use(monkeypatch, _FakeNvml({**board, C: [(True, SWITCH_TYPE, SWITCH)] * 12}, {}))
    assert nvml.link(A, B) == "NV18"
    assert nvml.link(A, C) == nvml.link(C, A) == "NV12"  # the fewer switch links


def test_an_older_driver_without_the_remote_type(monkeypatch: pytest.MonkeyPatch) -> None:
    links = {A: [(True, GPU, B)] * 2, B: [(True, GPU, A)] * 2}
    _use(monkeypatch, _FakeNvml(links, {}, no_remote_type=True))
    assert nvml.link(A, B) == "NV2"


@pytest.mark.parametrize(
    ("level", "name"),
    [(10, "PIX"), (20, "PXB"), (30, "PHB"), (40, "NODE"), (50, "SYS"), (0, None), (99, None)],
)
def test_pcie_paths(monkeypatch: pytest.MonkeyPatch, level: int, name: str | None) -> None:
    _use(monkeypatch, _FakeNvml({A: None, B: None}, {frozenset((A, B)): level}))
    assert nvml.link(A, B) == name


def test_what_nvml_cannot_say_is_not_known(monkeypatch: pytest.MonkeyPatch) -> None:
    _use(monkeypatch, _FakeNvml({A: None, B: None}, {}))
    assert nvml.link(A, B) is None  # common ancestor refused
    assert nvml.link(A, "00000000:99:00.0") is None  # NVML does not know the device


def test_the_runtime_falls_back_to_sysfs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tests.support.fake_sysfs import pci_device

    a = pci_device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:19:00.0", 0)
    b = pci_device(tmp_path, "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:3b:00.0", 0)
    monkeypatch.setattr(topology, "SYSFS", str(tmp_path))
    runtime = CudaRuntime.__new__(CudaRuntime)  # _link needs no loaded driver
    _use(monkeypatch, _FakeNvml({a: None, b: None}, {}))
    assert runtime._link(a, b) == "PIX"  # NVML refused: sysfs's PCI tree
    _use(monkeypatch, _FakeNvml({a: [(True, GPU, b)] * 6, b: [(True, GPU, a)] * 6}, {}))
    assert runtime._link(a, b) == "NV6"  # NVML first


# -- on the GPU machine -----------------------------------------------------------------------
_LINK = re.compile(r"NV\d+|PIX|PXB|PHB|NODE|SYS|unknown")


def _run(*args: str) -> str:
    return subprocess.run(args, check=False, capture_output=True, text=True, timeout=60).stdout


def _nvidia_smi() -> tuple[dict[str, dict[str, str]], dict[str, str]] | None:
    """``nvidia-smi topo -m`` by bus id: the links between GPUs and each GPU's NUMA
    affinity; None without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    bus = {}
    for line in _run(smi, "--query-gpu=index,pci.bus_id", "--format=csv,noheader").splitlines():
        index, _, bus_id = line.partition(",")
        bus[f"GPU{index.strip()}"] = topology.normalize_bus_id(bus_id.strip())
    # nvidia-smi underlines its header with terminal escapes ("\x1b[4mGPU0"): drop them.
    text = re.sub(r"\x1b\[[0-9;]*m", "", _run(smi, "topo", "-m"))
    lines = [ln for ln in text.splitlines() if ln.strip()]
    print("nvidia-smi topo -m:\n" + "\n".join(lines))
    cols = [c.strip() for c in lines[0].split("\t")]
    links: dict[str, dict[str, str]] = {}
    numa: dict[str, str] = {}
    for line in lines[1:]:
        cells = dict(zip(cols, (c.strip() for c in line.split("\t")), strict=False))
        name = line.split("\t")[0].strip()
        if bus.get(name) is None:
            continue
        links[str(bus[name])] = {str(bus[c]): v for c, v in cells.items() if c in bus and c != name}
        numa[str(bus[name])] = cells.get("NUMA Affinity", "")
    return links, numa


@pytest.mark.gpu
def test_the_probe_reports_the_gpus_topology() -> None:
    import aml_cuda

    result = aml_cuda.probe()
    assert result.available, result.reason
    data = {"backends": [], "topology": cli.topology_data()}
    print()
    for dev in result.devices:
        d = dict(dev.details)
        print(f"{dev.index}: {dev.name}: {cli._topology_line(d)}")
        bus = d["pci_bus_id"]
        assert isinstance(bus, str)
        assert topology.normalize_bus_id(bus) == bus
        assert d["numa_node"] == topology.pci_numa_node(bus)  # sysfs's answer, None for -1
        links = d["links"]
        assert isinstance(links, dict)
        assert sorted(links) == sorted(str(o.index) for o in result.devices if o.index != dev.index)
        for peer, link in links.items():
            assert _LINK.fullmatch(link), link
            assert dict(result.devices[int(peer)].details)["links"][str(dev.index)] == link  # symmetric
    print("\n".join(cli._distance_lines(data)) or "one NUMA node")
    smi = _nvidia_smi()
    if smi is None:
        return
    links_smi, numa_smi = smi
    for dev in result.devices:
        d = dict(dev.details)
        bus = str(d["pci_bus_id"])
        ours = {str(dict(result.devices[int(p)].details)["pci_bus_id"]): v for p, v in d["links"].items()}
        assert ours == links_smi[bus], (bus, ours, links_smi[bus])
        if numa_smi[bus].isdigit():
            assert d["numa_node"] == int(numa_smi[bus])
