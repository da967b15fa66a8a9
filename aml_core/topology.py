"""The node's topology as Linux's sysfs tells it: the distances between NUMA nodes, the
NUMA node of a PCI device, the link between two GPUs (the PCIe path between them, or
AMD's XGMI as the amdgpu driver's KFD topology lists it), and the machine's memory as
what it is: each node's CPUs and memory, its HMAT access attributes (bandwidth and
latency from its initiators), and the kernel's memory tiers (:func:`memory_topology`).

Every read goes under :data:`SYSFS` (``/sys``); each function also takes ``root``, a
directory laid out as ``/sys`` is (tests give a fake tree). A file that is missing,
unreadable, not a regular file, longer than :data:`MAX_FILE` bytes or not what the
kernel writes (a number in ASCII digits of at most :data:`MAX_DIGITS`; Unicode digits
such as ``"\u00b2"`` are not numbers here) is "not known" (None or an empty answer),
never an error: topology is a report. The one function that can raise is
:func:`memspace`, a request: it answers which nodes to allocate on, or says with a typed
AML error why the machine cannot tell.

Links use the vocabulary of ``nvidia-smi topo -m``, so that one legend serves every
vendor (:data:`LINKS`): ``NV<n>`` (n NVLinks, from NVML: :mod:`aml_cuda.nvml`), ``XGMI``,
``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``; ``unknown`` when nothing can tell.
"""

from __future__ import annotations

import enum
import os
import re
import stat
from collections.abc import Iterable

import attrs

from . import checks
from .errors import AMLDomainError, AMLNotSupported, AMLTypeError, AMLValueError

__all__ = [
    "ACCESS_CLASSES",
    "LINKS",
    "MAX_DIGITS",
    "MAX_FILE",
    "MEMTIER_CHUNK_BITS",
    "SYSFS",
    "Access",
    "MemoryTier",
    "MemoryTopology",
    "Memspace",
    "MemspaceNodes",
    "NumaNode",
    "current_node",
    "gpu_link",
    "hmat_access",
    "memory_tiers",
    "memory_topology",
    "memspace",
    "normalize_bus_id",
    "numa_distances",
    "numa_nodes",
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


#: The most bytes read from one sysfs file (a sysfs attribute is at most a page, 4 KiB on
#: x86-64; KFD's ``properties`` are sysfs files too). A longer file is "not known".
MAX_FILE = 64 << 10
#: The most digits of a number read from sysfs (2**64 has 20). A longer one is "not known".
MAX_DIGITS = 20
_INT = re.compile(rf"-?[0-9]{{1,{MAX_DIGITS}}}", re.ASCII)
_NAT = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}", re.ASCII)
#: The largest node or CPU number a list may name (the kernel's NR_CPUS is at most 8192,
#: MAX_NUMNODES 1024), so that a list such as ``"0-99999999"`` is "not known", not a
#: hundred million ints.
_MAX_ID = 1 << 16


