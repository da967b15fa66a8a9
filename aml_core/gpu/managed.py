"""Managed (unified) memory: prefetch, advise, range attributes and stream attach
(docs/aml-contract.md#hip-managed-memory), written once over the ``MANAGED`` group of
:class:`~aml_core.gpu.runtime.Runtime`.

Locations are device indices, with :data:`CPU` (-1) for the host. Range attributes come
back as Python values: ``bool`` for READ_MOSTLY, ``int`` locations (``CPU`` -1 for the
host, ``INVALID`` -2 for "no single location"), a tuple of devices for ACCESSED_BY,
:class:`LocationType` and :class:`CoherencyMode` members for the typed attributes.
Ranges are checked against the buffer, and the runtime's own constraints (HIP: 4 KiB
granules and page-aligned advise ranges) before any native call.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .. import checks
from ..errors import AMLNotSupported, AMLValueError
from .flags import AllocMode
from .runtime import CPU_DEVICE, INVALID_DEVICE, Group, Runtime
from .stream import as_stream_handle

if TYPE_CHECKING:
    from ..buffer import Buffer

__all__ = [
    "CPU",
    "INVALID",
    "Advice",
    "AttachFlags",
    "CoherencyMode",
    "LocationType",
    "RangeAttribute",
    "advise",
    "prefetch",
    "range_attribute",
    "range_attributes",
    "stream_attach",
]

CPU = CPU_DEVICE
INVALID = INVALID_DEVICE


class Advice(enum.IntEnum):
    """``cudaMemoryAdvise`` / ``hipMemoryAdvise`` (same numbers); the coarse-grain
    pair is HIP only."""

    SET_READ_MOSTLY = 1
    UNSET_READ_MOSTLY = 2
    SET_PREFERRED_LOCATION = 3
    UNSET_PREFERRED_LOCATION = 4
    SET_ACCESSED_BY = 5
    UNSET_ACCESSED_BY = 6
    SET_COARSE_GRAIN = 100
    UNSET_COARSE_GRAIN = 101


class RangeAttribute(enum.IntEnum):
    """``cudaMemRangeAttribute`` / ``hipMemRangeAttribute``: 1-4 on both, 5-8 CUDA
    only, COHERENCY_MODE HIP only."""

    READ_MOSTLY = 1
    PREFERRED_LOCATION = 2
    ACCESSED_BY = 3
    LAST_PREFETCH_LOCATION = 4
    PREFERRED_LOCATION_TYPE = 5
    PREFERRED_LOCATION_ID = 6
    LAST_PREFETCH_LOCATION_TYPE = 7
    LAST_PREFETCH_LOCATION_ID = 8
    COHERENCY_MODE = 100


class LocationType(enum.IntEnum):
    """``cudaMemLocationType``."""

    INVALID = 0
    DEVICE = 1
    HOST = 2
    HOST_NUMA = 3
    HOST_NUMA_CURRENT = 4


class CoherencyMode(enum.IntEnum):
    """``hipMemRangeCoherencyMode``."""

    FINE_GRAIN = 0
    COARSE_GRAIN = 1
    INDETERMINATE = 2


class AttachFlags(enum.IntEnum):
    """``cudaMemAttach*`` / ``hipMemAttach*`` (same values)."""

    GLOBAL = 1
    HOST = 2
    SINGLE = 4


def _range(buffer: Buffer, offset: int, size: int | None) -> tuple[int, int]:
    if buffer.freed:
        raise AMLValueError(f"{buffer!r} was freed")
    offset = checks.integer(offset, "offset")
    size = None if size is None else checks.integer(size, "size")
    if offset < 0 or offset > buffer.size:
        raise AMLValueError(f"offset {offset} is outside the buffer (0..{buffer.size})")
    n = buffer.size - offset if size is None else size
    if n <= 0 or offset + n > buffer.size:
        raise AMLValueError(f"range offset={offset} size={n} is not inside the buffer of {buffer.size} bytes")
    return buffer.ptr + offset, n


def _location(runtime: Runtime, location: object, what: str = "location") -> int:
    if isinstance(location, str):
        if location.lower() in ("host", "cpu"):
            return CPU
        raise AMLValueError(f"{what} must be a device index or 'host', got {location!r}")
    location = checks.integer(location, f"{what} (a device index or 'host')")
    if location == CPU:
        return CPU
    if location < 0 or location >= runtime.device_count():
        raise AMLValueError(
            f"{what} {location} is not a device (0..{runtime.device_count() - 1}) or the host (-1)"
        )
    return location


def _check_managed(buffer: Buffer) -> None:
    if getattr(buffer.native, "mode", None) is not AllocMode.MANAGED:
        raise AMLValueError(f"{buffer!r} is not managed memory")


def prefetch(
    runtime: Runtime,
    buffer: Buffer,
    location: int | str,
    *,
    offset: int = 0,
    size: int | None = None,
    stream: Any = None,
) -> None:
    """Migrate a range of a managed buffer to a device or the host, on a stream."""
    _check_managed(buffer)
    ptr, n = _range(buffer, offset, size)
    dev = _location(runtime, location)
    runtime.require(Group.MANAGED).mem_prefetch(ptr, n, dev, as_stream_handle(stream))


def advise(
    runtime: Runtime,
    buffer: Buffer,
    advice: Advice | int,
    location: int | str,
    *,
    offset: int = 0,
    size: int | None = None,
) -> None:
    """Apply an advice to a range of a managed buffer for a device (or the host)."""
    _check_managed(buffer)
    try:
        adv = Advice(advice)
    except ValueError:
        allowed = ", ".join(f"{a.name} {a.value}" for a in Advice)
        raise AMLValueError(f"unknown advice {advice!r}; allowed: {allowed}") from None
    traits = runtime.traits
    if adv.value not in traits.advices:
        raise AMLNotSupported(f"{traits.name} has no advice {adv.name}")
    ptr, n = _range(buffer, offset, size)
    align = traits.advise_alignment
    if align > 1 and (ptr % align or n % align):
        raise AMLValueError(
            f"{traits.name} advise ranges must start and end on {align}-byte pages: "
            f"0x{ptr:x} + {n} is not aligned"
        )
    dev = _location(runtime, location)
    runtime.require(Group.MANAGED).mem_advise(ptr, n, adv.value, dev)


#: What a range attribute reads as: READ_MOSTLY a bool, ACCESSED_BY a tuple of device
#: indices (-1: the host), the location types a :class:`LocationType`, COHERENCY_MODE a
#: :class:`CoherencyMode` (an int when the runtime answers a value without a name), the
#: others an int (a device index, -1 the host, -2 none).
RangeValue = bool | int | tuple[int, ...] | LocationType | CoherencyMode


def _convert(attr: RangeAttribute, data: list[int]) -> RangeValue:
    if attr is RangeAttribute.READ_MOSTLY:
        return bool(data[0])
    if attr is RangeAttribute.ACCESSED_BY:
        return tuple(d for d in data if d != INVALID)
    if attr in (RangeAttribute.PREFERRED_LOCATION_TYPE, RangeAttribute.LAST_PREFETCH_LOCATION_TYPE):
        try:
            return LocationType(data[0])
        except ValueError:
            return data[0]
    if attr is RangeAttribute.COHERENCY_MODE:
        try:
            return CoherencyMode(data[0])
        except ValueError:
            return data[0]
    return int(data[0])


def range_attributes(
    runtime: Runtime,
    buffer: Buffer,
    attributes: Iterable[RangeAttribute | int],
    *,
    offset: int = 0,
    size: int | None = None,
) -> dict[RangeAttribute, RangeValue]:
    """Query several attributes of a managed range in one native call."""
    _check_managed(buffer)
    attrs_: list[RangeAttribute] = []
    for a in attributes:
        try:
            attr = RangeAttribute(a)
        except ValueError:
            allowed = ", ".join(f"{x.name} {x.value}" for x in RangeAttribute)
            raise AMLValueError(f"unknown range attribute {a!r}; allowed: {allowed}") from None
        if attr.value not in runtime.traits.range_attributes:
            raise AMLNotSupported(f"{runtime.traits.name} has no range attribute {attr.name}")
        attrs_.append(attr)
    if not attrs_:
        raise AMLValueError("range_attributes needs at least one attribute")
    ptr, n = _range(buffer, offset, size)
    # ACCESSED_BY may name every device and the host (CPU, -1): one slot each.
    slots = max(1, runtime.device_count()) + 1
    requests = [(a.value, slots if a is RangeAttribute.ACCESSED_BY else 1) for a in attrs_]
    data = runtime.require(Group.MANAGED).mem_range_attributes(ptr, n, requests)
    return {a: _convert(a, d) for a, d in zip(attrs_, data, strict=True)}


def range_attribute(
    runtime: Runtime,
    buffer: Buffer,
    attribute: RangeAttribute | int,
    *,
    offset: int = 0,
    size: int | None = None,
) -> RangeValue:
    """Query one attribute of a managed range (see :data:`RangeValue` for value types)."""
    result = range_attributes(runtime, buffer, [attribute], offset=offset, size=size)
    return next(iter(result.values()))


def stream_attach(
    runtime: Runtime,
    buffer: Buffer,
    stream: Any,
    flags: AttachFlags | int = AttachFlags.SINGLE,
    *,
    whole: bool = True,
) -> None:
    """Attach a managed buffer to a stream (``cudaStreamAttachMemAsync``); with
    ``whole`` (the default) the length passed is 0, meaning the whole allocation."""
    _check_managed(buffer)
    if buffer.freed:
        raise AMLValueError(f"{buffer!r} was freed")
    try:
        f = AttachFlags(flags)
    except ValueError:
        raise AMLValueError(f"unknown attach flags {flags!r}; allowed: GLOBAL 1, HOST 2, SINGLE 4") from None
    runtime.require(Group.MANAGED).stream_attach(
        as_stream_handle(stream), buffer.ptr, 0 if whole else buffer.size, f.value
    )
