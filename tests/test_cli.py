"""The ``aml`` command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import aml_core
from aml_core.cli import JSON_SCHEMA_VERSION, compact, info_data, main, render

from . import plugins as P


@pytest.fixture(autouse=True)
def _columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aml_core", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, "COLUMNS": "80", **env},
    )


def test_info_text_at_a_glance(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info"]) == 0
    printed = capsys.readouterr().out
    assert max(len(line) for line in printed.splitlines()) <= 80
    assert "host  (aml-core" in printed
    # The same data, rendered: what aml info shows is what its probes found.
    data = info_data()
    out = render(data, width=80)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0].startswith(f"aml-core {aml_core.__version__} (Python ")
    backends = data["backends"]
    assert isinstance(backends, list)
    names = {b["name"] for b in backends}
    rows = [line for line in lines if line.split("  ")[0] in names]
    states = [line.split()[4] for line in rows]
    assert states == sorted(states, key=lambda s: s != "available"), "available backends first"
    # The host kind goes to the best available backend: the built-in host backend on a
    # CPU-only machine, a GPU backend's pinned memory where one is available.
    chosen = data["chosen"]
    assert isinstance(chosen, dict)
    assert f"  host     -> {chosen['host']['backend']}" in out
    for kind in ("device", "managed", "mapped"):
        (entry,) = [line for line in lines if line.startswith(f"  {kind:8} -> ")]
        assert len(entry) < 30, "the would-use section shows the chosen backend only"
    # Each reason once: every unavailable backend's reason appears on one line only.
    for b in backends:
        if b["reason"]:
            head = compact(b["reason"])[:30]
            assert sum(head in line for line in lines) == 1, head


def test_info_text_shows_nodes_memory_huge_pages_and_versions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    host = next(s for s in aml_core.backends() if s.name == "host")
    if host.available:
        assert f"host: Linux {os.uname().release}" in out
        node = host.devices[0]
        assert f"  {node.index}: NUMA node {node.index}, " in out
        assert f"cpus {node.details['cpus']}" in out
        assert " free" in out
        assert "huge pages: " in out


def test_verbose_prints_texts_in_full(capsys: pytest.CaptureFixture[str]) -> None:
    long_reason = "the device driver said: " + "x" * 300
    data: dict[str, object] = {
        "aml_core": "1.0",
        "aml_core_path": "/somewhere",
        "python": "3.11",
        "warnings": ["AML_PROBE_TIMEOUT='abc' is not a positive, finite number of seconds; using 5 s"],
        "backends": [
            {
                "name": "gpu",
                "state": "unavailable",
                "available": False,
                "reason": long_reason,
                "detail": "",
                "distribution": "aml-gpu",
                "version": "2.0",
                "priority": 100,
                "versions": {},
                "capabilities": [],
                "devices": [],
            },
            {
                "name": "broken",
                "state": "broken",
                "available": False,
                "reason": "import failed: ImportError: boom",
                "detail": "",
                "distribution": "aml-broken",
                "version": "0.1",
                "priority": None,
                "versions": {},
                "capabilities": [],
                "devices": [],
            },
        ],
        "chosen": {"device": {"backend": None, "rejected": []}},
    }
    short = render(data, width=80)
    assert max(len(line) for line in short.splitlines()) <= 80
    assert "x" * 100 not in short
    assert "aml info --verbose prints them in full" in short
    assert "warning: AML_PROBE_TIMEOUT='abc'" in short
    assert "broken  (aml-broken 0.1)     -  broken" in short
    narrow = render(data, width=40)
    assert max(len(line) for line in narrow.splitlines()) <= 40, narrow
    full = render(data, width=80, verbose=True)
    assert "".join(full.split()).count("x" * 300) == 1
    assert max(len(line) for line in full.splitlines() if "xxx" not in line) <= 80


def test_compact_says_each_path_once() -> None:
    hip = "cannot load /etc/passwd (AML_HIP_LIBRARY='/etc/passwd'): /etc/passwd: /etc/passwd: bad ELF"
    assert compact(hip) == "cannot load /etc/passwd (AML_HIP_LIBRARY): bad ELF"
    many = (
        "cannot load libamdhip64.so.7 or libamdhip64.so.5: libamdhip64.so.7: libamdhip64.so.7: cannot open "
        "shared object file: No such file or directory; libamdhip64.so.5: libamdhip64.so.5: cannot open "
        "shared object file: No such file or directory"
    )
    assert compact(many) == (
        "cannot load libamdhip64.so.7 or libamdhip64.so.5: cannot open shared object file: "
        "No such file or directory"
    )
    assert compact("plain text; plain text") == "plain text"


def test_info_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema_version"] == JSON_SCHEMA_VERSION
    assert data["aml_core"] == aml_core.__version__
    assert data["warnings"] == []
    host = next(b for b in data["backends"] if b["name"] == "host")
    assert host["available"] is True
    assert host["state"] == "available"
    assert host["reason"] is None
    assert host["detail"].startswith("NUMA nodes ")
    assert host["priority"] == 0
    assert host["versions"]["Linux"] == os.uname().release
    assert "numa" in host["capabilities"]
    assert isinstance(host["devices"][0]["free_memory"], int)
    assert data["chosen"]["host"]["backend"] in {b["name"] for b in data["backends"] if b["available"]}
    assert set(data["chosen"]) == {"device", "host", "managed", "mapped"}
    available = [b["available"] for b in data["backends"]]
    assert available == sorted(available, reverse=True)


def test_in_process_plugins_are_listed(capsys: pytest.CaptureFixture[str]) -> None:
    aml_core.register(P.Plugin(P.descriptor("inproc", 7)), name="inproc_cli", distribution="my-app")
    try:
        assert main(["info", "--json"]) == 0
    finally:
        aml_core.unregister("inproc_cli")
    data = json.loads(capsys.readouterr().out)
    entry = next(b for b in data["backends"] if b["name"] == "inproc")
    assert (entry["plugin"], entry["distribution"], entry["available"]) == ("inproc_cli", "my-app", True)


def test_bare_aml_runs_info(capsys: pytest.CaptureFixture[str]) -> None:
    # Changed on purpose: bare "aml" used to print the help and exit 2.
    assert main([]) == 0
    assert "aml_core.area(kind=...) would use:" in capsys.readouterr().out


def test_python_dash_m_in_a_fresh_process() -> None:
    out = _run("info", "--json")
    assert out.returncode == 0, out.stderr
    backends = {b["name"]: b for b in json.loads(out.stdout)["backends"]}
    assert backends["host"]["available"] is True


def test_disabled_host_is_explained() -> None:
    out = _run("info", AML_BACKEND="host", AML_DISABLE_BACKENDS="host")
    assert out.returncode == 0, out.stderr
    assert "host  (aml-core" in out.stdout
    assert "disabled" in out.stdout
    assert "host     -> none" in out.stdout


def _documented_keys(section: str) -> set[str]:
    """The keys of one table of docs/aml-info-json.md."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "aml-info-json.md").read_text()
    body = doc.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", body, flags=re.MULTILINE))


