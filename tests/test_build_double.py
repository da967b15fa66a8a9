"""``python -m tests.support.build_double``: the one way an environment builds a driver
double ahead of its tests (tox.ini's numa env names the HIP double's file in advance)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.build_double import ROOT, double_module, main
from tests.support.doubles import DoubleBuildError


def test_builds_the_named_file_and_refuses_another_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "hipdouble" / "libamdhip64.so.6"
    try:
        code = main(["hip", str(target)])
    except DoubleBuildError as exc:
        pytest.skip(f"the HIP double cannot be built here: {exc}")
    assert code == 0
    assert capsys.readouterr().out.strip() == str(target)
    control = double_module("hip").DoubleControl(target)  # the library is the HIP double
    assert control.version // 10_000_000 == 6
    assert main(["hip", str(tmp_path / "libamdhip64.so.5")]) == 1
    assert "not" in capsys.readouterr().err


def test_runs_as_tox_ini_runs_it(tmp_path: Path) -> None:
    target = tmp_path / "libamdhip64.so.6"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.build_double", "hip", str(target)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0 and "DoubleBuildError" in proc.stderr:
        pytest.skip(f"the HIP double cannot be built here: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr
    assert target.is_file()
    assert "python -m tests.support.build_double hip {env:AML_HIP_LIBRARY}" in (ROOT / "tox.ini").read_text()


def test_only_the_doubles_there_are() -> None:
    with pytest.raises(ValueError, match="no driver double for 'cuda'"):
        double_module("cuda")
