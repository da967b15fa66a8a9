"""``aml`` against a hostile world, each case in its own subprocess.

* Its output cannot be written: a closed pipe (``aml info --json | true``), a full disk
  (stdout on ``/dev/full``) and a closed stdout (``aml info >&-``) give one line on
  stderr and status 1, like git and pip, never a traceback.
* An encoding that cannot show a reason (``PYTHONIOENCODING=ascii``): escaped, status 0.
* Plugins that print to stdout while the parent imports them (``print``,
  ``os.write(1, ...)``, C's ``printf``): the report alone is on stdout.
* Many declared backends: at most ``isolated_parallelism()`` probe processes at once,
  and the probes not run within ``AML_INFO_TIMEOUT`` say so.
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
from aml_core.registry.config import isolated_parallelism

REPO = Path(aml_core.__file__).resolve().parent.parent

#: A plugin module declaring ``{count}`` backends ``many0``, ``many1``...; each probe
#: runs ``{probe}`` (indented) and returns ``{result}``.
PLUGIN = """
import ctypes, os, sys, time
from aml_core import BackendDescriptor, Kind, ProbeResult, hookimpl
from aml_core.host import HostArea

{top}

def make_probe(name):
    def probe():
{probe}
        return {result}
    return probe

def create(kind, device=None, **options):
    return HostArea(**options)

@hookimpl
def aml_backends():
{hook}
    return [
        BackendDescriptor(name=f"{prefix}{{i}}", priority=50, kinds={{Kind.HOST}},
                          probe=make_probe(f"{prefix}{{i}}"), create_area=create)
        for i in range({count})
    ]
