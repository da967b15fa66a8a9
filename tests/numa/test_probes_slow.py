"""``aml info`` in the NUMA lab, where Python starts slowly (QEMU without KVM): a slow
machine never makes a backend ``broken`` (issue 29, item 5).

* The built-in host backend is probed in-process: available, whatever the time limit.
* A third-party plugin's probe still runs in its own interpreter (its isolation is
  kept). Given all the time it needs it is ``available``; given less time than the
  guest needs to start an interpreter (``AML_INFO_TIMEOUT=0.2``) it is ``unavailable``
  with "probe slow", never ``broken``.

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


def _info(tmp_path: Path, **env_extra: str) -> dict[str, dict[str, Any]]:
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
        [sys.executable, "-m", "aml_core", "info", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return {b["name"]: b for b in json.loads(proc.stdout)["backends"] if b["state"] != "shadowed"}


def test_info_in_a_slow_guest_calls_nothing_broken(tmp_path: Path) -> None:
    found = _info(tmp_path, AML_INFO_TIMEOUT="600")
    assert found["host"]["state"] == "available", found["host"]
    assert found["labplug"]["state"] == "available", found["labplug"]["reason"]


def test_a_probe_the_guest_could_not_start_in_time_is_slow(tmp_path: Path) -> None:
    found = _info(tmp_path, AML_INFO_TIMEOUT="0.2")
    assert found["host"]["state"] == "available", found["host"]  # in-process: no time limit
    plug = found["labplug"]
    assert plug["state"] == "unavailable", plug
    assert plug["reason"].startswith("probe slow: its process had not started after "), plug
