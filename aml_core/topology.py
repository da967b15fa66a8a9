"""The node's topology as Linux's sysfs tells it: the distances between NUMA nodes, the
NUMA node of a PCI device, and the link between two GPUs (the PCIe path between them,
or AMD's XGMI as the amdgpu driver's KFD topology lists it).

Every read goes under :data:`SYSFS` (``/sys``); each function also takes ``root``, a
directory laid out as ``/sys`` is (tests give a fake tree). A file that is missing or
unreadable is "not known" (None or an empty answer), never an error: topology is a
report.

Links use the vocabulary of ``nvidia-smi topo -m``, so that one legend serves every
vendor (:data:`LINKS`): ``NV<n>`` (n NVLinks, from NVML: :mod:`aml_cuda.nvml`), ``XGMI``,
``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``; ``unknown`` when nothing can tell.
"""

from __future__ import annotations

import os
import re

__all__ = [
    "LINKS",
    "SYSFS",
    "gpu_link",
    "normalize_bus_id",
    "numa_distances",
    "pci_numa_node",
    "pcie_link",
    "xgmi_linked",
]

#: The sysfs root every function reads under unless given another ``root``.
SYSFS = "/sys"

#: What each link name means (docs/aml-info-json.md repeats it).
LINKS: dict[str, str] = {
    "NV<n>": "n NVLinks, directly or through NVSwitches (NVML)",
    "XGMI": "AMD Infinity Fabric (XGMI), as the amdgpu driver reports it",
    "PIX": "PCIe through at most one PCIe switch",
    "PXB": "PCIe through several PCIe switches, no host bridge",
    "PHB": "PCIe through a host bridge (the CPU's PCIe root complex)",
    "NODE": "PCIe through the interconnect between host bridges within one NUMA node",
    "SYS": "PCIe and the interconnect between NUMA nodes (QPI/UPI, Infinity Fabric)",
    "unknown": "the backend cannot tell",
}

