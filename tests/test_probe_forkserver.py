"""``aml info``'s warm probe server (aml_core.registry.forkserver, issue 29 item 5): each
third-party probe is a fork of a copy of the command made before any plugin was loaded.

Every test runs ``aml info --json`` in a subprocess (a fork server needs a process with
no other thread), with plugins as temporary ``.dist-info`` entry points. Where the fork
server is in use, starting a fresh probe interpreter fails the run, so the outcomes below
are the forked children's: a crash, a hang, junk output or a slow start in one plugin is
that plugin's outcome, and the others are still reported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import aml_core
from aml_core.registry.config import ENTRY_POINT_GROUP
from aml_core.registry.manager import third_party_declared

REPO = Path(aml_core.__file__).resolve().parent.parent
RUN_TIMEOUT = 120.0

PLUGIN = """
import ctypes, os, signal, sys, time
from aml_core import BackendDescriptor, Kind, ProbeResult, hookimpl

IMPORTED_IN = os.getpid()
if os.getpid() != int(os.environ["AML_TEST_PARENT_PID"]):
{child_import}
else:
{parent_import}

def probe():
{probe}

def create(kind, device=None, **options):
    raise NotImplementedError

@hookimpl
def aml_backends():
    return [BackendDescriptor(name={name!r}, priority=3, kinds={{Kind.DEVICE}}, probe=probe,
                              create_area=create)]
"""

GOOD = "return ProbeResult(available=True, detail=f'imported in the probe: {IMPORTED_IN == os.getpid()}')"
SEGV = "os.kill(os.getpid(), signal.SIGSEGV)"

#: Runs ``aml info --json`` in this interpreter; with ``forbid``, a fresh probe
#: interpreter is an error, so every isolated probe must be a fork of the warm server.
DRIVER = """
import os, sys, threading
import aml_core.registry.isolation as isolation
if sys.argv[1] == "forbid":
    def fresh(*args, **kwargs):
        raise AssertionError("a fresh probe interpreter was started")
    isolation.subprocess.Popen = fresh
elif sys.argv[1] == "thread":  # another thread runs: no fork server, fresh interpreters
    threading.Thread(target=threading.Event().wait, daemon=True).start()
    from aml_core.registry.forkserver import ForkServer
    assert ForkServer.fork() is None, "forked a server while another thread ran"
if "AML_TEST_FORKS" in os.environ:  # a file: a line for each fork server forked
    from aml_core.registry.forkserver import ForkServer
    real_fork = ForkServer.fork.__func__
    def counted(cls):
        with open(os.environ["AML_TEST_FORKS"], "a") as f:
            f.write("fork\\n")
        return real_fork(cls)
    ForkServer.fork = classmethod(counted)
if "AML_TEST_STARTUP_LIMIT" in os.environ:  # a probe's startup budget, in place of 30 s scaled
    isolation.startup_limit = lambda: float(os.environ["AML_TEST_STARTUP_LIMIT"])
