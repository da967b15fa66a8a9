"""Plugin objects for registry tests: well-behaved and broken ones."""

from __future__ import annotations

import threading
from typing import Any

from aml_core import BackendDescriptor, Capability, DeviceInfo, Kind, ProbeResult, hookimpl
from aml_core.errors import AMLNotSupported
from aml_core.host import HostArea

RELEASE_HANG = threading.Event()


def _ok_probe() -> ProbeResult:
    return ProbeResult(available=True, reason="fine", devices=(DeviceInfo(index=0, name="fake 0"),))


def _host_area(kind: Kind, device: int | None = None, **options: Any) -> HostArea:
    return HostArea(**options)


def descriptor(
    name: str,
    priority: int,
    probe: Any = _ok_probe,
    create: Any = _host_area,
    kinds: Any = (Kind.HOST,),
    area_options: Any = None,
) -> BackendDescriptor:
    return BackendDescriptor(
        name=name,
        priority=priority,
        kinds=kinds,
        probe=probe,
        create_area=create,
        capabilities=Capability.BUFFER_PROTOCOL,
        description=f"test backend {name}",
        area_options=area_options,
    )


class Plugin:
    """A plugin object providing the given descriptors."""

    def __init__(self, *descs: BackendDescriptor) -> None:
        self.descs = list(descs)

    @hookimpl
    def aml_backends(self) -> list[BackendDescriptor]:
        return self.descs


class RaisingHook:
    @hookimpl
    def aml_backends(self) -> list[BackendDescriptor]:
        raise RuntimeError("the plugin's hook exploded")


class WrongReturn:
    @hookimpl
    def aml_backends(self) -> Any:
        return ["not a descriptor"]


def raising_probe() -> ProbeResult:
    raise OSError("driver crashed during probe")


def hanging_probe() -> ProbeResult:
    RELEASE_HANG.wait(30)
    return ProbeResult(available=True)


def wrong_probe() -> Any:
    return True


def unavailable_probe() -> ProbeResult:
    return ProbeResult.unavailable("no such hardware here")


def raising_create(kind: Kind, device: int | None = None, **options: Any) -> Any:
    raise RuntimeError("area creation crashed")


def unsupported_create(kind: Kind, device: int | None = None, **options: Any) -> Any:
    raise AMLNotSupported("this configuration is not supported")


STARTED: set[str] = set()


def tracking_probe(name: str, probe: Any = _ok_probe) -> Any:
    """A probe that records that it was started (in STARTED) before running ``probe``."""

    def run() -> ProbeResult:
        STARTED.add(name)
        result: ProbeResult = probe()
        return result

    return run


def none_create(kind: Kind, device: int | None = None, **options: Any) -> Any:
    return None


def junk_types_probe() -> ProbeResult:
    result = ProbeResult(available=True)
    object.__setattr__(result, "capabilities", "huge_pages")  # bypasses the validators
    return result


def junk_devices_probe() -> ProbeResult:
    return ProbeResult(available=True, devices=["x"])


class NoHook:
    """A plugin object without an ``aml_backends`` hook."""

    def aml_backend(self) -> list[BackendDescriptor]:  # misspelt: not a hook
        return []
