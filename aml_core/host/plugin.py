"""The built-in host backend's plugin: registered through the ``aml.backends`` entry
point of aml-core, like any third-party backend."""

from __future__ import annotations

from typing import Any

from ..descriptor import BackendDescriptor, ProbeResult
from ..errors import AMLNotSupported
from ..hookspecs import hookimpl
from ..specs import Capability, DeviceInfo, Kind

PRIORITY = 0


def probe() -> ProbeResult:
    """Always available on Linux; the devices are the NUMA nodes this process may use."""
    from . import numa
    from .area import CAPABILITIES

    allowed = sorted(numa.allowed_nodes())
    devices = tuple(
        DeviceInfo(
            index=node,
            name=f"NUMA node {node}",
            total_memory=numa.node_memory(node),
            capabilities=CAPABILITIES,
        )
        for node in allowed
    )
    return ProbeResult(
        available=True,
        reason=f"{len(devices)} NUMA node(s) allowed: {allowed}",
        devices=devices,
        capabilities=CAPABILITIES,
    )


def create_area(kind: Kind, device: int | None = None, **options: Any) -> Any:
    """``aml_core.area(kind="host", device=node, **HostArea options)``; a device index
    binds the area to that NUMA node."""
    from .area import HostArea
    from .numa import Policy

    if kind is not Kind.HOST:
        raise AMLNotSupported(f"the host backend provides host memory, not {kind.value}")
    if device is not None and device >= 0:
        if "nodes" in options:
            raise AMLNotSupported("give either device (a NUMA node) or nodes, not both")
        options.setdefault("policy", Policy.BIND)
        options["nodes"] = [device]
    return HostArea(**options)


@hookimpl
def aml_backends() -> list[BackendDescriptor]:
    return [
        BackendDescriptor(
            name="host",
            priority=PRIORITY,
            kinds={Kind.HOST},
            probe=probe,
            create_area=create_area,
            capabilities=Capability.NUMA
            | Capability.HUGE_PAGES
            | Capability.FILE_BACKED
            | Capability.BUFFER_PROTOCOL
            | Capability.DLPACK,
            description="Linux mmap with NUMA policy (mbind), huge pages and file mappings",
        )
    ]