os.environ["AML_TEST_PARENT_PID"] = str(os.getpid())
from aml_core import cli
sys.exit(cli.main(["info", "--json"]))
"""


def _plugin(
    root: Path, name: str, probe: str, child_import: str = "pass", parent_import: str = "pass"
) -> None:
    """A plugin distribution ``name`` in ``root``: its probe runs ``probe``; its import
    runs ``child_import`` in a probe child and ``parent_import`` in ``aml info`` itself."""
    (root / f"{name}_mod.py").write_text(
        PLUGIN.format(
            name=name,
            probe=textwrap.indent(probe, "    "),
            child_import=textwrap.indent(child_import, "    "),
            parent_import=textwrap.indent(parent_import, "    "),
        )
    )
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[aml.backends]\n{name} = {name}_mod\n")


def _info(
    tmp_path: Path, mode: str = "forbid", *, redirect: str = "", **env: str
) -> dict[str, dict[str, Any]]:
    """``aml info --json``'s backends by name (the run must succeed). ``redirect``: bash
    redirections for the command (``2>&-``: started with stderr closed); where it sends
    stdout to ``out.json``, the report is read from there."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("AML_")}
    full.update(env)
    full["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    full["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
    proc = subprocess.run(
        ["/bin/bash", "-c", f'exec "$@" {redirect}', "bash", sys.executable, "-c", DRIVER, mode],
        env=full,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "a fresh probe interpreter was started" not in proc.stderr, proc.stderr
    data = json.loads((tmp_path / "out.json").read_text() if "out.json" in redirect else proc.stdout)
    return {b["name"]: b for b in data["backends"]}


def _said(b: dict[str, Any]) -> tuple[str, str]:
    return b["state"], b["reason"] or b["detail"] or ""


def test_a_segfault_in_a_forked_probe_is_that_plugins_only(tmp_path: Path) -> None:
    _plugin(tmp_path, "crasher", SEGV)
    _plugin(tmp_path, "goodone", GOOD)
    _plugin(tmp_path, "goodtwo", GOOD)
    found = _info(tmp_path)
    assert _said(found["crasher"]) == ("broken", "probe crashed (signal 11: SIGSEGV)")
    for name in ("goodone", "goodtwo", "host"):
        assert found[name]["state"] == "available", found[name]


def test_a_plugin_that_crashes_while_the_probe_imports_it(tmp_path: Path) -> None:
    """The crash is in the plugin's import in the probe child (not in the parent's)."""
    _plugin(tmp_path, "importabort", GOOD, child_import="os.abort()")
    _plugin(tmp_path, "goodone", GOOD)
    found = _info(tmp_path)
    assert _said(found["importabort"]) == ("broken", "probe crashed (signal 6: SIGABRT)")
    assert found["goodone"]["state"] == "available", found["goodone"]


def test_hang_and_junk_in_forked_probes(tmp_path: Path) -> None:
    _plugin(tmp_path, "hanger", "time.sleep(600)")
    _plugin(tmp_path, "printer", "os.write(1, b'\\x00junk {\\n'); print('more junk')\n" + GOOD)
    _plugin(tmp_path, "liar", "return 'not a result'")
    _plugin(tmp_path, "goodone", GOOD)
    found = _info(tmp_path, AML_PROBE_TIMEOUT="1")
    assert _said(found["hanger"]) == ("broken", "probe timed out after 1 s")
    assert found["printer"]["state"] == "available", found["printer"]
    state, reason = _said(found["liar"])
    assert state == "broken", reason
    assert reason.startswith("probe returned an invalid result"), reason
    assert found["goodone"]["state"] == "available", found["goodone"]


def test_a_forked_probe_that_has_not_started_is_slow(tmp_path: Path) -> None:
    _plugin(tmp_path, "sleepy", GOOD, child_import="time.sleep(30)")
    _plugin(tmp_path, "goodone", GOOD)
    found = _info(tmp_path, AML_INFO_TIMEOUT="3")
    state, reason = _said(found["sleepy"])
    assert state == "unavailable", reason
    assert reason.startswith("probe slow: its process had not started after "), reason
    assert found["goodone"]["state"] == "available", found["goodone"]


@pytest.mark.parametrize("given", [True, False], ids=["info-timeout-set", "default"])
def test_a_user_set_info_limit_is_a_forked_probes_startup_budget(tmp_path: Path, given: bool) -> None:
    """A forked child slower to start than its startup budget (0.5 s here): waited for
    when the user set ``AML_INFO_TIMEOUT`` (the probes may use all of it, as in the NUMA
    lab's guests), "probe slow" otherwise."""
    _plugin(tmp_path, "sleepy", GOOD, child_import="time.sleep(1.5)")
    limit = {"AML_INFO_TIMEOUT": "60"} if given else {}
    found = _info(tmp_path, AML_TEST_STARTUP_LIMIT="0.5", **limit)
    state, reason = _said(found["sleepy"])
    if given:
        assert (state, reason) == ("available", "imported in the probe: True")
    else:
        assert state == "unavailable", reason
        assert reason.startswith("probe slow: its process had not started after "), reason


def test_a_server_is_forked_only_for_a_third_party_plugin(tmp_path: Path) -> None:
    """aml-core's own host backend is probed in-process: with no other distribution
    declaring a backend, ``aml info`` forks no server (it would cost a fork for nothing);
    with one, it forks one."""
    forks = tmp_path / "forks"
    found = _info(tmp_path, AML_TEST_FORKS=str(forks))
    assert found["host"]["state"] == "available", found["host"]
    # Where this environment has other plugins installed (the tox envs' GPU doubles), a
    # server is forked for them.
    assert forks.exists() is third_party_declared(ENTRY_POINT_GROUP)
    forks.unlink(missing_ok=True)
    _plugin(tmp_path, "goodone", GOOD)
    found = _info(tmp_path, AML_TEST_FORKS=str(forks))
    assert _said(found["goodone"]) == ("available", "imported in the probe: True")
    assert forks.read_text() == "fork\n"


def test_the_probe_child_imports_its_plugin_itself(tmp_path: Path) -> None:
    """Forked before any plugin was loaded: the child inherits none of a plugin's
    import-time state (the parent imported it too, later, in its own process)."""
    _plugin(tmp_path, "goodone", GOOD)
    found = _info(tmp_path)
    assert _said(found["goodone"]) == ("available", "imported in the probe: True")


def test_a_hung_forked_probe_does_not_outlive_aml_info(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    _plugin(tmp_path, "hanger", f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\ntime.sleep(600)")
    found = _info(tmp_path, AML_PROBE_TIMEOUT="1")
    assert found["hanger"]["state"] == "broken", found["hanger"]
    for pid in pids.read_text().split():
        status = Path(f"/proc/{pid}/status")
        state = status.read_text().split("State:")[1].split()[0] if status.exists() else "gone"
        assert state in ("gone", "Z"), f"probe child {pid} still {state}"


def test_with_another_thread_running_probes_are_fresh_interpreters(tmp_path: Path) -> None:
    """No fork while another thread runs (it could hold a lock the child would need):
    the same report, from fresh interpreters."""
    _plugin(tmp_path, "crasher", SEGV)
    _plugin(tmp_path, "goodone", GOOD)
    found = _info(tmp_path, "thread")
    assert _said(found["crasher"]) == ("broken", "probe crashed (signal 11: SIGSEGV)")
    assert _said(found["goodone"]) == ("available", "imported in the probe: True")


#: What a plugin writes while the command imports it: to fd 1 and through C's stdio, which
#: the command sends to stderr while plugins load...
NOISY_PARENT = """
os.write(1, b"noise: fd 1 at import\\n")
ctypes.CDLL(None).printf(b"noise: printf at import\\n")
"""
#: ... and in the probe child, to its stderr, as any plugin may.
NOISY_CHILD = """
print("noise: print to stderr in the probe child", file=sys.stderr)
sys.__stderr__.write("noise: __stderr__ in the probe child\\n")
"""


@pytest.mark.parametrize(
    "redirect",
    ["2>&-", "<&-", "<&- 2>&-", ">out.json 2>&-", ">out.json <&-"],
    ids=[
        "stderr-closed",
        "stdin-closed",
        "stdin-stderr-closed",
        "stdout-file-stderr-closed",
        "stdout-file-stdin-closed",
    ],
)
def test_closed_standard_streams(tmp_path: Path, redirect: str) -> None:
    """Started with stdin or stderr closed (``aml info --json 2>&-``), stdout a file:
    the fork server's socket and pipes never take fd 0, 1 or 2, so what a plugin writes
    to fd 1 while the command imports it is not sent to the server (which it killed, or
    whose closed socket failed the plugin's write), and the report is valid JSON. In the
    probe child, a stream the command started without is there as in a fresh
    interpreter: what the child writes to stderr is the probe's stderr, which the report
    quotes when the child exits."""
    _plugin(tmp_path, "noisy", GOOD, child_import=NOISY_CHILD, parent_import=NOISY_PARENT)
    _plugin(
        tmp_path,
        "quitter",
        GOOD,
        child_import='sys.stderr.write("quitter: no device\\n")\nsys.stderr.flush()\nos._exit(3)',
    )
    found = _info(tmp_path, redirect=redirect)
    assert _said(found["noisy"]) == ("available", "imported in the probe: True"), found["noisy"]
    assert _said(found["quitter"]) == ("broken", "probe process exited with status 3: quitter: no device")
    assert found["host"]["state"] == "available", found["host"]


def test_a_probe_whose_server_was_killed_is_lost_not_broken(tmp_path: Path) -> None:
    """The fork server killed from outside (here by the probe child itself: its parent is
    the server): no exit status can come, which says nothing against the backend."""
    _plugin(tmp_path, "orphan", "os.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(0.2)\n" + GOOD)
    found = _info(tmp_path, "any")
    assert _said(found["orphan"]) == (
        "unavailable",
        "probe lost: aml info's probe server ended before the probe's exit status came",
    )
    assert found["host"]["state"] == "available", found["host"]


#: A probe that closes its output (its pipes: the answer can no longer be written) and hangs.
CLOSES_AND_HANGS = "os.closerange(1, 1024)\ntime.sleep(600)"


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"AML_PROBE_TIMEOUT": "1"}, ("broken", "probe timed out after 1 s")),
        (
            {"AML_PROBE_TIMEOUT": "30", "AML_INFO_TIMEOUT": "2"},
            ("unavailable", "probe stopped: aml info's time limit of 2 s (AML_INFO_TIMEOUT) ran out"),
        ),
    ],
    ids=["probe-timeout", "info-limit-first"],
)
def test_a_probe_that_closes_its_output_and_hangs(
    tmp_path: Path, env: dict[str, str], said: tuple[str, str]
) -> None:
    """Its output ends but no exit status comes: it hung past its own timeout (broken), or
    ``AML_INFO_TIMEOUT`` ran out first, which stops it (unavailable, as for a probe still
    writing), never "timed out after 30 s" when 2 s had passed."""
    _plugin(tmp_path, "closer", CLOSES_AND_HANGS)
    found = _info(tmp_path, **env)
    assert _said(found["closer"]) == said
    assert found["host"]["state"] == "available", found["host"]
