"""``aml info`` in the NUMA lab, where Python starts slowly (QEMU without KVM): a slow
machine never makes a backend ``broken`` (issue 29, item 5).

* The built-in host backend is probed in-process: available, whatever the time limit.
* A third-party plugin's probe still runs in its own process (its isolation is kept):
  in ``aml info`` a fork of the command's warm copy (aml_core.registry.forkserver), and
  a fresh interpreter where that copy cannot be forked (another thread running). Given
  all the time it needs it is ``available``; given less time than the guest needs to
  start an interpreter (``AML_INFO_TIMEOUT=0.2``) the fresh interpreter is
  ``unavailable`` with "probe slow", and the fork, which needs no interpreter, is either
  answered or ``unavailable`` (slow, or stopped by the limit); never ``broken``.

The CPU tests (tests/test_probes_slow.py) simulate the slow start; these run it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import aml_core

REPO = Path(aml_core.__file__).resolve().parent.parent

#: One topology is enough: what is slow is the guest's Python, whatever its nodes.
pytestmark = pytest.mark.numa_lab("two-node")

PLUGIN = """
from aml_core import BackendDescriptor, Kind, ProbeResult, hookimpl

def probe():
    return ProbeResult(available=True, detail="lab plugin")

def create(kind, device=None, **options):
    raise NotImplementedError

@hookimpl
def aml_backends():
    return [BackendDescriptor(name="labplug", priority=5, kinds={Kind.DEVICE}, probe=probe,
                              create_area=create)]
"""


#: ``aml info --json`` with another thread running first: no fork server, so each probe is
#: a fresh interpreter.
FRESH = (
    "import sys, threading\n"
    "threading.Thread(target=threading.Event().wait, daemon=True).start()\n"
    "from aml_core import cli\n"
    "sys.exit(cli.main(['info', '--json']))\n"
)


def _info(tmp_path: Path, *, fresh: bool = False, **env_extra: str) -> dict[str, dict[str, Any]]:
    site = tmp_path / "site"
    if not site.exists():
        site.mkdir()
        (site / "lab_plugin_mod.py").write_text(PLUGIN)
        info = site / "lab_plugin-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-plugin\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text("[aml.backends]\nlabplug = lab_plugin_mod\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AML_") or k == "AML_NUMA_LAB"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=os.pathsep.join([str(site), str(REPO)]))
    env.update(env_extra)
    proc = subprocess.run(
        [sys.executable, "-c", FRESH] if fresh else [sys.executable, "-m", "aml_core", "info", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return {b["name"]: b for b in json.loads(proc.stdout)["backends"] if b["state"] != "shadowed"}


@pytest.mark.parametrize("fresh", [False, True], ids=["forked", "fresh"])
def test_info_in_a_slow_guest_calls_nothing_broken(tmp_path: Path, fresh: bool) -> None:
    found = _info(tmp_path, fresh=fresh, AML_INFO_TIMEOUT="600")
    assert found["host"]["state"] == "available", found["host"]
    assert found["labplug"]["state"] == "available", found["labplug"]["reason"]


def test_a_probe_the_guest_could_not_start_in_time_is_slow(tmp_path: Path) -> None:
    found = _info(tmp_path, fresh=True, AML_INFO_TIMEOUT="0.2")
    assert found["host"]["state"] == "available", found["host"]  # in-process: no time limit
    plug = found["labplug"]
    assert plug["state"] == "unavailable", plug
    assert plug["reason"].startswith("probe slow: its process had not started after "), plug


def test_a_forked_probe_under_a_short_limit_is_never_broken(tmp_path: Path) -> None:
    found = _info(tmp_path, AML_INFO_TIMEOUT="0.2")
    assert found["host"]["state"] == "available", found["host"]
    plug = found["labplug"]
    assert plug["state"] in ("available", "unavailable"), plug
    if plug["state"] == "unavailable":
        assert plug["reason"].startswith(("probe slow: ", "probe stopped: ")), plug
