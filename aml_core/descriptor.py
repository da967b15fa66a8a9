"""What a backend plugin hands to the registry: a :class:`BackendDescriptor` with a
cheap probe returning a :class:`ProbeResult`, and a lazy area factory."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from .errors import AMLTypeError, AMLValueError
from .specs import Capability, DeviceInfo, Kind, as_kind

if TYPE_CHECKING:
    from .area import Area
    from .buffer import Buffer

__all__ = ["BackendDescriptor", "ProbeResult"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def _devices(devices: Any) -> tuple[DeviceInfo, ...]:
    return tuple(devices)


def _kinds(values: Any) -> frozenset[Kind]:
    if isinstance(values, (str, Kind)):
        values = [values]
    return frozenset(as_kind(v) for v in values)


@attrs.frozen
class ProbeResult:
    """The outcome of a probe: available or not, why, and what was found."""

    available: bool
    reason: str = ""
    devices: tuple[DeviceInfo, ...] = attrs.field(converter=_devices, factory=tuple)
    #: Capabilities found at probe time; combined with the descriptor's declared ones.
    capabilities: Capability = Capability.NONE

    @classmethod
    def unavailable(cls, reason: str) -> ProbeResult:
        return cls(available=False, reason=reason)


def _check_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not _NAME.match(value):
        raise AMLValueError(
            f"backend name must be lower-case letters, digits and '_' starting with a letter, got {value!r}"
        )


def _check_callable(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):
        raise AMLTypeError(f"{attribute.name} must be callable, not {type(value).__name__}")


def _check_priority(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise AMLTypeError(f"priority must be an int, not {type(value).__name__}")


@attrs.frozen
class BackendDescriptor:
    """A backend as its plugin declares it.

    ``probe()`` must be cheap, must not allocate device memory and must never crash:
    it returns :class:`ProbeResult` (raising or exceeding the registry's probe time
    makes the backend unavailable with that reason). ``create_area(kind, device,
    **options)`` builds an area; it is only called after a successful probe and may
    raise :class:`~aml_core.errors.AMLNotSupported` to let the next backend try.
    ``ipc_open(handle)``, if given, opens an IPC handle exported by this backend in
    another process.
    """

    name: str = attrs.field(validator=_check_name)
    priority: int = attrs.field(validator=_check_priority)
    kinds: frozenset[Kind] = attrs.field(converter=_kinds)
    probe: Callable[[], ProbeResult] = attrs.field(validator=_check_callable)
    create_area: Callable[..., Area] = attrs.field(validator=_check_callable)
    capabilities: Capability = Capability.NONE
    description: str = ""
    ipc_open: Callable[[Any], Buffer] | None = attrs.field(default=None, validator=_check_callable)
