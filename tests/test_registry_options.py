"""The registry and the area options a backend declares (``BackendDescriptor.area_options``):
a backend lacking an option the caller gave is passed over, unprobed, for the next one; an
option no candidate honours is AMLTypeError, before any probe; a backend that declares
nothing gets every option, as before."""

from __future__ import annotations

from typing import Any

import pytest

import aml_core
from aml_core import BackendDescriptor, Kind
from aml_core.errors import AMLNotSupported, AMLTypeError, AMLValueError
from aml_core.host import HostArea
from aml_core.host import plugin as host_plugin
from aml_core.registry import Registry

from . import plugins as P


def _tracked(name: str, priority: int, probe: Any = None, **kw: Any) -> BackendDescriptor:
    """A test backend whose probe records that it ran (``P.STARTED``)."""
    return P.descriptor(name, priority, probe=P.tracking_probe(name, *(probe,) if probe else ()), **kw)


@pytest.fixture(autouse=True)
def _clear_started() -> None:
    P.STARTED.clear()


def test_a_backend_lacking_an_option_is_passed_over_unprobed(aml_registry: Registry) -> None:
    aml_registry.register(
        P.Plugin(
            _tracked("pinned", 9, area_options={"all_devices"}),
            _tracked("numa", 1, area_options={"policy", "nodes", "alignment"}),
        ),
        name="p",
    )
    with aml_registry.area(aml_core.AreaSpec("host", options={"alignment": 8192})) as area:
        assert isinstance(area, HostArea)
        assert area.alignment == 8192
    assert {"numa"} == P.STARTED  # the better-ranked backend that declined was never probed
    with aml_registry.area(aml_core.AreaSpec("host")) as area:  # no options: the best one
        assert isinstance(area, HostArea)
    assert {"numa", "pinned"} == P.STARTED


def test_options_no_backend_honours_are_a_type_error_before_any_probe(aml_registry: Registry) -> None:
    aml_registry.register(
        P.Plugin(
            _tracked("pinned", 9, area_options={"all_devices"}), _tracked("numa", 1, area_options={"nodes"})
        ),
        name="p",
    )
    with pytest.raises(AMLTypeError) as info:
        aml_registry.area(aml_core.AreaSpec("host", options={"colour": "blue"}))
    text = str(info.value)
    assert "unknown area option(s) ['colour'] of host memory" in text
    assert "pinned does not honour ['colour']" in text
    assert "numa does not honour ['colour']" in text
    # Honoured by one backend each but by none together: still no backend takes the request.
    with pytest.raises(AMLTypeError, match="no backend honours them all"):
        aml_registry.area(aml_core.AreaSpec("host", options={"all_devices": True, "nodes": [0]}))
    assert set() == P.STARTED


def test_a_forced_backend_lacking_an_option_is_a_type_error(aml_registry: Registry) -> None:
    aml_registry.register(
        P.Plugin(
            _tracked("pinned", 9, area_options={"all_devices"}), _tracked("numa", 1, area_options={"nodes"})
        ),
        name="p",
    )
    with pytest.raises(AMLTypeError, match=r"pinned does not honour \['nodes'\]"):
        aml_registry.area(aml_core.AreaSpec("host", backend="pinned", options={"nodes": [0]}))
    assert set() == P.STARTED


def test_options_are_declared_kind_by_kind(aml_registry: Registry) -> None:
    aml_registry.register(
        P.Plugin(
            _tracked(
                "gpu",
                9,
                kinds=(Kind.HOST, Kind.DEVICE),
                area_options={Kind.DEVICE: {"alignment"}, "host": ()},
            ),
            _tracked("numa", 1, area_options={"alignment"}),
        ),
        name="p",
    )
    assert aml_registry.descriptor("gpu").unhonoured(Kind.DEVICE, ["alignment"]) == ()
    assert aml_registry.descriptor("gpu").unhonoured(Kind.HOST, ["alignment", "nodes"]) == (
        "alignment",
        "nodes",
    )
    with aml_registry.area(aml_core.AreaSpec("host", options={"alignment": 8192})) as area:
        assert area.backend == "host"  # numa's HostArea: gpu honours alignment for device memory only
    assert {"numa"} == P.STARTED
    with aml_registry.area(aml_core.AreaSpec("device", options={"alignment": 8192})) as area:
        assert isinstance(area, HostArea)  # the test double makes host areas for every kind
    assert {"numa", "gpu"} == P.STARTED


def test_a_backend_that_declares_nothing_gets_every_option(aml_registry: Registry) -> None:
    aml_registry.register(
        P.Plugin(
            _tracked("declared", 9, area_options=()), _tracked("own", 1, create=host_plugin.create_area)
        ),
        name="p",
    )
    with pytest.raises(AMLValueError, match="alignment"):  # HostArea's own answer, from the factory
        aml_registry.area(aml_core.AreaSpec("host", options={"alignment": 3000}))
    with pytest.raises(AMLTypeError, match="bad host area option"):  # the factory's refusal
        aml_registry.area(aml_core.AreaSpec("host", options={"colour": "blue"}))
    assert {"own"} == P.STARTED


def test_the_reasons_name_the_declined_options(aml_registry: Registry) -> None:
    aml_registry.register(
        P.Plugin(
            _tracked("pinned", 9, area_options={"all_devices"}),
            _tracked("gone", 1, probe=P.unavailable_probe, area_options={"nodes"}),
        ),
        name="p",
    )
    with pytest.raises(AMLNotSupported) as info:
        aml_registry.area(aml_core.AreaSpec("host", options={"nodes": [0]}))
    text = str(info.value)
    assert "pinned: does not honour the area option(s) ['nodes'] of host memory" in text
    assert "gone: unavailable (no such hardware here)" in text


@pytest.mark.parametrize(
    ("declared", "error", "match"),
    [
        ("alignment", AMLTypeError, "an iterable of str"),
        (42, AMLTypeError, "not int"),
        ({"not a name"}, AMLValueError, "keyword argument's name"),
        ({Kind.HOST: "alignment"}, AMLTypeError, "an iterable of str"),
        ({"gpu": ["x"]}, AMLValueError, "unknown memory kind"),
    ],
)
def test_area_options_are_validated(declared: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        P.descriptor("ok", 1, area_options=declared)


def test_the_host_backend_declares_host_areas_keywords_and_memspace() -> None:
    """The host plugin's declaration is HostArea's keywords plus memspace= and near=, which
    create_area resolves to nodes= and policy= (so the registry never refuses what it takes)."""
    import inspect

    keywords = set(inspect.signature(HostArea).parameters)
    assert keywords | {"memspace", "near"} == host_plugin.AREA_OPTIONS
    (desc,) = host_plugin.aml_backends()
    assert desc.area_options == host_plugin.AREA_OPTIONS
