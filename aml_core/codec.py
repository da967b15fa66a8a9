"""JSON of the registry's value objects, in one place: :class:`DeviceInfo`,
:class:`ProbeResult` (the isolated probe's answer) and :class:`BackendStatus`
(``aml info --json``), and of the machine's memory topology
(:class:`~aml_core.topology.MemoryTopology`, ``aml info --json``'s ``topology``).
``*_to_json`` gives plain JSON types; ``*_from_json`` reads them back and validates
through the classes' own validators.

Not ``cattrs`` (26.2.1, checked for issue 31): its converter coerces (``int("5")``) where
these readers refuse a wrong type through the validators, raises ``ClassValidationError``
groups instead of one AMLValueError naming the object, writes a Capability as its int and
the fields in declaration order, and adds about 47 ms to ``import aml_core``; the hooks it
would need (capabilities, kinds, the status' reason, derived fields, plain primitives) are
what this module writes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .descriptor import ProbeResult
from .errors import AMLError, AMLValueError
from .specs import BackendStatus, Capability, DeviceInfo
from .topology import Access, MemoryTier, MemoryTopology, NumaNode

_T = TypeVar("_T")


def _reading(what: str, read: Callable[[], _T]) -> _T:
    """``read()``, where anything wrong in the JSON (a missing key, a wrong type, a
    value a validator refuses) is an AML error: AMLValueError naming ``what``."""
    try:
        return read()
    except AMLError:
        raise
    except RecursionError:
        raise AMLValueError(f"not the JSON of {what}: nested too deeply") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        raise AMLValueError(f"not the JSON of {what}: {type(exc).__name__}: {exc}") from None


__all__ = [
    "device_from_json",
    "device_to_json",
    "memory_topology_from_json",
    "memory_topology_to_json",
    "result_from_json",
    "result_to_json",
    "status_to_json",
]


def device_to_json(device: DeviceInfo) -> dict[str, object]:
    return {
        "index": device.index,
        "name": device.name,
        "total_memory": device.total_memory,
        "free_memory": device.free_memory,
        "capabilities": device.capabilities.names(),
        "details": dict(device.details),
    }


def device_from_json(data: Mapping[str, Any]) -> DeviceInfo:
    """The DeviceInfo of :func:`device_to_json`'s JSON; AMLValueError (or AMLTypeError)
    for anything else."""
    return _reading("a device", lambda: _device(data))


def _device(data: Mapping[str, Any]) -> DeviceInfo:
    return DeviceInfo(
        index=data["index"],
        name=data["name"],
        total_memory=data["total_memory"],
        free_memory=data["free_memory"],
        capabilities=Capability.parse(data["capabilities"]),
        details=data["details"],
    )


def result_to_json(result: ProbeResult) -> dict[str, object]:
    return {
        "available": result.available,
        "reason": result.reason,
        "detail": result.detail,
        "devices": [device_to_json(d) for d in result.devices],
        "capabilities": result.capabilities.names(),
        "versions": dict(result.versions),
    }


def result_from_json(data: Mapping[str, Any]) -> ProbeResult:
    """The ProbeResult of :func:`result_to_json`'s JSON (an isolated probe's answer,
    the probe cache); AMLValueError (or AMLTypeError) for anything else."""
    return _reading("a probe result", lambda: _result(data))


def _result(data: Mapping[str, Any]) -> ProbeResult:
    return ProbeResult(
        available=data["available"],
        reason=data["reason"],
        detail=data["detail"],
        devices=tuple(_device(d) for d in data["devices"]),
        capabilities=Capability.parse(data["capabilities"]),
        versions=data["versions"],
    )


def status_to_json(status: BackendStatus) -> dict[str, object]:
    return {
        "name": status.name,
        "state": status.state,
        "available": status.available,
        "reason": None if status.available else status.reason,
        "detail": status.detail,
        "distribution": status.distribution,
        "version": status.version,
        "plugin": status.plugin,
        "priority": status.priority,
        "shadowed_by": status.shadowed_by,
        "kinds": sorted(k.value for k in status.kinds),
        "devices": [device_to_json(d) for d in status.devices],
        "capabilities": status.capabilities.names(),
        "versions": dict(status.versions),
        "description": status.description,
    }


_ACCESS_VALUES = ("read_bandwidth", "write_bandwidth", "read_latency", "write_latency")


def access_to_json(access: Access) -> dict[str, object]:
    return {
        "access_class": access.access_class,
        "initiators": list(access.initiators),
        **{name: getattr(access, name) for name in _ACCESS_VALUES},
    }


def access_from_json(data: Mapping[str, Any]) -> Access:
    return Access(
        access_class=data["access_class"],
        initiators=tuple(data["initiators"]),
        **{name: data[name] for name in _ACCESS_VALUES},
    )


def numa_node_to_json(node: NumaNode) -> dict[str, object]:
    return {
        "node": node.node,
        "cpus": list(node.cpus),
        "has_cpu": node.has_cpu,
        "memory": node.memory,
        "distances": [list(pair) for pair in node.distances],
        "access": [access_to_json(a) for a in node.access],
        "tier": node.tier,
    }


def numa_node_from_json(data: Mapping[str, Any]) -> NumaNode:
    return NumaNode(
        node=data["node"],
        cpus=tuple(data["cpus"]),
        has_cpu=data["has_cpu"],
        memory=data["memory"],
        distances=tuple((a, b) for a, b in data["distances"]),
        access=tuple(access_from_json(a) for a in data["access"]),
        tier=data["tier"],
    )


def memory_topology_to_json(topology: MemoryTopology) -> dict[str, object]:
    """``nodes`` (one object per NUMA node), ``memory_tiers`` (null without
    ``memory_tiering``) and ``hmat`` (docs/aml-info-json.md)."""
    tiers = topology.tiers
    return {
        "nodes": [numa_node_to_json(n) for n in topology.nodes],
        "memory_tiers": None
        if tiers is None
        else [
            {"tier": t.tier, "nodes": list(t.nodes), "abstract_distance": list(t.abstract_distance)}
            for t in tiers
        ],
        "hmat": topology.hmat,
    }


def memory_topology_from_json(data: Mapping[str, Any]) -> MemoryTopology:
    """The inverse of :func:`memory_topology_to_json`; malformed JSON is AMLValueError."""
    return _reading("a memory topology", lambda: _memory_topology(data))


def _memory_topology(data: Mapping[str, Any]) -> MemoryTopology:
    tiers = data["memory_tiers"]
    return MemoryTopology(
        nodes=tuple(numa_node_from_json(n) for n in data["nodes"]),
        tiers=None
        if tiers is None
        else tuple(MemoryTier(tier=t["tier"], nodes=tuple(t["nodes"])) for t in tiers),
    )
