"""Value objects: memory kinds, capability flags, device info, area requests,
backend status and area statistics.

All are frozen attrs classes validated at construction; a bad value raises
:class:`~aml_core.errors.AMLValueError` (or :class:`~aml_core.errors.AMLTypeError`)
saying what was wrong and what is allowed.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from . import checks
from .errors import AMLTypeError, AMLValueError
from .statistics import format_size as format_size  # noqa: PLC0414 (re-exported: its home before)
from .statistics import record_summary, stat

__all__ = [
    "BACKEND_STATES",
    "AreaSpec",
    "AreaStats",
    "BackendStatus",
    "Capability",
    "DeviceInfo",
    "Kind",
    "MAX_SIZE",
    "as_kind",
    "as_size",
]

#: The largest size aml accepts (:data:`aml_core.checks.MAX_SIZE`, 2**63 - 1); larger is EDOM.
MAX_SIZE = checks.MAX_SIZE


class Kind(enum.Enum):
    """Portable kinds of memory.

    DEVICE: memory on an accelerator. HOST: host memory (pinned and visible to the
    device where a device backend provides it; plain host memory from the built-in
    host backend). MANAGED: unified memory migrating between host and device.
    MAPPED: host memory mapped into a device's address space.
    """

    DEVICE = "device"
    HOST = "host"
    MANAGED = "managed"
    MAPPED = "mapped"

    def __str__(self) -> str:
        return self.value


def as_kind(value: Kind | str) -> Kind:
    """Accept a :class:`Kind` or its name (``"device"``, ``"HOST"``...)."""
    if isinstance(value, Kind):
        return value
    if isinstance(value, str):
        try:
            return Kind(value.lower())
        except ValueError:
            pass
        raise AMLValueError(f"unknown memory kind {value!r}; allowed: " + ", ".join(k.value for k in Kind))
    raise AMLTypeError(f"kind must be a Kind or a string, not {type(value).__name__}")


def as_size(value: object, what: str = "size", *, allow_zero: bool = False) -> int:
    """Validate a byte count: :func:`aml_core.checks.size`, the one size rule (kept under
    this name for existing callers)."""
    return checks.size(value, what, zero=allow_zero)


class Capability(enum.Flag):
    """What a backend, a device or an area offers."""

    NONE = 0
    #: Managed (unified) memory: prefetch, advise, range attributes, stream attach.
    MANAGED = enum.auto()
    #: Several processors may access managed memory at once.
    CONCURRENT_MANAGED_ACCESS = enum.auto()
    #: The device can access pageable host memory directly.
    PAGEABLE_ACCESS = enum.auto()
    #: Virtual memory: reserve, create, map, access, export/import, granularity.
    VIRTUAL_MEMORY = enum.auto()
    #: Inter-process sharing of allocations.
    IPC = enum.auto()
    #: NUMA placement policies (bind, preferred, interleave).
    NUMA = enum.auto()
    #: Huge pages on request.
    HUGE_PAGES = enum.auto()
    #: File-backed mappings.
    FILE_BACKED = enum.auto()
    #: Host memory pinned (page-locked) for device transfers.
    PINNED = enum.auto()
    #: Host memory mapped into a device.
    MAPPED = enum.auto()
    #: Buffers speak the Python buffer protocol (host-accessible memory).
    BUFFER_PROTOCOL = enum.auto()
    #: Buffers speak DLPack.
    DLPACK = enum.auto()
    #: Buffers speak ``__cuda_array_interface__``.
    CUDA_ARRAY_INTERFACE = enum.auto()

    def names(self) -> list[str]:
        """The member names set in this value, in definition order."""
        return [m.name.lower() for m in Capability if m.name and m is not Capability.NONE and m in self]

    @classmethod
    def parse(cls, names: Iterable[str]) -> Capability:
        out = cls.NONE
        for name in names:
            try:
                out |= cls[name.upper()]
            except KeyError:
                allowed = ", ".join(m.name.lower() for m in cls if m.name and m is not cls.NONE)
                raise AMLValueError(f"unknown capability {name!r}; allowed: {allowed}") from None
        return out


def _non_negative_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AMLValueError(f"{attribute.name} must be an integer >= 0, got {value!r}")


def _capability(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Capability):
        raise AMLTypeError(f"{attribute.name} must be a Capability, not {type(value).__name__}")


def _frozen_mapping(mapping: Mapping[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(mapping))


def _optional_non_negative_int(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _non_negative_int(instance, attribute, value)


def _str_mapping(mapping: Mapping[str, str]) -> Mapping[str, str]:
    if not isinstance(mapping, Mapping):
        raise AMLTypeError(
            f"versions must be a mapping of names to version strings, not {type(mapping).__name__}"
        )
    for key, value in mapping.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise AMLTypeError(f"versions must map str to str, got {key!r}: {value!r}")
    return MappingProxyType(dict(mapping))


def _devices(devices: Iterable[DeviceInfo]) -> tuple[DeviceInfo, ...]:
    return tuple(devices)


def _to_kinds(values: Iterable[Kind | str]) -> frozenset[Kind]:
    if isinstance(values, (str, Kind)):
        values = [values]
    return frozenset(as_kind(v) for v in values)


@attrs.frozen
class DeviceInfo:
    """One device a backend can allocate on."""

    index: int = attrs.field(validator=_non_negative_int)
    name: str = attrs.field(validator=attrs.validators.instance_of(str))
    total_memory: int = attrs.field(default=0, validator=_non_negative_int)
    capabilities: Capability = attrs.field(default=Capability.NONE, validator=_capability)
    #: Extra facts (driver version, PCI id, NUMA node...), as plain strings/ints.
    details: Mapping[str, object] = attrs.field(factory=dict, converter=_frozen_mapping)
    #: Free memory in bytes when the probe ran (None: not known).
    free_memory: int | None = attrs.field(default=None, validator=_optional_non_negative_int)

    def to_json(self) -> dict[str, object]:
        """This device as JSON (``aml_core.codec``, where all of aml's JSON lives)."""
        from .codec import device_to_json

        return device_to_json(self)


def _device_request(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise AMLTypeError(f"device must be an integer device index or None, not {type(value).__name__}")


@attrs.frozen
class AreaSpec:
    """A request for an area: which kind of memory, on which device, from which
    backend (None: the registry chooses), with backend-specific options."""

    kind: Kind = attrs.field(converter=as_kind)
    device: int | None = attrs.field(default=None, validator=_device_request)
    backend: str | None = attrs.field(default=None)
    options: Mapping[str, object] = attrs.field(factory=dict, converter=_frozen_mapping)

    @backend.validator
    def _check_backend(self, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is None:
            return
        if not isinstance(value, str):
            raise AMLTypeError(f"backend must be a backend name (a str) or None, not {type(value).__name__}")
        if not value:
            raise AMLValueError("backend must be a non-empty backend name or None, got ''")


#: The states of a backend in :class:`BackendStatus` (and ``aml info``).
BACKEND_STATES = ("available", "unavailable", "broken", "disabled", "shadowed")


def _default_state(status: BackendStatus) -> str:
    return "available" if status.available else "unavailable"


def _check_state(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in BACKEND_STATES:
        raise AMLValueError(f"state must be one of {', '.join(BACKEND_STATES)}, got {value!r}")


@attrs.frozen
class BackendStatus:
    """What the registry knows of one backend (``aml_core.backends()``).

    ``state`` is ``available``; ``unavailable`` (the probe said why); ``broken`` (the
    plugin failed to import, its hook or probe raised, hung, crashed or returned junk);
    ``disabled`` (``AML_DISABLE_BACKENDS``); or ``shadowed`` (another plugin provides a
    backend of the same name and wins, see ``shadowed_by``). ``reason`` says why a
    backend is not available (``""`` when it is); ``detail`` is what an available
    backend's probe found. ``priority`` is None when it is not known (a plugin that
    failed before declaring its backends).
    """

    name: str
    distribution: str
    version: str
    priority: int | None
    available: bool
    reason: str
    kinds: frozenset[Kind] = attrs.field(converter=_to_kinds, factory=frozenset)
    devices: tuple[DeviceInfo, ...] = attrs.field(converter=_devices, factory=tuple)
    capabilities: Capability = attrs.field(default=Capability.NONE, validator=_capability)
    description: str = ""
    detail: str = ""
    #: Driver, runtime and binding versions the probe found ({"CUDA driver": "13.0"}).
    versions: Mapping[str, str] = attrs.field(factory=dict, converter=_str_mapping)
    state: str = attrs.field(default=attrs.Factory(_default_state, takes_self=True), validator=_check_state)
    #: For a shadowed backend: the plugin that provides the backend of this name instead.
    shadowed_by: str | None = None
    #: The plugin (entry point or ``aml_core.register`` name) that declared the backend.
    plugin: str = ""

    def to_json(self) -> dict[str, object]:
        """This status as ``aml info --json`` prints it (``aml_core.codec``)."""
        from .codec import status_to_json

        return status_to_json(self)


@attrs.frozen
class AreaStats:
    """A snapshot of an area's bookkeeping. The fields are exact byte and mapping
    counts; ``str()`` (:meth:`summary`) gives them for people, sizes in binary units.
    Each field is declared once, with its meaning and its words in the summary
    (:mod:`aml_core.statistics`)."""

    bytes_in_use: int = attrs.field(default=0, metadata=stat("bytes of live mappings", "{} in use"))
    peak_bytes: int = attrs.field(
        default=0, metadata=stat("the peak of bytes_in_use since the area was made", "peak {}", part="aside")
    )
    live_mappings: int = attrs.field(
        default=0, metadata=stat("mappings not yet unmapped", "{} live mappings", unit="count")
    )
    total_maps: int = attrs.field(
        default=0, metadata=stat("mmap calls that succeeded", "{} maps", unit="count")
    )
    total_unmaps: int = attrs.field(
        default=0, metadata=stat("munmap calls and frees that succeeded", "{} unmaps", unit="count")
    )

    def summary(self) -> str:
        """``"64.0 MiB in use (peak 128.0 MiB), 2 live mappings, 5 maps, 3 unmaps"``."""
        return record_summary(self)

    def __str__(self) -> str:
        return self.summary()
