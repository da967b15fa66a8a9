"""The registry: entry points, broken plugins, probe bounds, environment, ranking."""

from __future__ import annotations

import importlib.metadata
import os
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import aml_core
from aml_core import Capability, Kind
from aml_core.errors import AMLNotSupported, AMLTypeError, AMLValueError
from aml_core.host import HostArea
from aml_core.registry import (
    DEFAULT_INFO_TIMEOUT,
    DEFAULT_PROBE_TIMEOUT,
    MAX_PROBE_TIMEOUT,
    AMLConfigWarning,
    Registry,
    Settings,
    settings,
)

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
            P.descriptor("gone", 9, probe=P.unavailable_probe, kinds=(Kind.DEVICE,)),
            P.descriptor("picky", 5, create=P.unsupported_create, kinds=(Kind.DEVICE,)),
            P.descriptor("hosty", 1),
        ),
        name="p",
    )
    with pytest.raises(AMLNotSupported) as info:
        aml_registry.area(aml_core.AreaSpec("device"))
    text = str(info.value)
    assert "gone: unavailable (no such hardware here)" in text
    assert "picky: this configuration is not supported" in text
    assert "hosty: does not provide device memory (provides host)" in text


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
    # The wording of a timed-out probe changed on purpose (was "probe did not finish within").
    assert reasons["probe_hangs"] == "probe timed out after 0.3 s"
    assert reasons["probe_wrong"] == "probe returned an invalid result: bool, not a ProbeResult"
    states = {s.name: s.state for s in aml_registry.statuses()}
    assert {states[n] for n in ("raising_hook", "wrong_return", "probe_raises", "probe_hangs")} == {"broken"}
    assert _status(aml_registry, "raising_hook").priority is None
    assert _status(aml_registry, "probe_hangs").priority == 5
    assert _status(aml_registry, "good").available


def test_duplicate_backend_names_highest_priority_wins(aml_registry: Registry) -> None:
    aml_registry.register(P.Plugin(P.descriptor("same", 1)), name="first", distribution="dist-a")
    aml_registry.register(P.Plugin(P.descriptor("same", 2)), name="second", distribution="dist-b")
    statuses = [s for s in aml_registry.statuses() if s.name == "same"]
    assert [(s.priority, s.state, s.distribution) for s in statuses] == [
        (2, "available", "dist-b"),
        (1, "shadowed", "dist-a"),
    ]
    assert statuses[1].shadowed_by == "dist-b:second (priority 2)"
    assert statuses[1].reason == "shadowed by dist-b:second (priority 2)"
    assert aml_registry.descriptor("same").priority == 2
    assert aml_registry.status("same").distribution == "dist-b"


def test_duplicate_backend_names_tie_goes_to_the_distribution_name(aml_registry: Registry) -> None:
    # Registered in the "wrong" order: the rule does not depend on the order.
    aml_registry.register(P.Plugin(P.descriptor("same", 3)), name="zz", distribution="dist-b")
    aml_registry.register(P.Plugin(P.descriptor("same", 3)), name="aa", distribution="dist-a")
    winner = aml_registry.status("same")
    assert (winner.distribution, winner.plugin) == ("dist-a", "aa")
    (loser,) = [s for s in aml_registry.statuses() if s.state == "shadowed"]
    assert (loser.distribution, loser.priority, loser.shadowed_by) == ("dist-b", 3, "dist-a:aa (priority 3)")


def test_shadowed_backend_is_never_probed(aml_registry: Registry) -> None:
    P.STARTED.clear()
    aml_registry.register(
        P.Plugin(P.descriptor("same", 1, probe=P.tracking_probe("loser"))), name="lo", distribution="x"
    )
    aml_registry.register(
        P.Plugin(P.descriptor("same", 5, probe=P.tracking_probe("winner"))), name="hi", distribution="y"
    )
    aml_registry.statuses()
    assert {"winner"} == P.STARTED


def test_area_factory_exception_is_contained(aml_registry: Registry) -> None:
    aml_registry.register(
        P.Plugin(P.descriptor("crashy", 9, create=P.raising_create), P.descriptor("fallback", 1)),
        name="c",
        distribution="dist-c",
    )
    area = aml_registry.area(aml_core.AreaSpec("host"))
    assert isinstance(area, HostArea)
    area.close()


