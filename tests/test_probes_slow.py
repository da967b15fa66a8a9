"""Probes on a slow machine (issue 29, item 5): ``aml info`` never calls a backend broken
because the machine is slow.

* aml-core's own backend (host) is probed in-process by ``aml info`` too: no interpreter
  of its own.
* An isolated probe whose interpreter has not started (Python starting, the plugin
  loading) when its budget runs out is "probe slow", ``unavailable``, never ``broken``,
  and is not remembered as safe; the budget scales with the load.

The slow start is simulated: the plugin module sleeps while it is imported, in the
probe's child only (the parent's pid is in the environment), so the parent's own loading
of the plugin is not slowed.
"""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

from aml_core.registry import config, core, isolation
from aml_core.registry.core import Registry
from aml_core.registry.trust import cache_file

GROUP = "aml.test_slow_backends"

PLUGIN = """
import os, time
from aml_core import BackendDescriptor, Kind, ProbeResult, hookimpl

if os.getpid() != int(os.environ["AML_TEST_PARENT_PID"]):
    time.sleep(float(os.environ["AML_TEST_CHILD_SLEEP"]))  # the child's start is slow

def probe():
    return ProbeResult(available=True, detail="probed")

def create(kind, device=None, **options):
    raise NotImplementedError

@hookimpl
def aml_backends():
    return [BackendDescriptor(name="slowstart", priority=5, kinds={Kind.DEVICE}, probe=probe,
                              create_area=create)]
"""


@pytest.fixture
def slow_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Registry:
    """A third-party entry point whose probe child sleeps before it starts."""
    (tmp_path / "slow_start_plugin_mod.py").write_text(textwrap.dedent(PLUGIN))
    info = tmp_path / "slow_start_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: slow-start-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\nslowstart = slow_start_plugin_mod\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("AML_TEST_PARENT_PID", str(os.getpid()))
    monkeypatch.setenv("AML_TEST_CHILD_SLEEP", "0")
    for name in ("AML_BACKEND", "AML_DISABLE_BACKENDS", "AML_PROBE_TIMEOUT", "AML_INFO_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    return Registry(group=GROUP, builtins=False)


def _status(reg: Registry, *, isolated: bool) -> tuple[str, str]:
    found = {s.name: s for s in reg.statuses(isolated=isolated)}
    return found["slowstart"].state, found["slowstart"].reason


def _remembered() -> bool:
    """Whether the slow plugin's probe is in the probe cache (seen to finish)."""
    path = cache_file()
    return path is not None and path.exists() and "slow-start-plugin" in path.read_text()


def test_host_is_never_probed_in_a_process_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """aml info's probes: aml-core's host backend is not among the isolated ones."""
    sent: list[str] = []
    real = core.probe_isolated

    def spy(targets: list[object], *args: object, **kwargs: object) -> object:
        sent.extend(t.desc.name for t in targets)  # type: ignore[attr-defined]
        return real(targets, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(core, "probe_isolated", spy)
    monkeypatch.setattr(
        isolation.subprocess,
        "Popen",
        lambda *a, **k: pytest.fail("aml info started a probe process for aml-core's own backend"),
    )
    statuses = {s.name: s for s in Registry().statuses(isolated=True)}
    assert statuses["host"].state == "available", statuses["host"]
    assert "host" not in sent


def test_a_child_that_has_not_started_is_slow_not_broken(
    slow_plugin: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AML_TEST_CHILD_SLEEP", "30")
    monkeypatch.setattr(isolation, "startup_limit", lambda: 0.5)
    start = time.monotonic()
    state, reason = _status(slow_plugin, isolated=True)
    assert time.monotonic() - start < 20  # the sleeping child was not waited for
    assert state == "unavailable", reason
    assert reason.startswith("probe slow: its process had not started after "), reason
    assert not _remembered(), "a probe that never ran was remembered as safe"


def test_aml_info_limit_running_out_before_the_start_is_slow(
    slow_plugin: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AML_TEST_CHILD_SLEEP", "30")
    monkeypatch.setenv("AML_INFO_TIMEOUT", "0.5")
    state, reason = _status(slow_plugin, isolated=True)
    assert state == "unavailable", reason
    assert "probe slow" in reason, reason
    assert reason.endswith("when aml info's time limit of 0.5 s (AML_INFO_TIMEOUT) ran out"), reason


def test_a_slow_start_within_the_budget_is_waited_for(
    slow_plugin: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that takes a while to start (longer than a probe's own timeout) is
    waited for: the probe's timeout only starts once the child has started."""
    monkeypatch.setenv("AML_TEST_CHILD_SLEEP", "1.5")
    monkeypatch.setenv("AML_PROBE_TIMEOUT", "1")
    state, reason = _status(slow_plugin, isolated=True)
    assert state == "available", reason


def test_a_user_set_info_limit_is_the_startup_budget(
    slow_plugin: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AML_INFO_TIMEOUT set by the user gives the probes that long: a child slower to
    start than startup_limit() (the NUMA lab's guests) is waited for within it."""
    monkeypatch.setenv("AML_TEST_CHILD_SLEEP", "1.5")
    monkeypatch.setattr(isolation, "startup_limit", lambda: 0.5)
    monkeypatch.setenv("AML_INFO_TIMEOUT", "60")
    state, reason = _status(slow_plugin, isolated=True)
    assert state == "available", reason


@pytest.mark.parametrize(("raw", "given"), [("60", True), ("99999", True), ("abc", False), ("-1", False)])
def test_info_limit_given_only_when_used(monkeypatch: pytest.MonkeyPatch, raw: str, given: bool) -> None:
    monkeypatch.setenv("AML_INFO_TIMEOUT", raw)
    assert config.settings().info_timeout_given is given
    monkeypatch.delenv("AML_INFO_TIMEOUT")
    assert config.settings().info_timeout_given is False


def test_in_process_isolated_check_that_is_slow_is_not_broken(
    slow_plugin: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """backends(): the isolated check of a plugin not yet seen to finish is slow; the
    backend is unavailable (not broken), its probe is not run in this process, and it
    is not remembered."""
    monkeypatch.setenv("AML_TEST_CHILD_SLEEP", "30")
    monkeypatch.setattr(isolation, "startup_limit", lambda: 0.5)
    monkeypatch.setattr(core, "run_child", isolation.run_child)
    state, reason = _status(slow_plugin, isolated=False)
    assert state == "unavailable", reason
    assert reason.startswith("probe slow"), reason
    assert not _remembered()


def test_startup_budget_scales_with_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "_cpus", lambda: 2)
    monkeypatch.setattr(config.os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    assert config.startup_limit() == config.ISOLATED_STARTUP_LIMIT  # idle: the base budget
    monkeypatch.setattr(config.os, "getloadavg", lambda: (8.0, 1.0, 1.0))
    assert config.startup_limit() == 4 * config.ISOLATED_STARTUP_LIMIT  # 4 runnable per CPU
    monkeypatch.setattr(config.os, "getloadavg", lambda: (1000.0, 1.0, 1.0))
    assert config.startup_limit() == config.STARTUP_SCALE_MAX * config.ISOLATED_STARTUP_LIMIT

    def no_load() -> tuple[float, float, float]:
        raise OSError("no load average")

    monkeypatch.setattr(config.os, "getloadavg", no_load)
    assert config.startup_limit() == config.ISOLATED_STARTUP_LIMIT