def test_json_matches_its_documented_schema(capsys: pytest.CaptureFixture[str]) -> None:
    aml_core.register(
        P.Plugin(P.descriptor("same", 1), P.descriptor("gone", 2, probe=P.raising_probe)), name="a"
    )
    aml_core.register(P.Plugin(P.descriptor("same", 3)), name="b")
    aml_core.register(P.NoHook(), name="c")
    try:
        assert main(["info", "--json"]) == 0
    finally:
        for name in ("a", "b", "c"):
            aml_core.unregister(name)
    data = json.loads(capsys.readouterr().out)
    assert set(data) == _documented_keys("Top level")
    states = set()
    for backend in data["backends"]:
        assert set(backend) == _documented_keys("Backend object"), backend["name"]
        states.add(backend["state"])
        assert (backend["reason"] is None) == backend["available"]
        for device in backend["devices"]:
            assert set(device) == _documented_keys("Device object")
    assert {"available", "broken", "shadowed"} <= states
    for choice in data["chosen"].values():
        assert set(choice) == _documented_keys("Choice object (`chosen.<kind>`)")


def test_verbose_notes_an_ignored_probe_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO at the probe cache's path is ignored (never opened for reading: it would
    block) with a note that --verbose prints; the plain report stays as it was."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "aml").mkdir(mode=0o700)
    os.mkfifo(tmp_path / "aml" / "probes.json")
    note = f"probe cache ignored: {tmp_path / 'aml' / 'probes.json'} is a FIFO"
    assert main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == [note]
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["info", "--verbose"]) == 0
    assert " ".join(capsys.readouterr().out.split()).count(f"note: {note}") == 1
    assert main(["info"]) == 0
    assert "probe cache ignored" not in capsys.readouterr().out