def test_area_factory_failures_are_all_listed(aml_registry: Registry) -> None:
    aml_registry.register(
        P.Plugin(
            P.descriptor("crashy", 9, create=P.raising_create),
            P.descriptor("nothing", 5, create=P.none_create),
        ),
        name="c",
        distribution="dist-c",
    )
    with pytest.raises(AMLNotSupported) as info:
        aml_registry.area(aml_core.AreaSpec("host"))
    text = str(info.value)
    assert "crashy: create_area of plugin dist-c:c failed: RuntimeError: area creation crashed" in text
    assert "nothing: create_area of plugin dist-c:c returned NoneType, not an Area" in text
    assert isinstance(info.value.__cause__, RuntimeError)


def test_area_factory_returning_none_is_an_error(aml_registry: Registry) -> None:
    aml_registry.register(P.Plugin(P.descriptor("nothing", 1, create=P.none_create)), name="n")
    with pytest.raises(AMLNotSupported, match="create_area of plugin n returned NoneType, not an Area"):
        aml_registry.area(aml_core.AreaSpec("host"))


def test_aml_errors_of_a_factory_reach_the_caller(aml_registry: Registry) -> None:
    aml_registry.register(P.Plugin(P.descriptor("strict", 1)), name="s")
    with pytest.raises(AMLValueError, match="alignment"):  # HostArea's answer, not contained
        aml_registry.area(aml_core.AreaSpec("host", options={"alignment": 3000}))


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


@pytest.mark.parametrize("backend", [42, b"host", ["host"]])
def test_a_backend_of_the_wrong_type_is_a_type_error(backend: object) -> None:
    # A wrong type is AMLTypeError at every entry point; an empty name is a bad value.
    with pytest.raises(AMLTypeError, match=f"backend must be a backend name .*not {type(backend).__name__}"):
        aml_core.area("host", backend=backend)  # type: ignore[arg-type]
    with pytest.raises(AMLTypeError, match="backend must be"):
        aml_core.AreaSpec("host", backend=backend)  # type: ignore[arg-type]
    with pytest.raises(AMLValueError, match="non-empty backend name"):
        aml_core.area("host", backend="")


