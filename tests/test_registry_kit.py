"""The conformance kit's registry checks catch the authoring traps: a backend without
an entry point (or with a misspelt group, or an entry point naming the hook function),
and a factory that lets Python's TypeError out for an unknown option. And the registry
passes a factory's aml errors through unchanged, without trying another backend."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import aml_core
from aml_core import Kind
from aml_core.errors import AMLTypeError
from aml_core.registry import Registry
from aml_core.testing import AreaConformance

from . import plugins as P

MODULE = """
from aml_core import BackendDescriptor, Kind, ProbeResult, hookimpl
from aml_core.errors import AMLTypeError
from aml_core.host import HostArea

def probe():
    return ProbeResult(available=True, detail="fine")

def typo_create(kind, device=None, **options):
    return HostArea(**options)

def strict_create(kind, device=None, **options):
    if options:
        raise AMLTypeError(f"unknown kitfake area option(s) {{sorted(options)}}")
    return HostArea()

@hookimpl
def aml_backends():
    return [BackendDescriptor(name="kitfake", priority=-50, kinds={{Kind.HOST}}, probe=probe,
                              create_area={create}, area_options={declared})]
"""


class Kit(AreaConformance):
    pass


AREA = SimpleNamespace(backend="kitfake", kind=Kind.HOST)


def _install(
    root: Path, group: str, entry: str, create: str = "strict_create", declared: str = "None"
) -> None:
    (root / "kit_fake_mod.py").write_text(MODULE.format(create=create, declared=declared))
    info = root / "kit_fake-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: kit-fake\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entry}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delitem(sys.modules, "kit_fake_mod", raising=False)  # each test's own module
    monkeypatch.delenv("AML_BACKEND", raising=False)
    monkeypatch.delenv("AML_DISABLE_BACKENDS", raising=False)
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def test_kit_fails_without_an_entry_point(site: Path) -> None:
    (site / "kit_fake_mod.py").write_text(MODULE.format(create="strict_create", declared="None"))
    with pytest.raises(AssertionError) as info:
        Kit().test_backend_is_discoverable_through_its_entry_point(AREA)  # type: ignore[arg-type]
    text = str(info.value)
    assert "backend 'kitfake' is not discoverable: no entry point of the group 'aml.backends'" in text
    assert '[project.entry-points."aml.backends"]' in text
    assert 'kitfake = "<your_package>.plugin"' in text
    assert "pip install -e ." in text


def test_kit_names_a_misspelt_group(site: Path) -> None:
    _install(site, "aml.backend", "kitfake = kit_fake_mod")
    with pytest.raises(
        AssertionError, match=r"another group \(misspelt\?\): aml.backend: kitfake = kit_fake_mod"
    ):
        Kit().test_backend_is_discoverable_through_its_entry_point(AREA)  # type: ignore[arg-type]


def test_kit_says_the_entry_point_names_the_function(site: Path) -> None:
    _install(site, "aml.backends", "kitfake = kit_fake_mod:aml_backends")
    with pytest.raises(AssertionError) as info:
        Kit().test_backend_is_discoverable_through_its_entry_point(AREA)  # type: ignore[arg-type]
    assert "the entry point names the function 'kit_fake_mod:aml_backends', not the module" in str(info.value)
    assert "write kitfake = 'kit_fake_mod'" in str(info.value)


def test_kit_passes_an_installed_backend_with_a_strict_factory(site: Path) -> None:
    _install(site, "aml.backends", "kitfake = kit_fake_mod")
    Kit().test_backend_is_discoverable_through_its_entry_point(AREA)  # type: ignore[arg-type]
    Kit().test_factory_refuses_unknown_options(AREA)  # type: ignore[arg-type]


def test_kit_fails_a_factory_that_lets_type_error_out(site: Path) -> None:
    _install(site, "aml.backends", "kitfake = kit_fake_mod", create="typo_create")
    with pytest.raises(pytest.fail.Exception) as info:
        Kit().test_factory_refuses_unknown_options(AREA)  # type: ignore[arg-type]
    text = str(info.value)
    assert "an unknown area option must be AMLTypeError from the registry, got AMLNotSupported" in text
    assert "create_area of plugin kit-fake:kitfake failed: TypeError" in text


def test_kit_fails_a_declared_factory_that_lets_type_error_out(site: Path) -> None:
    """With its options declared the registry refuses the unknown one itself; the kit still
    calls the factory, which must refuse it too (a direct caller gets no registry check)."""
    _install(site, "aml.backends", "kitfake = kit_fake_mod", create="typo_create", declared="()")
    with pytest.raises(AMLTypeError, match="unknown area option"):
        Registry().area(aml_core.AreaSpec("host", backend="kitfake", options={"aml_kit_no_such_option": 1}))
    with pytest.raises(pytest.fail.Exception) as info:
        Kit().test_factory_refuses_unknown_options(AREA)  # type: ignore[arg-type]
    assert "must be AMLTypeError from the factory, got TypeError" in str(info.value)


def test_kit_passes_a_declared_strict_factory(site: Path) -> None:
    _install(site, "aml.backends", "kitfake = kit_fake_mod", declared="()")
    Kit().test_factory_refuses_unknown_options(AREA)  # type: ignore[arg-type]


def test_a_factory_aml_error_reaches_the_caller_and_stops_the_search(aml_registry: Registry) -> None:
    def strict(kind: Kind, device: int | None = None, **options: object) -> object:
        raise AMLTypeError(f"unknown strict area option(s) {sorted(options)}")

    P.STARTED.clear()
    aml_registry.register(
        P.Plugin(
            P.descriptor("strict", 9, create=strict),
            P.descriptor("fallback", 1, probe=P.tracking_probe("fallback")),
        ),
        name="p",
    )
    with pytest.raises(AMLTypeError, match=r"unknown strict area option\(s\) \['bogus'\]") as info:
        aml_registry.area(aml_core.AreaSpec("host", options={"bogus": 1}))
    assert type(info.value) is AMLTypeError  # unchanged: not wrapped in a plugin failure
    assert "fallback" not in P.STARTED  # the next backend was not even probed


def test_host_factory_refuses_unknown_options_through_the_kit() -> None:
    Kit().test_factory_refuses_unknown_options(SimpleNamespace(backend="host", kind=Kind.HOST))  # type: ignore[arg-type]
