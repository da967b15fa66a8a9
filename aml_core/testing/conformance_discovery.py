"""The conformance checks of the backend as users reach it: its ``aml.backends`` entry
point and its factory (a part of :class:`~aml_core.testing.AreaConformance`)."""

from __future__ import annotations

from typing import ClassVar

import pytest

from ..area import Area
from ..errors import (
    AMLError,
    AMLNotSupported,
    AMLTypeError,
)

__all__ = ["DiscoveryChecks", "discovery_problem"]


def discovery_problem(backend: str) -> str:
    """What keeps ``backend`` from being found through an ``aml.backends`` entry point,
    and how to fix it; ``""`` when it is found."""
    from importlib import metadata

    from ..registry import ENTRY_POINT_GROUP, Registry

    try:
        found = Registry().plugin_of(backend)
    except AMLNotSupported as exc:
        return f"{exc}\n(fix the entry point {backend!r} of the group {ENTRY_POINT_GROUP!r})"
    if found is not None:
        return ""
    elsewhere = sorted(
        f"{ep.group}: {ep.name} = {ep.value}"
        for dist in metadata.distributions()
        for ep in dist.entry_points
        if ep.group != ENTRY_POINT_GROUP and ep.name == backend and "aml" in ep.group.lower()
    )
    hint = f" Found in another group (misspelt?): {'; '.join(elsewhere)}." if elsewhere else ""
    return (
        f"backend {backend!r} is not discoverable: no entry point of the group {ENTRY_POINT_GROUP!r} "
        f"declares it, so aml info and aml_core.area(backend={backend!r}) cannot find it.{hint} "
        f"Declare the module with the @aml_core.hookimpl aml_backends hook in pyproject.toml:\n"
        f'    [project.entry-points."{ENTRY_POINT_GROUP}"]\n'
        f'    {backend} = "<your_package>.plugin"\n'
        f"and install the distribution (pip install -e .)."
    )


class DiscoveryChecks:
    """The backend found through its entry point, its factory refusing unknown options.
    Needs a fixture ``area``."""

    #: Whether the area's backend is one the registry makes areas of (``aml_core.area``):
    #: the kit then checks its entry point and its factory. False for an area the
    #: registry does not make (a pool over another area, a test double).
    registered: ClassVar[bool] = True

    def test_backend_is_discoverable_through_its_entry_point(self, area: Area) -> None:
        """``aml info`` and ``aml_core.area(backend=...)`` find the backend through an
        entry point of the group ``aml.backends`` (not only a plugin registered by hand)."""
        if not self.registered:
            pytest.skip("registered = False: the registry does not make this area")
        problem = discovery_problem(area.backend)
        assert not problem, problem

    def test_factory_refuses_unknown_options(self, area: Area) -> None:
        """``aml_core.area(..., backend=<it>, <unknown option>=1)`` is AMLTypeError, passed
        through by the registry (not reported as a plugin failure, not passed on to
        another backend): the registry's own when the descriptor declares the options its
        factory honours (``BackendDescriptor.area_options``), else the factory's. And the
        factory itself, called directly with the option, refuses it with AMLTypeError
        (a caller of the backend's ``create_area``, or a descriptor that declares
        nothing, gets no check from the registry)."""
        from ..registry import Registry
        from ..specs import AreaSpec

        if not self.registered or discovery_problem(area.backend):
            pytest.skip("the backend is not found through its entry point (see the test above)")
        reg = Registry()
        try:
            reg.area(AreaSpec(area.kind, backend=area.backend)).close()
        except AMLError as exc:
            pytest.skip(f"the registry cannot make a {area.backend} area here: {exc}")
        options = {"aml_kit_no_such_option": 1}
        factory = reg.descriptor(area.backend).create_area

        def through_the_registry() -> Area:
            return reg.area(AreaSpec(area.kind, backend=area.backend, options=options))

        def through_the_factory() -> Area:
            return factory(area.kind, None, **options)

        for who, make in (("the registry", through_the_registry), ("the factory", through_the_factory)):
            try:
                made = make()
            except AMLTypeError:
                continue
            except AMLError as exc:
                pytest.fail(
                    f"an unknown area option must be AMLTypeError from {who}, got {type(exc).__name__}: "
                    f"{exc} (docs/backend-authoring.md, 'The factory')"
                )
            except TypeError as exc:
                pytest.fail(
                    f"an unknown area option must be AMLTypeError from {who}, got TypeError: {exc} "
                    "(docs/backend-authoring.md, 'The factory')"
                )
            made.close()
            pytest.fail(f"{who} accepted the unknown area option aml_kit_no_such_option=1")
