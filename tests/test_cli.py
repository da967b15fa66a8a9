"""The ``aml`` command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import aml_core
from aml_core.cli import main


def test_info_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "host  (aml-core" in out
    assert "available:" in out
    # The host kind goes to the best available backend: the built-in host backend on a
    # CPU-only machine, a GPU backend's pinned memory where one is available.
    chosen = aml_core.choose("host").backend
    assert f"  host     -> {chosen}" in out


def test_info_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    host = next(b for b in data["backends"] if b["name"] == "host")
    assert host["available"] is True
    assert host["priority"] == 0
    assert "numa" in host["capabilities"]
    assert data["chosen"]["host"]["backend"] == aml_core.choose("host").backend
    assert set(data["chosen"]) == {"device", "host", "managed", "mapped"}


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: aml" in capsys.readouterr().out


def test_python_dash_m_in_a_fresh_process() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "aml_core", "info", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    backends = {b["name"]: b for b in json.loads(out.stdout)["backends"]}
    assert backends["host"]["available"] is True


def test_disabled_host_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"AML_BACKEND": "host", "AML_DISABLE_BACKENDS": "host"}
    import os

    out = subprocess.run(
        [sys.executable, "-m", "aml_core", "info"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert "disabled by AML_DISABLE_BACKENDS" in out.stdout
    assert "host     -> none" in out.stdout
