"""What a backend plugin hands to the registry: a :class:`BackendDescriptor` with a
cheap probe returning a :class:`ProbeResult`, and a lazy area factory."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import attrs

from .errors import AMLTypeError, AMLValueError
from .specs import Capability, DeviceInfo, Kind, as_kind

if TYPE_CHECKING:
    from .area import Area
    from .buffer import Buffer

__all__ = ["AreaOptions", "BackendDescriptor", "ProbeResult"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def _devices(devices: Iterable[DeviceInfo]) -> tuple[DeviceInfo, ...]:
    given: object = devices  # what a probe gave, checked at run time whatever its type
    if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
        raise AMLTypeError(f"ProbeResult.devices must be DeviceInfo objects, not {type(devices).__name__}")
    return tuple(devices)


def _check_devices(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, tuple):
        raise AMLTypeError(f"ProbeResult.devices must be a tuple, not {type(value).__name__}")
    for i, dev in enumerate(value):
        if not isinstance(dev, DeviceInfo):
            raise AMLTypeError(f"ProbeResult.devices[{i}] must be a DeviceInfo, not {type(dev).__name__}")


def _versions(mapping: Mapping[str, str]) -> Mapping[str, str]:
    given: object = mapping  # checked at run time whatever its type
    if not isinstance(given, Mapping):
        raise AMLTypeError(f"ProbeResult.versions must be a mapping, not {type(mapping).__name__}")
    return MappingProxyType(dict(mapping))


def _check_versions(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, Mapping):
        raise AMLTypeError(f"ProbeResult.versions must be a mapping, not {type(value).__name__}")
    for key, version in value.items():
        if not isinstance(key, str) or not isinstance(version, str):
            raise AMLTypeError(f"ProbeResult.versions must map str to str, got {key!r}: {version!r}")


def _check_type(kind: type) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, kind):
            raise AMLTypeError(
                f"ProbeResult.{attribute.name} must be {kind.__name__}, not {type(value).__name__}"
            )

    return check


def _kinds(values: Iterable[Kind | str] | Kind | str) -> frozenset[Kind]:
    """A kind, a kind's name, or several: the converter of ``BackendDescriptor.kinds``
    (a wrong type is refused by ``as_kind``, typed)."""
    if isinstance(values, (str, Kind)):
        values = [values]
    return frozenset(as_kind(v) for v in values)


@attrs.frozen
class ProbeResult:
    """The outcome of a probe: available or not, why, and what was found.

    Every field is type-checked (a wrong type raises :class:`AMLTypeError`); the
    registry checks again what a probe returns and reports the backend as broken when
    it is not a valid ProbeResult.
    """

    available: bool = attrs.field(validator=_check_type(bool))
    #: Why the backend is unavailable (shown by ``aml info``); for an available
    #: backend, put what was found in ``detail`` (a reason given there is read as detail).
    reason: str = attrs.field(default="", validator=_check_type(str))
    devices: tuple[DeviceInfo, ...] = attrs.field(converter=_devices, factory=tuple, validator=_check_devices)
    #: Capabilities found at probe time; combined with the descriptor's declared ones.
    capabilities: Capability = attrs.field(default=Capability.NONE, validator=_check_type(Capability))
    #: What an available backend found, in one line ("2 device(s), driver 580.1").
    detail: str = attrs.field(default="", validator=_check_type(str))
    #: Versions of the driver, runtime and bindings found ({"CUDA driver": "13.0"}).
    versions: Mapping[str, str] = attrs.field(factory=dict, converter=_versions, validator=_check_versions)

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


#: What ``BackendDescriptor.area_options`` takes: the names of the options of
#: ``aml_core.area(kind, device, **options)`` the backend's factory honours, for every kind
#: it provides (an iterable of names), or kind by kind (a mapping of a kind, or its name, to
#: names; a kind left out honours none).
AreaOptions = Iterable[str] | Mapping[Kind, Iterable[str]] | Mapping[str, Iterable[str]]


def _option_names(names: object) -> frozenset[str]:
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise AMLTypeError(f"area_options must name options (an iterable of str), not {type(names).__name__}")
    out = frozenset(names)
    for name in out:
        if not isinstance(name, str) or not name.isidentifier():
            raise AMLValueError(f"an area option is a keyword argument's name, not {name!r}")
    return out


def _area_options(value: AreaOptions | None) -> frozenset[str] | Mapping[Kind, frozenset[str]] | None:
    """The converter of ``BackendDescriptor.area_options``: None (not declared), the names
    for every kind, or a read-only mapping of each kind to its names."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return MappingProxyType({as_kind(kind): _option_names(names) for kind, names in value.items()})
    return _option_names(value)


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

    ``area_options`` declares the options of ``aml_core.area(kind, device, **options)``
    the factory honours (:data:`AreaOptions`: for every kind, or kind by kind). The
    registry then passes a request to this backend only when it honours every option
    given, and otherwise goes on to the next backend without probing this one; an option
    no candidate honours is :class:`~aml_core.errors.AMLTypeError`. None (the default):
    not declared, every request's options reach the factory, which refuses those it
    does not know (AMLTypeError).
    """

    name: str = attrs.field(validator=_check_name)
    priority: int = attrs.field(validator=_check_priority)
    kinds: frozenset[Kind] = attrs.field(converter=_kinds)
    probe: Callable[[], ProbeResult] = attrs.field(validator=_check_callable)
    create_area: Callable[..., Area] = attrs.field(validator=_check_callable)
    capabilities: Capability = Capability.NONE
    description: str = ""
    ipc_open: Callable[[Any], Buffer] | None = attrs.field(default=None, validator=_check_callable)
    area_options: frozenset[str] | Mapping[Kind, frozenset[str]] | None = attrs.field(
        default=None, converter=_area_options
    )

    def unhonoured(self, kind: Kind, options: Iterable[str]) -> tuple[str, ...]:
        """The names among ``options`` the factory does not honour for ``kind``, sorted
        (``()`` when it honours them all, or declared nothing: its factory decides)."""
        honoured = self.area_options
        if honoured is None:
            return ()
        if not isinstance(honoured, frozenset):
            honoured = honoured.get(kind, frozenset())
        return tuple(sorted(set(options) - honoured))