def _read(path: str) -> str | None:
    """The text of a sysfs file, stripped; None when it is missing, unreadable, not a
    regular file (a FIFO would block, a device could be anything), longer than
    :data:`MAX_FILE` or not UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = b""
        while len(data) <= MAX_FILE:
            chunk = os.read(fd, MAX_FILE + 1 - len(data))
            if not chunk:
                break
            data += chunk
        if len(data) > MAX_FILE:
            return None
        return data.decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def _int(text: str | None, *, signed: bool = False) -> int | None:
    """``text`` as an int when it is one in ASCII digits (at most :data:`MAX_DIGITS`, a
    ``-`` when ``signed``); None otherwise."""
    if text is None or not (_INT if signed else _NAT).fullmatch(text):
        return None
    return int(text)


def _id_list(text: str | None) -> tuple[int, ...] | None:
    """A kernel list (``"0-3,8-11"``, ``%*pbl``) as sorted ids; ``()`` for an empty one;
    None when it is not such a list or names an id past :data:`_MAX_ID`."""
    if text is None:
        return None
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        lo_text, dash, hi_text = part.partition("-")
        lo, hi = _int(lo_text), _int(hi_text) if dash else _int(lo_text)
        if lo is None or hi is None or not lo <= hi < _MAX_ID:
            return None
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


def _node_names(base: str) -> list[int]:
    """The node numbers of the ``node<N>`` entries of a directory, sorted."""
    try:
        names = os.listdir(base)
    except (OSError, ValueError):
        return []
    nodes = []
    for name in names:
        if name.startswith("node"):
            n = _int(name[4:])
            if n is not None and n < _MAX_ID and name == f"node{n}":
                nodes.append(n)
    return sorted(nodes)


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
    nodes = _node_names(base)
    table: dict[int, dict[int, int]] = {}
    for node in nodes:
        row = [_int(x) for x in (_read(f"{base}/node{node}/distance") or "").split()]
        # The kernel prints one distance per online node, in node order.
        if len(row) == len(nodes) and all(x is not None for x in row):
            table[node] = {other: x for other, x in zip(nodes, row, strict=True) if x is not None}
    return table


def pci_numa_node(bus_id: object, root: str | None = None) -> int | None:
    """The NUMA node of a PCI device (``/sys/bus/pci/devices/<bus id>/numa_node``); None
    when sysfs does not know the device. A device whose firmware names no node (-1, as in
    many virtual machines) is on the only node when the machine has one (what
    ``nvidia-smi topo -m`` reports), else None."""
    bus = normalize_bus_id(bus_id)
    if bus is None:
        return None
    node = _int(_read(f"{_root(root)}/bus/pci/devices/{bus}/numa_node"), signed=True)
    if node is None:
        return None
    if node < 0:
        nodes = list(numa_distances(root))
        return nodes[0] if len(nodes) == 1 else None
    return node


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
    except (OSError, ValueError):
        return {}
    found: dict[str, str] = {}
    for name in names:
        props = _properties(f"{base}/{name}/properties")
        loc, domain = props.get("location_id", -1), props.get("domain", 0)
        if props.get("gpu_id", 0) and 0 <= loc <= 0xFFFF and 0 <= domain <= 0xFFFFFFFF:
            found[name] = f"{domain:04x}:{loc >> 8:02x}:{(loc >> 3) & 0x1F:02x}.{loc & 7}"
    return found


def _properties(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in (_read(path) or "").splitlines():
        key, _, value = line.partition(" ")
        number = _int(value.strip(), signed=True)
        if number is not None:
            out[key] = number
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
    except (OSError, ValueError):
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


# -- memory as what it is: nodes, HMAT access attributes, memory tiers --------------------------
_NODES = "devices/system/node"
_TIERING = "devices/virtual/memory_tiering"
#: The abstract-distance span of one memory tier: ``memory_tier<N>`` holds the memory
#: types of abstract distance ``N << 7`` to ``(N << 7) + 127`` (MEMTIER_CHUNK_BITS, 7, in
#: the kernel's include/linux/memory-tiers.h; DRAM is 576, ``memory_tier4``).
MEMTIER_CHUNK_BITS = 7
#: The access classes sysfs lists under ``node<N>/access<C>``: 0, the target's best
#: initiators of any kind; 1, its best CPU initiators (ACCESS_COORDINATE_LOCAL and
#: ACCESS_COORDINATE_CPU in the kernel's include/linux/node.h).
ACCESS_CLASSES = (0, 1)


@attrs.frozen
class Access:
    """A memory node's HMAT access attributes for one access class, as the kernel lists
    them under ``/sys/devices/system/node/node<N>/access<C>/initiators/``: the initiator
    nodes they hold for (its best initiators, whose accesses perform alike), and the
    read and write bandwidth (MiB/s) and latency (ns) from them; None for an attribute
    the firmware did not give."""

    access_class: int
    initiators: tuple[int, ...]
    read_bandwidth: int | None = None
    write_bandwidth: int | None = None
    read_latency: int | None = None
    write_latency: int | None = None


@attrs.frozen
class NumaNode:
    """A NUMA node as sysfs describes it.

    ``cpus``: its CPUs (``cpulist``; ``()`` for a CPU-less node: CXL- or HBM-like
    memory, a GPU's memory); ``has_cpu``: whether the kernel lists it in
    ``/sys/devices/system/node/has_cpu`` (from the CPU list when that file is absent);
    ``memory``: its ``MemTotal`` in bytes (None if unknown); ``distances``: its row of
    the distance table as ``(node, distance)`` pairs (``()`` if unknown); ``access``:
    its HMAT access attributes, one :class:`Access` per class the kernel lists (``()``
    without HMAT); ``tier``: the ``N`` of the ``memory_tier<N>`` that holds it (None
    without ``memory_tiering``, or for a node with no memory)."""

    node: int
    cpus: tuple[int, ...] = ()
    has_cpu: bool = False
    memory: int | None = None
    distances: tuple[tuple[int, int], ...] = ()
    access: tuple[Access, ...] = ()
    tier: int | None = None

    def distance(self, other: int) -> int | None:
        """The distance from this node to ``other`` (10: itself), None if unknown."""
        return dict(self.distances).get(other)

    def access_from(self, initiator: int) -> Access | None:
        """The access attributes that hold for ``initiator`` (the lowest class that
        lists it), None when no class lists it."""
        return next((a for a in self.access if initiator in a.initiators), None)


@attrs.frozen
class MemoryTier:
    """A memory tier of the kernel (``/sys/devices/virtual/memory_tiering/memory_tier<N>``):
    ``tier`` is N, ``nodes`` its ``nodelist``; a smaller N is a faster (higher) tier."""

    tier: int
    nodes: tuple[int, ...]

    @property
    def abstract_distance(self) -> tuple[int, int]:
        """The abstract distances this tier holds, first and last (``N << 7`` to
        ``(N << 7) + 127``)."""
        start = self.tier << MEMTIER_CHUNK_BITS
        return start, start + (1 << MEMTIER_CHUNK_BITS) - 1


@attrs.frozen
class MemoryTopology:
    """The machine's memory as what it is: its NUMA nodes (:class:`NumaNode`, by
    number) and the kernel's memory tiers (:class:`MemoryTier`, fastest first; None
    when the kernel has no ``memory_tiering`` in sysfs)."""

    nodes: tuple[NumaNode, ...] = ()
    tiers: tuple[MemoryTier, ...] | None = None

    @property
    def hmat(self) -> bool:
        """Whether any node has HMAT access attributes."""
        return any(n.access for n in self.nodes)

    def node(self, number: int) -> NumaNode | None:
        """Node ``number``, None when sysfs does not list it."""
        return next((n for n in self.nodes if n.node == number), None)


def _access(base: str, access_class: int) -> Access | None:
    where = f"{base}/access{access_class}/initiators"
    initiators = tuple(_node_names(where))
    values = {
        name: _int(_read(f"{where}/{name}"))
        for name in ("read_bandwidth", "write_bandwidth", "read_latency", "write_latency")
    }
    if not initiators and all(v is None for v in values.values()):
        return None
    return Access(access_class=access_class, initiators=initiators, **values)


def hmat_access(node: int, root: str | None = None) -> tuple[Access, ...]:
    """A node's HMAT access attributes, one :class:`Access` per access class sysfs lists
    (``node<N>/access0``, ``access1``); ``()`` without HMAT."""
    base = f"{_root(root)}/{_NODES}/node{node}"
    found = (_access(base, c) for c in ACCESS_CLASSES)
    return tuple(a for a in found if a is not None)


def _meminfo_total(text: str | None) -> int | None:
    for line in (text or "").splitlines():
        parts = line.split()
        # "Node 0 MemTotal:       1024000 kB"
        if len(parts) == 5 and parts[2] == "MemTotal:" and parts[4] == "kB":
            kib = _int(parts[3])
            return None if kib is None else kib * 1024
    return None


def memory_tiers(root: str | None = None) -> tuple[MemoryTier, ...] | None:
    """The kernel's memory tiers, fastest first; None when sysfs has no
    ``devices/virtual/memory_tiering`` (a kernel before 6.1, or built without it)."""
    base = f"{_root(root)}/{_TIERING}"
    try:
        names = os.listdir(base)
    except (OSError, ValueError):
        return None
    tiers = []
    for name in names:
        n = _int(name.removeprefix("memory_tier")) if name.startswith("memory_tier") else None
        if n is None or name != f"memory_tier{n}":
            continue
        nodes = _id_list(_read(f"{base}/{name}/nodelist"))
        if nodes is not None:
            tiers.append(MemoryTier(tier=n, nodes=nodes))
    return tuple(sorted(tiers, key=lambda t: t.tier))


def numa_nodes(root: str | None = None) -> tuple[NumaNode, ...]:
    """Every NUMA node sysfs lists (``/sys/devices/system/node/node<N>``), by number:
    CPUs, memory, distances and HMAT access attributes (``tier`` is left None: see
    :func:`memory_topology`)."""
    base = f"{_root(root)}/{_NODES}"
    numbers = _node_names(base)
    has_cpu = _id_list(_read(f"{base}/has_cpu"))
    table = numa_distances(root)
    out = []
    for n in numbers:
        cpus = _id_list(_read(f"{base}/node{n}/cpulist")) or ()
        out.append(
            NumaNode(
                node=n,
                cpus=cpus,
                has_cpu=bool(cpus) if has_cpu is None else n in has_cpu,
                memory=_meminfo_total(_read(f"{base}/node{n}/meminfo")),
                distances=tuple(sorted(table.get(n, {}).items())),
                access=hmat_access(n, root),
            )
        )
    return tuple(out)


def memory_topology(root: str | None = None) -> MemoryTopology:
    """The machine's memory as what it is (:class:`MemoryTopology`): every node with its
    CPUs, memory, distances, HMAT access attributes and memory tier, and the tiers."""
    tiers = memory_tiers(root)
    tier_of = {node: t.tier for t in tiers or () for node in t.nodes}
    nodes = tuple(attrs.evolve(n, tier=tier_of.get(n.node)) for n in numa_nodes(root))
    return MemoryTopology(nodes=nodes, tiers=tiers)


# -- asking for memory by what it is (after UMF's memspaces) --------------------------------
class Memspace(enum.Enum):
    """What memory to ask for, after UMF's memspaces (``umfMemspaceHighestBandwidthGet``
    and its kin), relative to an initiator node (the calling thread's, or one given):

    - ``HIGHEST_BANDWIDTH``: the nodes with the highest HMAT read bandwidth from it
      (write bandwidth breaks ties);
    - ``LOWEST_LATENCY``: the nodes with the lowest HMAT read latency from it (write
      latency breaks ties);
    - ``HIGHEST_CAPACITY``: the nodes with the most memory (``MemTotal``);
    - ``CPU_LESS``: every node with memory and no CPUs (CXL-, HBM- or GPU-like memory:
      the kernel allocates from the nearest of them first).

    Without HMAT attributes for the initiator, bandwidth and latency are ranked by NUMA
    distance instead (the nearest nodes), and the answer says so."""

    HIGHEST_BANDWIDTH = "highest_bandwidth"
    LOWEST_LATENCY = "lowest_latency"
    HIGHEST_CAPACITY = "highest_capacity"
    CPU_LESS = "cpu_less"

    @classmethod
    def parse(cls, value: Memspace | str) -> Memspace:
        if isinstance(value, Memspace):
            return value
        if not isinstance(value, str):
            raise AMLTypeError(f"memspace must be a Memspace or its name, not {type(value).__name__}")
        try:
            return cls(value.lower())
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise AMLValueError(f"unknown memspace {value!r}; allowed: {allowed}") from None


@attrs.frozen
class MemspaceNodes:
    """The answer to :func:`memspace`: which nodes hold the memory asked for.

    ``nodes``: the best nodes (every node that ties with the best; what an area binds
    to); ``ranking``: every candidate as ``(node, value)``, best first; ``basis``: what
    the values are: ``"hmat_read_bandwidth"`` (MiB/s), ``"hmat_read_latency"`` (ns),
    ``"distance"`` (NUMA distance from ``near``: HMAT said nothing for it),
    ``"capacity"`` (bytes) or ``"cpu_less_distance"`` (distance from ``near`` of the
    CPU-less nodes); ``near``: the initiator node it is relative to (None when it could
    not be told and the answer does not need it); ``note``: one sentence saying how the
    nodes were chosen (and, ranking by distance, that HMAT was absent)."""

    memspace: Memspace
    nodes: tuple[int, ...]
    ranking: tuple[tuple[int, int], ...]
    basis: str
    near: int | None
    note: str

    @property
    def by_distance(self) -> bool:
        """Whether the nodes were ranked by NUMA distance for want of HMAT attributes."""
        return self.basis == "distance"


def current_node(root: str | None = None, proc: str = "/proc") -> int | None:
    """The NUMA node of the CPU the calling thread last ran on (field 39, ``processor``,
    of ``/proc/thread-self/stat``); None if it cannot be told."""
    text = _read(f"{proc}/thread-self/stat")
    if text is None or ")" not in text:
        return None
    fields = text.rpartition(")")[2].split()  # after "pid (comm)": field 3 on
    cpu = _int(fields[36]) if len(fields) > 36 else None
    if cpu is None:
        return None
    return next((n.node for n in numa_nodes(root) if cpu in n.cpus), None)


def _best(ranked: list[tuple[int, int]], tie: dict[int, int] | None = None) -> tuple[int, ...]:
    best = ranked[0][1]
    return tuple(sorted(n for n, v in ranked if v == best and (tie is None or tie[n] == tie[ranked[0][0]])))


def memspace(
    kind: Memspace | str,
    near: int | None = None,
    *,
    allowed: Iterable[int] | None = None,
    root: str | None = None,
    proc: str = "/proc",
) -> MemspaceNodes:
    """The nodes that hold ``kind`` of memory (a :class:`Memspace` or its name,
    ``"highest_bandwidth"``...) relative to node ``near`` (None: the calling thread's
    node, :func:`current_node`), among the nodes with memory (and in ``allowed``, when
    given: the nodes this process may use).

    Errors: :class:`~aml_core.errors.AMLTypeError` / :class:`~aml_core.errors.AMLValueError`
    for a ``kind`` or ``near`` of the wrong type or value;
    :class:`~aml_core.errors.AMLDomainError` for a ``near`` that is not a NUMA node of
    this machine; :class:`~aml_core.errors.AMLNotSupported` when the machine cannot
    tell: no NUMA node with memory (allowed); for bandwidth and latency, neither HMAT
    attributes from ``near`` nor NUMA distances (or ``near`` is None and the calling
    thread's node cannot be read); for capacity, no node's ``MemTotal``; for
    ``CPU_LESS``, no CPU-less node with memory."""
    which = Memspace.parse(kind)
    if near is not None:
        near = checks.integer(near, "near")
    allowed_set = None if allowed is None else frozenset(allowed)
    topo = numa_nodes(root)
    if near is not None and all(n.node != near for n in topo):
        raise AMLDomainError(f"near={near} is not a NUMA node of this machine ({[n.node for n in topo]})")
    candidates = [n for n in topo if n.memory != 0 and (allowed_set is None or n.node in allowed_set)]
    if not candidates:
        raise AMLNotSupported(f"no memspace {which.value}: sysfs lists no NUMA node with memory to use")
    if near is None:
        near = current_node(root, proc)
    if which is Memspace.HIGHEST_CAPACITY:
        return _by_capacity(which, candidates, near)
    if which is Memspace.CPU_LESS:
        return _cpu_less(which, candidates, near)
    if near is None:
        raise AMLNotSupported(
            f"no memspace {which.value}: the calling thread's NUMA node cannot be read "
            "(/proc/thread-self/stat); pass near= a node"
        )
    return _by_performance(which, candidates, near)


def _by_performance(which: Memspace, candidates: list[NumaNode], near: int) -> MemspaceNodes:
    bandwidth = which is Memspace.HIGHEST_BANDWIDTH
    hmat: list[tuple[int, int, int]] = []  # node, primary value, tie-breaker
    for n in candidates:
        a = n.access_from(near)
        if a is None:
            continue
        primary, second = (
            (a.read_bandwidth, a.write_bandwidth) if bandwidth else (a.read_latency, a.write_latency)
        )
        if primary is not None:
            fallback = 0 if bandwidth else 1 << 64
            hmat.append((n.node, primary, fallback if second is None else second))
    what = "read bandwidth" if bandwidth else "read latency"
    if hmat:
        sign = -1 if bandwidth else 1
        hmat.sort(key=lambda x: (sign * x[1], sign * x[2], x[0]))
        ranked = [(node, v) for node, v, _ in hmat]
        tie = {node: t for node, _, t in hmat}
        left_out = sorted(n.node for n in candidates if n.node not in tie)
        note = f"ranked by HMAT {what} from node {near}'s initiators"
        if left_out:
            note += f"; nodes {left_out} have no HMAT attributes for node {near} and were not ranked"
        return MemspaceNodes(
            memspace=which,
            nodes=_best(ranked, tie),
            ranking=tuple(ranked),
            basis="hmat_read_bandwidth" if bandwidth else "hmat_read_latency",
            near=near,
            note=note,
        )
    dist = [(n.node, d) for n in candidates if (d := n.distance(near)) is not None]
    if not dist:
        raise AMLNotSupported(
            f"no memspace {which.value}: this machine has no HMAT attributes for node {near} "
            "and no NUMA distances to rank its nodes by"
        )
    dist.sort(key=lambda x: (x[1], x[0]))
    return MemspaceNodes(
        memspace=which,
        nodes=_best(dist),
        ranking=tuple(dist),
        basis="distance",
        near=near,
        note=f"no HMAT {what} for node {near}: ranked by NUMA distance from node {near} instead",
    )


def _by_capacity(which: Memspace, candidates: list[NumaNode], near: int | None) -> MemspaceNodes:
    sized = [(n.node, n.memory) for n in candidates if n.memory is not None]
    if not sized:
        raise AMLNotSupported(f"no memspace {which.value}: sysfs gives no node's MemTotal")
    by_node = {n.node: n for n in candidates}

    def distance(node: int) -> int:
        d = None if near is None else by_node[node].distance(near)
        return (1 << 64) if d is None else d

    ranked = sorted(((node, size) for node, size in sized), key=lambda x: (-x[1], distance(x[0]), x[0]))
    return MemspaceNodes(
        memspace=which,
        nodes=_best(ranked),
        ranking=tuple(ranked),
        basis="capacity",
        near=near,
        note="ranked by node memory (MemTotal)" + ("" if near is None else f", then by distance from {near}"),
    )


def _cpu_less(which: Memspace, candidates: list[NumaNode], near: int | None) -> MemspaceNodes:
    far = [n for n in candidates if not n.has_cpu]
    if not far:
        raise AMLNotSupported(f"no memspace {which.value}: every NUMA node with memory here has CPUs")

    def distance(n: NumaNode) -> int:
        d = None if near is None else n.distance(near)
        return (1 << 64) if d is None else d

    far.sort(key=lambda n: (distance(n), n.node))
    return MemspaceNodes(
        memspace=which,
        nodes=tuple(sorted(n.node for n in far)),
        ranking=tuple((n.node, distance(n)) for n in far),
        basis="cpu_less_distance",
        near=near,
        note="every CPU-less node with memory" + ("" if near is None else f", nearest to node {near} first"),
    )
