"""The registry is one long-lived pluggy PluginManager: entry points through pluggy's
loader, hooks through ``pm.hook`` (tracing, monitoring and wrappers see them), blocking
for AML_DISABLE_BACKENDS; and ``aml_core.backends()`` in its documented order."""

from __future__ import annotations

import textwrap
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pluggy
import pytest

import aml_core
from aml_core import Kind, hookimpl
from aml_core.registry import PluginManager, Registry

from . import plugins as P


def test_one_plugin_manager_for_the_registry_life(
    aml_registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    pm = aml_registry.pm
    assert isinstance(pm, PluginManager)
    assert isinstance(pm, pluggy.PluginManager)
    aml_registry.register(P.Plugin(P.descriptor("one", 1)), name="first")
    aml_registry.statuses()
    assert pm.has_plugin("first")
    monkeypatch.setenv("AML_DISABLE_BACKENDS", "first")
    aml_registry.statuses()  # the environment changed: reloaded in the same manager, blocked there
    assert aml_registry.pm is pm
    assert pm.is_blocked("first")
    assert not pm.has_plugin("first") or pm.get_plugin("first") is None
    monkeypatch.delenv("AML_DISABLE_BACKENDS")
    assert aml_registry.status("one").available  # unblocked again
    assert not pm.is_blocked("first")
    aml_registry.reset()
    aml_registry.statuses()
    assert aml_registry.pm is pm


def test_pluggy_tracing_sees_every_hook_call(aml_registry: Registry) -> None:
    lines: list[str] = []
    aml_registry.pm.trace.root.setwriter(lines.append)
    undo = aml_registry.pm.enable_tracing()
    try:
        aml_registry.register(P.Plugin(P.descriptor("a", 1)), name="pa")
        aml_registry.register(P.RaisingHook(), name="pb")
        aml_registry.statuses()
    finally:
        undo()
    calls = [line for line in lines if "aml_backends" in line]
    assert len([c for c in calls if "finish" not in c]) == 2, lines  # one call per plugin
    assert any("finish" in c for c in calls), lines


class _Wrapper:
    """A hook wrapper (an observer plugin): sees each plugin's call, declares nothing."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    @hookimpl(wrapper=True)
    def aml_backends(self) -> Generator[None, list[Any], list[Any]]:
        result = yield
        self.seen.append(len(result))
        return result


def test_hook_wrappers_of_other_plugins_apply(aml_registry: Registry) -> None:
    wrapper = _Wrapper()
    aml_registry.register(wrapper, name="observer")
    aml_registry.register(P.Plugin(P.descriptor("a", 1), P.descriptor("b", 2)), name="pa")
    names = {s.name for s in aml_registry.statuses()}
    assert names == {"a", "b"}  # the observer declares no backend and is not broken
    assert 1 in wrapper.seen  # it wrapped pa's call (one result: pa's list)


def test_hook_returning_none_is_broken(aml_registry: Registry) -> None:
    class ReturnsNone:
        @hookimpl
        def aml_backends(self) -> Any:
            return None

    aml_registry.register(ReturnsNone(), name="none")
    st = aml_registry.status("none")
    assert (st.state, st.reason) == (
        "broken",
        "aml_backends() failed: TypeError: "
        "aml_backends() must return BackendDescriptor objects, got NoneType",
    )


def test_backends_order_available_first_then_priority_then_name(aml_registry: Registry) -> None:
    aml_registry.register(
        P.Plugin(
            P.descriptor("gone", 90, probe=P.unavailable_probe),
            P.descriptor("crashy", 80, probe=P.raising_probe),
            P.descriptor("zeta", 5),
            P.descriptor("alpha", 5),
            P.descriptor("low", -10),
            P.descriptor("gone_too", 5, probe=P.unavailable_probe),
        ),
        name="p",
    )
    aml_registry.register(P.RaisingHook(), name="no_priority")
    order = [(s.name, s.available, s.priority) for s in aml_registry.statuses()]
    assert order == [
        ("alpha", True, 5),
        ("zeta", True, 5),
        ("low", True, -10),
        ("gone", False, 90),
        ("crashy", False, 80),
        ("gone_too", False, 5),
        ("no_priority", False, None),
    ]
    # area() still tries by priority: the unavailable ones ranked above were rejected first.
    choice = aml_registry.choose("host")
    assert choice.backend == "alpha"
    assert [n for n, _ in choice.rejected] == ["gone", "crashy"]
    assert aml_registry.choose("host", statuses=aml_registry.statuses()) == choice


def test_default_backends_list_host_before_unavailable_gpu_backends() -> None:
    statuses = aml_core.backends()
    states = [s.available for s in statuses]
    assert states == sorted(states, reverse=True), [(s.name, s.state) for s in statuses]
    assert statuses[0].available


def _dist(tmp_path: Path, group: str, entry: str, module: str, body: str) -> None:
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(body))
    info = tmp_path / "fn_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fn-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entry}\n")


def test_entry_point_naming_the_hook_function_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _dist(
        tmp_path,
        "aml.fn_backends",
        "fnplug = fn_plugin_mod:aml_backends",
        "fn_plugin_mod",
        """
        from aml_core import hookimpl

        @hookimpl
        def aml_backends():
            return []
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    (st,) = Registry(group="aml.fn_backends").statuses()
    assert st.state == "broken"
    assert st.reason == (
        "the entry point names the function 'fn_plugin_mod:aml_backends', not the module that defines "
        "the hook: write fnplug = 'fn_plugin_mod' in [project.entry-points.'aml.fn_backends']"
    )


def test_entry_points_are_loaded_by_pluggy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _dist(
        tmp_path,
        "aml.ep_backends",
        "epplug = ep_plugin_mod",
        "ep_plugin_mod",
        """
        from tests.plugins import descriptor
        from aml_core import hookimpl

        @hookimpl
        def aml_backends():
            return [descriptor("via_pluggy", 1)]
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry(group="aml.ep_backends")
    assert reg.status("via_pluggy").available
    dist = next(d for p, d in reg.pm.list_plugin_distinfo() if reg.pm.get_name(p) == "epplug")
    assert (dist.project_name, dist.version) == ("fn-plugin", "1.0")  # pluggy's loader recorded it
    assert reg.plugin_of("via_pluggy") == ("epplug", "fn-plugin")
    assert reg.plugin_of("nothing") is None
    assert Kind.HOST in reg.descriptor("via_pluggy").kinds
