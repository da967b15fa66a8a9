"""The registry: entry points, broken plugins, probe bounds, environment, ranking."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

import aml_core
from aml_core import Kind
from aml_core.errors import AMLNotSupported, AMLTypeError
from aml_core.host import HostArea
from aml_core.registry import Registry

from . import plugins as P


def _status(reg: Registry, name: str) -> aml_core.BackendStatus:
    return next(s for s in reg.statuses() if s.name == name)


def test_default_registry_lists_host_through_the_entry_point() -> None:
    statuses = aml_core.backends()
    host = next(s for s in statuses if s.name == "host")
    assert host.available
    assert host.distribution.startswith("aml-core")
    assert Kind.HOST in host.kinds
    assert host.devices
    assert aml_core.choose("host", backend="host").backend == "host"
    best = aml_core.choose("host").backend
    assert best is not None
    assert next(s for s in statuses if s.name == best).available


def test_ranking_is_by_priority_then_name(aml_registry: Registry) -> None:
    aml_registry.register(
        P.Plugin(P.descriptor("zeta", 5), P.descriptor("alpha", 5), P.descriptor("top", 9)), name="ranked"
    )
    assert [s.name for s in aml_registry.statuses()] == ["top", "alpha", "zeta"]
    assert aml_registry.choose("host").backend == "top"


def test_area_falls_through_not_supported(aml_registry: Registry) -> None:
    aml_registry.register(
        P.Plugin(P.descriptor("picky", 9, create=P.unsupported_create), P.descriptor("plain", 1)), name="p"
    )
    area = aml_registry.area(aml_core.AreaSpec("host"))
    assert isinstance(area, HostArea)
    area.close()


def test_area_lists_every_candidate_when_none_fits(aml_registry: Registry) -> None:
    aml_registry.register(
        P.Plugin(
            P.descriptor("gone", 9, probe=P.unavailable_probe),
            P.descriptor("picky", 5, create=P.unsupported_create),
            P.descriptor("hosty", 1),
        ),
        name="p",
    )
    with pytest.raises(AMLNotSupported) as info:
        aml_registry.area(aml_core.AreaSpec("device"))
    text = str(info.value)
    assert "gone: unavailable (no such hardware here)" in text
    assert "picky: does not provide device memory" in text
    assert "hosty: does not provide device memory" in text


def test_broken_plugins_are_reported_not_fatal(
    aml_registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AML_PROBE_TIMEOUT", "0.3")
    P.RELEASE_HANG.clear()
    aml_registry.register(P.RaisingHook(), name="raising_hook")
    aml_registry.register(P.WrongReturn(), name="wrong_return")
    aml_registry.register(
        P.Plugin(
            P.descriptor("probe_raises", 5, probe=P.raising_probe),
            P.descriptor("probe_hangs", 5, probe=P.hanging_probe),
            P.descriptor("probe_wrong", 5, probe=P.wrong_probe),
            P.descriptor("good", 1),
        ),
        name="mixed",
    )
    try:
        reasons = {s.name: s.reason for s in aml_registry.statuses()}
    finally:
        P.RELEASE_HANG.set()
    assert "the plugin's hook exploded" in reasons["raising_hook"]
    assert "not a BackendDescriptor" in reasons["wrong_return"]
    assert "driver crashed during probe" in reasons["probe_raises"]
    assert reasons["probe_hangs"] == "probe did not finish within 0.3 s"
    assert "not ProbeResult" in reasons["probe_wrong"]
    assert _status(aml_registry, "good").available


def test_duplicate_backend_names(aml_registry: Registry) -> None:
    aml_registry.register(P.Plugin(P.descriptor("same", 1)), name="first", distribution="dist-a")
    aml_registry.register(P.Plugin(P.descriptor("same", 2)), name="second", distribution="dist-b")
    statuses = [s for s in aml_registry.statuses() if s.name == "same"]
    assert len(statuses) == 2
    broken = next(s for s in statuses if not s.available)
    assert "duplicate backend name" in broken.reason
    assert "dist-a" in broken.reason


def test_area_creation_crash_propagates_as_is(aml_registry: Registry) -> None:
    aml_registry.register(P.Plugin(P.descriptor("crashy", 1, create=P.raising_create)), name="c")
    with pytest.raises(RuntimeError, match="area creation crashed"):
        aml_registry.area(aml_core.AreaSpec("host"))


def test_forced_backend(aml_registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    aml_registry.register(
        P.Plugin(
            P.descriptor("best", 9),
            P.descriptor("other", 1),
            P.descriptor("off", 5, probe=P.unavailable_probe),
        ),
        name="p",
    )
    monkeypatch.setenv("AML_BACKEND", "other")
    assert aml_registry.choose("host").backend == "other"
    monkeypatch.setenv("AML_BACKEND", "off")
    with pytest.raises(AMLNotSupported, match="no such hardware here"):
        aml_registry.area(aml_core.AreaSpec("host"))
    monkeypatch.setenv("AML_BACKEND", "nonexistent")
    with pytest.raises(AMLNotSupported, match="unknown backend 'nonexistent'"):
        aml_registry.area(aml_core.AreaSpec("host"))
    monkeypatch.delenv("AML_BACKEND")
    assert aml_registry.choose("host", backend="other").backend == "other"


def test_disabled_backends(aml_registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AML_DISABLE_BACKENDS", "best, spare")
    aml_registry.register(
        P.Plugin(P.descriptor("best", 9), P.descriptor("spare", 5), P.descriptor("last", 1)), name="p"
    )
    assert _status(aml_registry, "best").reason == "disabled by AML_DISABLE_BACKENDS"
    assert aml_registry.choose("host").backend == "last"


def test_bad_probe_timeout(aml_registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AML_PROBE_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="AML_PROBE_TIMEOUT"):
        aml_registry.statuses()


def test_entry_points_including_one_that_fails_to_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "good_plugin_mod.py").write_text(
        textwrap.dedent("""
        from tests.plugins import descriptor
        from aml_core import hookimpl

        @hookimpl
        def aml_backends():
            return [descriptor("from_entry_point", 3)]
    """)
    )
    (tmp_path / "bad_plugin_mod.py").write_text("raise ImportError('missing native dependency')\n")
    dist = tmp_path / "fake_aml_plugins-1.2.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-aml-plugins\nVersion: 1.2.3\n")
    (dist / "entry_points.txt").write_text(
        "[aml.test_backends]\ngoodone = good_plugin_mod\nbadone = bad_plugin_mod\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry(group="aml.test_backends", builtins=False)
    found = {s.name: s for s in reg.statuses()}
    assert found["from_entry_point"].available
    assert found["from_entry_point"].distribution == "fake-aml-plugins"
    assert found["from_entry_point"].version == "1.2.3"
    assert not found["badone"].available
    assert "import failed: ImportError: missing native dependency" in found["badone"].reason
    # Loaded once: a second call does not re-import.
    sys.modules.pop("good_plugin_mod", None)
    reg.statuses()
    assert "good_plugin_mod" not in sys.modules
    reg.reset()
    reg.statuses()
    assert "good_plugin_mod" in sys.modules


def test_descriptor_validation() -> None:
    with pytest.raises(ValueError, match="backend name"):
        P.descriptor("Bad Name", 1)
    with pytest.raises(AMLTypeError, match="priority"):
        P.descriptor("ok", "high")  # type: ignore[arg-type]
    with pytest.raises(AMLTypeError, match="callable"):
        P.descriptor("ok", 1, probe="not callable")


def test_area_function_bad_kind() -> None:
    with pytest.raises(ValueError, match="unknown memory kind 'gpu'"):
        aml_core.area("gpu")
    with pytest.raises(TypeError):
        aml_core.area(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        aml_core.area("host", device="0")  # type: ignore[arg-type]
