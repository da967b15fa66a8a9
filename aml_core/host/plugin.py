"""The built-in host backend's plugin: registered through the ``aml.backends`` entry
point of aml-core (its only registration), like any third-party backend.

The probe reports each NUMA node this process may use (CPUs, total and free memory),
the huge pages configured per page size, and transparent huge pages. ``huge_pages`` is
claimed as a capability only when explicit huge pages (``MAP_HUGETLB``) are configured
(some ``nr_hugepages`` > 0): without them a huge-page mapping fails. Transparent huge
pages are reported separately (``transparent_huge_pages=`` of HostArea only advises).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from ..descriptor import BackendDescriptor, ProbeResult
from ..errors import AMLError, AMLNotSupported, AMLTypeError, AMLValueError
from ..hookspecs import hookimpl
from ..specs import Capability, DeviceInfo, Kind
from ..topology import MemspaceNodes
from ..topology import _int as _sysfs_int
from ..topology import _read as _read_sysfs

PRIORITY = 0
NODE_ROOT = "/sys/devices/system/node"
HUGEPAGES_ROOT = "/sys/kernel/mm/hugepages"
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"

#: Declared statically; HUGE_PAGES is added by the probe when huge pages are configured.
#: IPC: the memfd buffers of ``HostArea(ipc=True)``.
CAPABILITIES = (
    Capability.NUMA | Capability.FILE_BACKED | Capability.BUFFER_PROTOCOL | Capability.DLPACK | Capability.IPC
)


def _read(path: str) -> str | None:
    """A sysfs file's text as the topology readers read it (aml_core.topology: a regular
    file, bounded, UTF-8; None otherwise)."""
    return _read_sysfs(path)


def node_cpus(node: int) -> str:
    """The CPU list of a NUMA node as the kernel writes it ("0-3,8-11"; "" if unknown)."""
    return _read(f"{NODE_ROOT}/node{node}/cpulist") or ""


def node_meminfo(node: int) -> tuple[int, int | None]:
    """Total and free memory of a NUMA node in bytes (total 0 and free None if unknown).
    A value that is not what the kernel writes (ASCII digits, as aml_core.topology reads
    them: not ``"\u00b2"``) is not known, never an error."""
    from . import numa

    total, free = 0, None
    text = _read(f"{NODE_ROOT}/node{node}/meminfo") or ""
    for line in text.splitlines():
        parts = line.split()
        kib = _sysfs_int(parts[-2]) if len(parts) >= 4 and parts[-1] == "kB" else None
        if kib is None:
            continue
        if parts[2] == "MemTotal:":
            total = kib * 1024
        elif parts[2] == "MemFree:":
            free = kib * 1024
    return (total or numa.node_memory(node)), free


def nodes_meminfo(nodes: Iterable[int]) -> tuple[int, int | None]:
    """Total and free memory of NUMA nodes together (``node_meminfo`` summed; free None
    if any node's is unknown); no nodes: every node this process may use."""
    from . import numa

    total = 0
    free_sum: int | None = 0
    for node in sorted(nodes) or sorted(numa.allowed_nodes()):
        node_total, node_free = node_meminfo(node)
        total += node_total
        free_sum = None if free_sum is None or node_free is None else free_sum + node_free
    return total, free_sum


def huge_pages(root: str = HUGEPAGES_ROOT) -> dict[int, int]:
    """Configured huge pages: page size in bytes → ``nr_hugepages`` (``root`` is
    ``/sys/kernel/mm/hugepages`` or a node's ``hugepages`` directory)."""
    out: dict[int, int] = {}
    try:
        names = os.listdir(root)
    except OSError:
        return out
    for name in names:
        m = re.fullmatch(r"hugepages-(.+)kB", name)
        kib = _sysfs_int(m.group(1)) if m else None  # ASCII digits: "hugepages-²kB" is no size
        if kib is None:
            continue
        count = _sysfs_int(_read(f"{root}/{name}/nr_hugepages"))
        if count is not None:
            out[kib * 1024] = count
    return dict(sorted(out.items()))


def transparent_huge_pages() -> str | None:
    """The THP mode (``always``, ``madvise`` or ``never``), None if unknown."""
    text = _read(THP_ENABLED)
    m = re.search(r"\[(\w+)\]", text or "")
    return m.group(1) if m else None


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def describe_huge_pages(pages: dict[int, int]) -> str:
    """``"2 MiB x 0, 1 GiB x 4"``, or ``"none"`` without huge page support."""
    return ", ".join(f"{_size(size)} x {count}" for size, count in pages.items()) or "none"


def probe() -> ProbeResult:
    """Always available on Linux; the devices are the NUMA nodes this process may use."""
    from . import numa

    pages = huge_pages()
    caps = CAPABILITIES | (Capability.HUGE_PAGES if any(pages.values()) else Capability.NONE)
    allowed = sorted(numa.allowed_nodes())
    devices = []
    for node in allowed:
        total, free = node_meminfo(node)
        details: dict[str, object] = {"cpus": node_cpus(node)}
        node_pages = huge_pages(f"{NODE_ROOT}/node{node}/hugepages")
        if node_pages:
            details["huge_pages"] = describe_huge_pages(node_pages)
        devices.append(
            DeviceInfo(
                index=node,
                name=f"NUMA node {node}",
                total_memory=total,
                free_memory=free,
                capabilities=caps,
                details=details,
            )
        )
    thp = transparent_huge_pages()
    detail = f"NUMA nodes {allowed}; huge pages: {describe_huge_pages(pages)}"
    if thp is not None:
        detail += f"; THP: {thp}"
    return ProbeResult(
        available=True,
        detail=detail,
        devices=tuple(devices),
        capabilities=caps,
        versions={"Linux": os.uname().release},
    )


#: The options of ``aml_core.area(kind="host", ...)`` :func:`create_area` honours (declared
#: to the registry, which passes a request with others to another backend): HostArea's
#: keywords, and ``memspace=`` / ``near=`` (:func:`memspace_options`).
AREA_OPTIONS = frozenset(
    {
        "policy",
        "nodes",
        "shared",
        "ipc",
        "huge_pages",
        "transparent_huge_pages",
        "alignment",
        "memspace",
        "near",
    }
)


def create_area(kind: Kind, device: int | None = None, **options: Any) -> Any:
    """``aml_core.area(kind="host", device=node, **HostArea options)``; a device index
    binds the area to that NUMA node. ``memspace=`` (and ``near=``) asks for memory by
    what it is instead (:func:`memspace_options`)."""
    from .area import HostArea
    from .numa import Policy

    if kind is not Kind.HOST:
        raise AMLNotSupported(f"the host backend provides host memory, not {kind.value}")
    choice = memspace_options(device, options)
    if choice is not None:
        area = _host_area(HostArea, options)
        area.memspace = choice
        return area
    if device is not None and device >= 0:
        if "nodes" in options:
            raise AMLNotSupported("give either device (a NUMA node) or nodes, not both")
        options.setdefault("policy", Policy.BIND)
        options["nodes"] = [device]
    return _host_area(HostArea, options)


def _host_area(cls: Any, options: dict[str, Any]) -> Any:
    try:
        return cls(**options)
    except TypeError as exc:
        if isinstance(exc, AMLError):
            raise
        # An unknown keyword: the caller's mistake, not a broken plugin.
        raise AMLTypeError(f"bad host area option: {exc}") from None


def memspace_options(device: int | None, options: dict[str, Any]) -> MemspaceNodes | None:
    """``memspace=`` (a :class:`~aml_core.topology.Memspace` or its name) and ``near=``
    (a node; None: the calling thread's) of ``aml_core.area(kind="host", ...)``, taken
    out of ``options`` and resolved, before the area is made, to the nodes that hold
    that memory among those this process may use (:func:`aml_core.topology.memspace`):
    ``options`` gets ``nodes=`` and ``policy=`` (BIND unless given; PREFERRED takes the
    best-ranked node, INTERLEAVE every chosen node). The answer is returned (and kept
    as the area's ``memspace``); None when no memspace was asked for.

    Errors: :class:`~aml_core.errors.AMLValueError` for ``memspace=`` with a device
    index, ``nodes=`` or the DEFAULT policy, or ``near=`` without ``memspace=``; and
    those of :func:`aml_core.topology.memspace` (a machine that cannot tell:
    :class:`~aml_core.errors.AMLNotSupported`)."""
    from .. import topology
    from . import numa
    from .numa import Policy

    if "memspace" not in options:
        if "near" in options:
            raise AMLValueError("near= is the node a memspace= is relative to: give memspace= too")
        return None
    kind = options.pop("memspace")
    near = options.pop("near", None)
    if (device is not None and device >= 0) or options.get("nodes") is not None:
        raise AMLValueError("give memspace= or the nodes (device=, nodes=), not both")
    policy = Policy.parse(options.get("policy", Policy.BIND))
    if policy is Policy.DEFAULT:
        raise AMLValueError(
            "memspace= places memory on nodes; use BIND, PREFERRED or INTERLEAVE (not DEFAULT)"
        )
    choice = topology.memspace(kind, near, allowed=numa.allowed_nodes())
    options["policy"] = policy
    options["nodes"] = list(choice.nodes[:1] if policy is Policy.PREFERRED else choice.nodes)
    return choice


def ipc_open(handle: Any) -> Any:
    """``aml_core.ipc_open`` of a handle exported by ``HostArea(ipc=True).ipc_export``."""
    from .ipc import ipc_open as open_handle

    return open_handle(handle)


@hookimpl
def aml_backends() -> list[BackendDescriptor]:
    return [
        BackendDescriptor(
            name="host",
            priority=PRIORITY,
            kinds={Kind.HOST},
            probe=probe,
            create_area=create_area,
            capabilities=CAPABILITIES,
            description="Linux mmap with NUMA policy (mbind), huge pages, file mappings and memfd IPC",
            ipc_open=ipc_open,
            area_options=AREA_OPTIONS,
        )
    ]