def test_disabled_backends(aml_registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AML_DISABLE_BACKENDS", "best, spare")
    aml_registry.register(
        P.Plugin(P.descriptor("best", 9), P.descriptor("spare", 5), P.descriptor("last", 1)), name="p"
    )
    assert _status(aml_registry, "best").reason == "disabled by AML_DISABLE_BACKENDS"
    assert aml_registry.choose("host").backend == "last"


@pytest.mark.parametrize("raw", ["soon", "inf", "-inf", "nan", "-1", "0", "1e400"])
def test_bad_probe_timeout_warns_and_uses_the_default(
    aml_registry: Registry, monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("AML_PROBE_TIMEOUT", raw)
    aml_registry.register(P.Plugin(P.descriptor("good", 1)), name="p")
    cfg = settings()
    assert cfg.timeout == DEFAULT_PROBE_TIMEOUT
    assert "AML_PROBE_TIMEOUT" in cfg.warnings[0]
    with pytest.warns(AMLConfigWarning, match="AML_PROBE_TIMEOUT"):
        Registry(group="aml.backends.__isolated_for_tests__").warnings()
    assert _status(aml_registry, "good").available


@pytest.mark.parametrize("raw", ["soon", "inf", "nan", "-1", "0"])
def test_bad_info_timeout_warns_and_uses_the_default(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("AML_INFO_TIMEOUT", raw)
    cfg = settings()
    assert (cfg.info_timeout, cfg.timeout) == (DEFAULT_INFO_TIMEOUT, DEFAULT_PROBE_TIMEOUT)
    assert cfg.warnings == (
        f"AML_INFO_TIMEOUT={raw!r} is not a positive, finite number of seconds; using 60 s",
    )
    monkeypatch.setenv("AML_INFO_TIMEOUT", "1e308")
    assert settings().info_timeout == MAX_PROBE_TIMEOUT
    monkeypatch.setenv("AML_INFO_TIMEOUT", "2.5")
    assert settings() == Settings(
        forced=None,
        disabled=frozenset(),
        timeout=DEFAULT_PROBE_TIMEOUT,
        info_timeout=2.5,
        info_timeout_given=True,
    )


def test_huge_probe_timeout_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AML_PROBE_TIMEOUT", "1e308")
    cfg = settings()
    assert cfg.timeout == MAX_PROBE_TIMEOUT
    assert "above 3600 s" in cfg.warnings[0]
    monkeypatch.setenv("AML_PROBE_TIMEOUT", "0.25")
    assert settings() == Settings(forced=None, disabled=frozenset(), timeout=0.25)


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
    assert (found["badone"].state, found["badone"].priority) == ("broken", None)
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


# -- probing only what is needed ---------------------------------------------------------------
def _hang_then(monkeypatch: pytest.MonkeyPatch, timeout: str = "3") -> None:
    monkeypatch.setenv("AML_PROBE_TIMEOUT", timeout)
    P.RELEASE_HANG.clear()
    P.STARTED.clear()


@pytest.mark.parametrize("how", ["env", "argument"])
def test_forcing_a_backend_probes_only_that_backend(
    aml_registry: Registry, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    _hang_then(monkeypatch)
    aml_registry.register(
        P.Plugin(
            P.descriptor("hangs", 9, probe=P.tracking_probe("hangs", P.hanging_probe)),
            P.descriptor("memfd", 1, probe=P.tracking_probe("memfd")),
        ),
        name="p",
    )
    start = time.monotonic()
    try:
        if how == "env":
            monkeypatch.setenv("AML_BACKEND", "memfd")
            area = aml_registry.area(aml_core.AreaSpec("host"))
        else:
            area = aml_registry.area(aml_core.AreaSpec("host", backend="memfd"))
        area.close()
        assert aml_registry.choose("host", backend="memfd").backend == "memfd"
    finally:
        P.RELEASE_HANG.set()
    assert time.monotonic() - start < 2.0
    assert {"memfd"} == P.STARTED


def test_area_does_not_wait_for_a_probe_of_another_kind(
    aml_registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hang_then(monkeypatch)
    aml_registry.register(
        P.Plugin(
            P.descriptor("gpu", 9, probe=P.tracking_probe("gpu", P.hanging_probe), kinds=(Kind.DEVICE,)),
            P.descriptor("plain", 1, probe=P.tracking_probe("plain")),
        ),
        name="p",
    )
    start = time.monotonic()
    try:
        aml_registry.area(aml_core.AreaSpec("host")).close()
    finally:
        P.RELEASE_HANG.set()
    assert time.monotonic() - start < 2.0
    assert {"plain"} == P.STARTED


def test_area_does_not_wait_for_lower_ranked_probes(
    aml_registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hang_then(monkeypatch)
    aml_registry.register(
        P.Plugin(
            P.descriptor("best", 9, probe=P.tracking_probe("best")),
            P.descriptor("slow", 1, probe=P.tracking_probe("slow", P.hanging_probe)),
        ),
        name="p",
    )
    start = time.monotonic()
    try:
        with aml_registry.area(aml_core.AreaSpec("host")) as area:
            assert isinstance(area, HostArea)
        assert aml_registry.choose("host").backend == "best"
    finally:
        P.RELEASE_HANG.set()
    assert time.monotonic() - start < 2.0
    assert {"best"} == P.STARTED


def test_area_tries_the_next_candidate_after_a_timed_out_probe(
    aml_registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hang_then(monkeypatch, "0.2")
    aml_registry.register(
        P.Plugin(P.descriptor("slow", 9, probe=P.hanging_probe), P.descriptor("next", 1)), name="p"
    )
    try:
        aml_registry.area(aml_core.AreaSpec("host")).close()
        choice = aml_registry.choose("host")
    finally:
        P.RELEASE_HANG.set()
    assert choice.backend == "next"
    assert choice.rejected == (("slow", "broken (probe timed out after 0.2 s)"),)


# -- probe results are validated ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("probe", "reason"),
    [
        (P.wrong_probe, "probe returned an invalid result: bool, not a ProbeResult"),
        (
            P.junk_types_probe,
            "probe returned an invalid result: ProbeResult.capabilities must be Capability, not str",
        ),
        (
            P.junk_devices_probe,
            "probe failed: AMLTypeError: ProbeResult.devices[0] must be a DeviceInfo, not str",
        ),
    ],
    ids=["not-a-result", "capabilities-str", "devices-str"],
)
def test_junk_probe_results_make_the_backend_broken(aml_registry: Registry, probe: Any, reason: str) -> None:
    aml_registry.register(P.Plugin(P.descriptor("junk", 1, probe=probe), P.descriptor("good", 0)), name="p")
    junk = _status(aml_registry, "junk")
    assert (junk.state, junk.available, junk.reason) == ("broken", False, reason)
    assert aml_registry.choose("host").backend == "good"


def test_probe_result_and_device_info_validate_their_fields() -> None:
    with pytest.raises(AMLTypeError, match="capabilities must be Capability"):
        aml_core.ProbeResult(available=True, capabilities="numa")  # type: ignore[arg-type]
    with pytest.raises(AMLTypeError, match="devices must be DeviceInfo objects, not str"):
        aml_core.ProbeResult(available=True, devices="x")  # type: ignore[arg-type]
    with pytest.raises(AMLTypeError, match="available must be bool"):
        aml_core.ProbeResult(available=1)  # type: ignore[arg-type]
    with pytest.raises(AMLTypeError, match="versions must map str to str"):
        aml_core.ProbeResult(available=True, versions={"driver": 13})  # type: ignore[dict-item]
    with pytest.raises(AMLValueError, match="free_memory must be an integer >= 0"):
        aml_core.DeviceInfo(index=0, name="x", free_memory=-1)
    assert aml_core.DeviceInfo(index=0, name="x").free_memory is None
    result = aml_core.ProbeResult(available=True, detail="ok", versions={"driver": "13.0"})
    assert dict(result.versions) == {"driver": "13.0"}


def test_available_probe_reason_is_read_as_detail(aml_registry: Registry) -> None:
    aml_registry.register(P.Plugin(P.descriptor("old_style", 1)), name="p")  # reason="fine", available
    st = _status(aml_registry, "old_style")
    assert (st.reason, st.detail) == ("", "fine")
    data = st.to_json()
    assert data["reason"] is None
    assert data["detail"] == "fine"


def test_plugin_without_hook_is_reported(aml_registry: Registry) -> None:
    aml_registry.register(P.NoHook(), name="nohook")
    st = _status(aml_registry, "nohook")
    assert st.state == "broken"
    assert st.priority is None
    assert "defines no aml_backends hook" in st.reason


# -- in-process plugins: aml_core.register / unregister ---------------------------------------------
def test_register_and_unregister_in_process_plugins() -> None:
    aml_core.register(P.Plugin(P.descriptor("inproc", 7)), name="inproc_plugin")
    try:
        st = next(s for s in aml_core.backends() if s.name == "inproc")
        assert (st.available, st.plugin, st.priority) == (True, "inproc_plugin", 7)
        with pytest.raises(AMLValueError, match="already registered"):
            aml_core.register(P.Plugin(), name="inproc_plugin")
        with aml_core.area(kind="host", backend="inproc") as area:
            assert isinstance(area, HostArea)
    finally:
        aml_core.unregister("inproc_plugin")
    assert "inproc" not in {s.name for s in aml_core.backends()}
    with pytest.raises(AMLValueError, match="no plugin named 'inproc_plugin'"):
        aml_core.unregister("inproc_plugin")


def test_registered_plugins_are_blocked_through_pluggy(
    aml_registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AML_DISABLE_BACKENDS", ",,blocked,,")
    aml_registry.register(P.Plugin(P.descriptor("inside", 5)), name="blocked")
    aml_registry.register(P.Plugin(P.descriptor("other", 1)), name="open")
    st = _status(aml_registry, "blocked")
    assert (st.state, st.priority, st.reason) == ("disabled", None, "disabled by AML_DISABLE_BACKENDS")
    assert "inside" not in {s.name for s in aml_registry.statuses()}
    assert aml_registry.choose("host").backend == "other"


# -- versions ------------------------------------------------------------------------------------------
def test_version_comes_from_the_distribution_metadata() -> None:
    assert aml_core.__version__ == importlib.metadata.version("aml-core")
    host = next(s for s in aml_core.backends() if s.name == "host")
    assert host.version == aml_core.__version__
    assert host.versions["Linux"] == os.uname().release


def test_gpu_probe_reports_runtime_versions() -> None:
    from aml_core.gpu.backend import GpuBackend

    class FakeRuntime:
        traits = SimpleNamespace(versions={"cuda-bindings": "13.3.1", "driver API": "13.0"})

        def device_count(self) -> int:
            return 1

        def device_info(self, index: int) -> aml_core.DeviceInfo:
            return aml_core.DeviceInfo(index=index, name="fake", total_memory=1 << 30, free_memory=1 << 29)

    result = GpuBackend("fake", FakeRuntime).probe()  # type: ignore[arg-type]
    assert result.available
    assert dict(result.versions) == {"cuda-bindings": "13.3.1", "driver API": "13.0"}
    assert result.detail == "1 device(s)"  # the versions are in versions, not repeated here

    class NoDevice(FakeRuntime):
        def device_count(self) -> int:
            return 0

    result = GpuBackend("fake", NoDevice).probe()  # type: ignore[arg-type]
    assert (result.available, result.reason) == (False, "no fake device found")
    assert dict(result.versions) == {"cuda-bindings": "13.3.1", "driver API": "13.0"}  # found all the same


# -- the host probe -----------------------------------------------------------------------------------
def test_host_probe_reports_nodes_and_claims_huge_pages_only_when_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aml_core.host import plugin as host

    monkeypatch.setattr(host, "huge_pages", lambda root=host.HUGEPAGES_ROOT: {2 << 20: 0, 1 << 30: 0})
    result = host.probe()
    assert Capability.HUGE_PAGES not in result.capabilities
    assert "huge pages: 2 MiB x 0, 1 GiB x 0" in result.detail
    node = result.devices[0]
    assert node.total_memory > 0
    assert node.free_memory is not None
    assert 0 <= node.free_memory <= node.total_memory
    assert node.details["cpus"]
    monkeypatch.setattr(host, "huge_pages", lambda root=host.HUGEPAGES_ROOT: {2 << 20: 16, 1 << 30: 0})
    result = host.probe()
    assert Capability.HUGE_PAGES in result.capabilities
    assert "2 MiB x 16" in result.detail
    assert Capability.HUGE_PAGES not in host.aml_backends()[0].capabilities


def test_huge_pages_are_read_from_sysfs(tmp_path: Path) -> None:
    from aml_core.host import plugin as host

    for name, count in (("hugepages-2048kB", "8\n"), ("hugepages-1048576kB", "0\n"), ("junk", "x")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "nr_hugepages").write_text(count)
    assert host.huge_pages(str(tmp_path)) == {2 << 20: 8, 1 << 30: 0}
    assert host.huge_pages(str(tmp_path / "missing")) == {}
    assert host.describe_huge_pages({}) == "none"


def test_disabled_entry_point_is_blocked_in_pluggy_and_not_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "blocked_plugin_mod.py").write_text("raise SystemExit('imported although blocked')\n")
    dist = tmp_path / "blocked_aml_plugin-2.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: blocked-aml-plugin\nVersion: 2.0\n")
    (dist / "entry_points.txt").write_text("[aml.blocked_backends]\nblockme = blocked_plugin_mod\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("AML_DISABLE_BACKENDS", "blockme")
    reg = Registry(group="aml.blocked_backends")
    (st,) = reg.statuses()
    assert (st.name, st.state, st.priority, st.version) == ("blockme", "disabled", None, "2.0")
    assert "blocked_plugin_mod" not in sys.modules
    assert reg.warnings() == ()
    monkeypatch.setenv("AML_DISABLE_BACKENDS", "")
    (st,) = reg.statuses()  # the environment changed: plugins are loaded again
    assert st.state == "broken"
    assert "import failed: SystemExit: imported although blocked" in st.reason


def test_missing_core_entry_points_are_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    reg = Registry(group="aml.backends.__nothing_installed__")
    assert reg.warnings() == ()  # another group: no host backend expected
    monkeypatch.setattr(importlib.metadata, "distributions", lambda: [])  # what pluggy walks
    reg = Registry()
    assert reg.statuses() == ()
    (note,) = reg.warnings()
    assert "there is no host backend" in note


def test_version_falls_back_to_pyproject_in_an_uninstalled_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    if not (Path(aml_core.__file__).resolve().parent.parent / "pyproject.toml").exists():
        pytest.skip("aml_core is imported from an installed copy, not from a source tree")
    monkeypatch.setattr(importlib.metadata, "version", missing)
    installed = importlib.metadata.distribution("aml-core").version
    assert aml_core._version() == f"{installed}+source"