"""


def _env(tmp_path: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a case: no AML_* of the caller's, this checkout's aml_core, and
    ``tmp_path`` (where :func:`_install` puts a plugin) first on the path, with a cache
    of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AML_")}
    paths = [str(tmp_path)] if tmp_path is not None else []
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*paths, str(REPO), env.get("PYTHONPATH", "")) if p)
    if tmp_path is not None:
        env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    env["COLUMNS"] = "80"
    env.update(extra)
    return env


def _install(
    root: Path,
    *,
    count: int = 1,
    prefix: str = "many",
    top: str = "",
    hook: str = "",
    probe: str = "pass",
    result: str = "ProbeResult(available=True, detail='fine')",
) -> None:
    """A plugin distribution ``cli-hostile`` (entry point ``clihostile``) in ``root``."""
    source = PLUGIN.format(
        top=top,
        probe=textwrap.indent(probe, " " * 8),
        result=result,
        hook=textwrap.indent(hook or "pass", " " * 4),
        prefix=prefix,
        count=count,
    )
    (root / "cli_hostile_mod.py").write_text(source)
    info = root / "cli_hostile-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cli-hostile\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[aml.backends]\nclihostile = cli_hostile_mod\n")


def _aml(
    args: list[str], env: dict[str, str], *, stdout: Any = subprocess.PIPE, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m aml_core ARGS``, its stderr (and by default its stdout) captured."""
    return subprocess.run(
        [sys.executable, "-m", "aml_core", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def _shell(line: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A bash command line where ``aml`` is ``python -m aml_core``, its output captured."""
    return subprocess.run(
        line.replace("aml ", f"{sys.executable} -m aml_core ", 1),
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def _backends(stdout: str) -> dict[str, dict[str, Any]]:
    data: dict[str, Any] = json.loads(stdout)
    return {b["name"]: b for b in data["backends"] if b["state"] != "shadowed"}


@pytest.mark.parametrize("args", [["info", "--json"], ["info"], []], ids=["json", "text", "bare"])
def test_broken_pipe(args: list[str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before aml writes: EPIPE on the first write
    try:
        proc = _aml(args, _env(), stdout=write_end)
    finally:
        os.close(write_end)
    assert proc.returncode == 1
    assert proc.stderr == (
        "aml: error: cannot write to standard output: the reader closed the pipe (broken pipe)\n"
    )


def test_shell_pipe_into_true() -> None:
    """The issue's own command line. Whether the write meets a closed pipe depends on
    timing, so both outcomes are accepted, as long as there is no traceback."""
    proc = _shell("aml info --json | true; echo status=${PIPESTATUS[0]}", _env())
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.strip() in ("status=0", "status=1"), proc.stdout
    if proc.stdout.strip() == "status=1":
        assert "broken pipe" in proc.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
@pytest.mark.parametrize("args", [["info", "--json"], ["info"]], ids=["json", "text"])
def test_full_disk(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        proc = _aml(args, _env(), stdout=full)
    assert proc.returncode == 1
    assert proc.stderr == "aml: error: cannot write to standard output: No space left on device\n"


@pytest.mark.parametrize("args", [["info", "--json"], ["info"], []], ids=["json", "text", "bare"])
def test_closed_stdout(args: list[str]) -> None:
    """``aml info >&-``: one line, status 1, no traceback."""
    proc = _shell(" ".join(["aml", *args, ">&-"]), _env())
    assert proc.returncode == 1
    assert proc.stderr == "aml: error: cannot write to standard output: it is closed\n"


# What a plugin prints while the parent imports it and calls its hook: through Python's
# stdout, the original sys.__stdout__, file descriptor 1, and C's stdio (a buffered printf,
# flushed at exit unless aml flushes it).
NOISY_TOP = """
print("noise: print at import")
sys.__stdout__.write("noise: __stdout__ at import\\n")
os.write(1, b"noise: fd 1 at import\\n")
ctypes.CDLL(None).printf(b"noise: printf at import\\n")
"""
NOISY_HOOK = """
print("noise: print in the hook")
os.write(1, b"noise: fd 1 in the hook\\n")
ctypes.CDLL(None).printf(b"noise: printf in the hook\\n")
"""


@pytest.mark.parametrize("stderr", ["pipe", "closed"])
def test_printing_plugin_does_not_corrupt_json(tmp_path: Path, stderr: str) -> None:
    _install(tmp_path, top=NOISY_TOP, hook=NOISY_HOOK, probe='print("noise: print in the probe")')
    env = _env(tmp_path)
    proc = _shell("aml info --json 2>&-", env) if stderr == "closed" else _aml(["info", "--json"], env)
    assert proc.returncode == 0, proc.stderr
    backends = _backends(proc.stdout)  # valid JSON: the report only (the isolated probe's
    # own output goes to its process's stderr, which the report reads for a failure only)
    assert backends["many0"]["state"] == "available", backends["many0"]
    assert backends["host"]["state"] == "available"
    if stderr == "pipe":
        for said in (
            "print at import",
            "__stdout__ at import",
            "fd 1 at import",
            "printf at import",
            "print in the hook",
            "fd 1 in the hook",
            "printf in the hook",
        ):
            assert f"noise: {said}" in proc.stderr, (said, proc.stderr)


def test_printing_plugin_text_report(tmp_path: Path) -> None:
    _install(tmp_path, top=NOISY_TOP, hook=NOISY_HOOK)
    proc = _aml(["info"], _env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("aml-core "), proc.stdout
    assert "noise" not in proc.stdout
    assert "noise: printf at import" in proc.stderr


REASON = "caf\u00e9 \u2014 na\u00efve driver \u2603"


@pytest.mark.parametrize("args", [["info"], ["info", "--verbose"], ["info", "--json"]])
def test_ascii_output_encoding(tmp_path: Path, args: list[str]) -> None:
    """``PYTHONIOENCODING=ascii`` and a reason the encoding cannot show: the text report
    escapes it, the JSON is ASCII; status 0, no traceback."""
    _install(tmp_path, result=f"ProbeResult.unavailable({REASON!r})")
    proc = _aml(args, _env(tmp_path, PYTHONIOENCODING="ascii"))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    proc.stdout.encode("ascii")
    if "--json" in args:
        assert _backends(proc.stdout)["many0"]["reason"] == REASON
    else:
        assert "caf\\xe9 \\u2014 na\\xefve driver \\u2603" in proc.stdout, proc.stdout


def test_isolated_probes_run_a_bounded_number_at_once(tmp_path: Path) -> None:
    """More backends than may be probed at once: each probe records when it ran; no more
    than ``isolated_parallelism()`` ever overlap, and every one is probed."""
    bound = isolated_parallelism()
    count = bound + 6
    record = tmp_path / "ran"
    record.mkdir()
    probe = (
        "t0 = time.time()\n"
        "time.sleep(2.0)\n"
        f"open(os.path.join({str(record)!r}, name), 'w').write(f'{{t0}} {{time.time()}}')"
    )
    _install(tmp_path, count=count, probe=probe)
    proc = _aml(["info", "--json"], _env(tmp_path), timeout=120)
    assert proc.returncode == 0, proc.stderr
    backends = _backends(proc.stdout)
    states = {f"many{i}": backends[f"many{i}"]["state"] for i in range(count)}
    assert set(states.values()) == {"available"}, states
    spans = [tuple(map(float, f.read_text().split())) for f in record.iterdir()]
    assert len(spans) == count
    overlap = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert overlap <= bound, f"{overlap} probes ran at once; at most {bound} may"


def test_many_backends_stop_at_the_time_limit(tmp_path: Path) -> None:
    """200 declared backends and AML_INFO_TIMEOUT=2: the command answers; each backend
    was probed, or says that the limit stopped its probe or kept it from running."""
    count = 200
    _install(tmp_path, count=count)
    proc = _aml(["info", "--json"], _env(tmp_path, AML_INFO_TIMEOUT="2"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    backends = _backends(proc.stdout)
    limit = "aml info's time limit of 2 s (AML_INFO_TIMEOUT) ran out"
    not_probed = []
    for i in range(count):
        b = backends[f"many{i}"]
        if b["state"] == "available":
            continue
        assert b["state"] == "unavailable", b
        # Stopped, kept from starting, or its interpreter had not started yet (slow, not broken).
        slow = b["reason"].startswith("probe slow: ") and b["reason"].endswith(f"when {limit}")
        assert slow or b["reason"] in (f"not probed: {limit}", f"probe stopped: {limit}"), b["reason"]
        not_probed.append(b["name"])
    assert not_probed, "200 probes within 2 s on this machine: raise the count"
    # Probed in rank order (priority, then name): the limit cuts the end of the list.
    ranked = sorted(f"many{i}" for i in range(count))
    assert ranked[-1] in not_probed
    # The text report has a row for each, within the width.
    text = _aml(["info"], _env(tmp_path, AML_INFO_TIMEOUT="2"), timeout=120)
    assert text.returncode == 0, text.stderr
    assert max(len(line) for line in text.stdout.splitlines()) <= 80
    assert "not probed: aml info's time limit of 2 s" in text.stdout