_BUS = re.compile(r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?")
#: KFD's io_link type of XGMI (CRAT_IOLINK_TYPE_XGMI in the kernel's kfd_crat.h).
_KFD_XGMI = 11
_KFD_NODES = "class/kfd/kfd/topology/nodes"


def _root(root: str | None) -> str:
    return SYSFS if root is None else root


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def normalize_bus_id(bus_id: object) -> str | None:
    """A PCI address as sysfs names it, ``"0000:19:00.0"`` (4-digit domain, lower case,
    with the function), from the forms drivers write (``"00000000:19:00.0"`` from NVML,
    ``"0000:03:00"`` without the function from HIP, ``"19:00.0"`` without the domain);
    None for anything else. A domain wider than 16 bits (NVML pads it to 8 digits) is kept
    when its upper digits are not zero."""
    if not isinstance(bus_id, str):
        return None
    m = _BUS.fullmatch(bus_id.strip())
    if m is None:
        return None
    domain, bus, slot, function = m.groups()
    if int(slot, 16) > 0x1F:
        return None
    d = int(domain or "0", 16)
    return f"{d:04x}:{int(bus, 16):02x}:{int(slot, 16):02x}.{int(function or '0')}"


def numa_distances(root: str | None = None) -> dict[int, dict[int, int]]:
    """The NUMA distance table (``/sys/devices/system/node/node*/distance``): for each
    node, its distance to each node (10: local). Empty when sysfs has no NUMA nodes."""
    base = f"{_root(root)}/devices/system/node"
    try:
        names = os.listdir(base)
    except OSError:
        return {}
    nodes = sorted(int(n[4:]) for n in names if re.fullmatch(r"node\d+", n))
    table: dict[int, dict[int, int]] = {}
    for node in nodes:
        row = (_read(f"{base}/node{node}/distance") or "").split()
        # The kernel prints one distance per online node, in node order.
        if len(row) == len(nodes) and all(x.isdigit() for x in row):
            table[node] = {other: int(x) for other, x in zip(nodes, row, strict=True)}
    return table


def pci_numa_node(bus_id: object, root: str | None = None) -> int | None:
    """The NUMA node of a PCI device (``/sys/bus/pci/devices/<bus id>/numa_node``); None
    when sysfs does not know the device. A device whose firmware names no node (-1, as in
    many virtual machines) is on the only node when the machine has one (what
    ``nvidia-smi topo -m`` reports), else None."""
    bus = normalize_bus_id(bus_id)
    if bus is None:
        return None
    text = _read(f"{_root(root)}/bus/pci/devices/{bus}/numa_node")
    if text is None or not re.fullmatch(r"-?\d+", text):
        return None
    if int(text) < 0:
        nodes = list(numa_distances(root))
        return nodes[0] if len(nodes) == 1 else None
    return int(text)


def _pci_path(bus: str, root: str) -> list[str] | None:
    """The device's place in the PCI tree: the sysfs directories from its root complex
    (``pci0000:00``) down to the device, from the ``/sys/bus/pci/devices`` link."""
    link = f"{root}/bus/pci/devices/{bus}"
    if not os.path.exists(link):
        return None
    parts = os.path.realpath(link).split(os.sep)
    for i, part in enumerate(parts):
        if re.fullmatch(r"pci[0-9a-f]{4,8}:[0-9a-f]{2}", part):
            return parts[i:]
    return None


def pcie_link(bus_a: object, bus_b: object, root: str | None = None) -> str | None:
    """The PCIe path between two devices, named as ``nvidia-smi topo -m`` names it
    (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``); None when sysfs does not place both."""
    a, b = normalize_bus_id(bus_a), normalize_bus_id(bus_b)
    if a is None or b is None:
        return None
    path_a, path_b = _pci_path(a, _root(root)), _pci_path(b, _root(root))
    if path_a is None or path_b is None:
        return None
    if path_a[0] != path_b[0]:  # different root complexes
        node_a, node_b = pci_numa_node(a, root), pci_numa_node(b, root)
        if node_a is None or node_b is None:
            return None
        return "NODE" if node_a == node_b else "SYS"
    shared = 0
    for x, y in zip(path_a[1:], path_b[1:], strict=False):
        if x != y:
            break
        shared += 1
    if shared == 0:  # they meet at the root complex
        return "PHB"
    # Below the deepest shared bridge: a switch's downstream port and the device on
    # each side is one switch (PIX); more levels mean more switches (PXB).
    below = max(len(path_a), len(path_b)) - 1 - shared
    return "PIX" if below <= 2 else "PXB"


def _kfd_gpus(root: str) -> dict[str, str]:
    """KFD topology node → PCI bus id of each GPU node (``location_id`` is bus << 8 | devfn)."""
    base = f"{root}/{_KFD_NODES}"
    try:
        names = os.listdir(base)
    except OSError:
        return {}
    found: dict[str, str] = {}
    for name in names:
        props = _properties(f"{base}/{name}/properties")
        if props.get("gpu_id", 0) and "location_id" in props:
            loc, domain = props["location_id"], props.get("domain", 0)
            found[name] = f"{domain:04x}:{loc >> 8:02x}:{(loc >> 3) & 0x1F:02x}.{loc & 7}"
    return found


def _properties(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (_read(path) or "").splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[key] = int(value)
    return out


def xgmi_linked(bus_a: object, bus_b: object, root: str | None = None) -> bool | None:
    """Whether the amdgpu driver lists an XGMI link between two GPUs (KFD topology's
    ``io_links``); None when KFD does not list both."""
    a, b = normalize_bus_id(bus_a), normalize_bus_id(bus_b)
    gpus = {bus: node for node, bus in _kfd_gpus(_root(root)).items()}
    if a not in gpus or b not in gpus:
        return None
    links = f"{_root(root)}/{_KFD_NODES}/{gpus[a]}/io_links"
    try:
        names = os.listdir(links)
    except OSError:
        return False
    for name in names:
        props = _properties(f"{links}/{name}/properties")
        if props.get("type") == _KFD_XGMI and str(props.get("node_to")) == gpus[b]:
            return True
    return False


def gpu_link(bus_a: object, bus_b: object, root: str | None = None) -> str | None:
    """What sysfs tells of the link between two GPUs: ``XGMI`` when the amdgpu driver
    lists one, else their PCIe path (:func:`pcie_link`); None when sysfs cannot tell."""
    if xgmi_linked(bus_a, bus_b, root):
        return "XGMI"
    return pcie_link(bus_a, bus_b, root)
