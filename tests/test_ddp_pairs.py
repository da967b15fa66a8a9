"""benchmarks/ddp_pairs.py: the DDP step's pairs read from the runs' files, and the pooled
figures (wins, sign test, median and its interval) computed from them."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.benchmark_scripts import BENCH, load_benchmark

SCRIPT = BENCH / "ddp_pairs.py"


ddp_pairs = load_benchmark("ddp_pairs")


def _json_run(folder: Path, ratios: list[float]) -> Path:
    path = folder / "nccl_bench.json"
    path.write_text(json.dumps({"meta": {}, "phases": {}, "ddp": {"round_ratios": ratios}}))
    return path


def test_pairs_come_from_the_json_or_from_an_older_runs_report(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    assert ddp_pairs.run_pairs(_json_run(tmp_path / "a", [1.1, 0.9])) == [1.1, 0.9]
    log = tmp_path / "nccl.log"
    log.write_text(
        "aml 452.0 steps/s ...: 1.011x (target >= 1.0x: met); each round's aml / PyTorch: "
        "1.011, 1.147, 1.078; the same final parameters in every run: True.\n"
    )
    assert ddp_pairs.run_pairs(log) == [1.011, 1.147, 1.078]


def test_a_run_without_pairs_is_refused_with_its_name(tmp_path: Path) -> None:
    empty = tmp_path / "nccl_bench.json"
    empty.write_text(json.dumps({"ddp": {}}))
    with pytest.raises(ValueError, match="no DDP pairs"):
        ddp_pairs.run_pairs(empty)
    text = tmp_path / "other.md"
    text.write_text("collectives only\n")
    with pytest.raises(ValueError, match=r"other\.md"):
        ddp_pairs.run_pairs(text)
    with pytest.raises(ValueError, match="positive"):
        ddp_pairs.summarize([1.0, -1.0])
    with pytest.raises(ValueError, match="no pairs"):
        ddp_pairs.summarize([])


def test_the_sign_test_is_the_exact_binomial_tail() -> None:
    assert ddp_pairs.sign_test(0, 5) == 1.0
    assert ddp_pairs.sign_test(5, 5) == 1 / 32
    assert ddp_pairs.sign_test(4, 5) == 6 / 32
    assert math.isclose(ddp_pairs.sign_test(22, 29), 0.004065, rel_tol=1e-3)


def test_the_pooled_figures() -> None:
    pairs = [0.9, 1.0, 1.1, 1.2, 1.3]
    s = ddp_pairs.summarize(pairs)
    assert s["pairs"] == 5
    assert s["aml_faster"] == 3  # 1.0 is not a win
    assert s["median"] == 1.1
    low, high = s["median_95"]
    assert 0.9 <= low <= 1.1 <= high <= 1.3
    assert s["median_95"] == ddp_pairs.summarize(pairs)["median_95"]  # seeded
    assert math.isclose(s["geometric_mean"], math.prod(pairs) ** (1 / 5))
    figures, table = ddp_pairs.report({"x": [0.9, 1.1], "y": [1.2]})
    assert figures["pooled"]["pairs"] == 3
    assert figures["runs"]["y"]["aml_faster"] == 1
    assert "| x | 2 | 1 | 1.000 | 0.900, 1.100 |" in table
    assert "aml faster in 2 of 3 pairs" in table


def test_the_script_writes_its_table_and_figures(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    run = _json_run(tmp_path / "a", [1.05, 0.95, 1.2])
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            str(run),
            "--md",
            str(tmp_path / "t.md"),
            "--json",
            str(tmp_path / "f.json"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "aml faster in 2 of 3 pairs" in out.stdout
    assert (tmp_path / "t.md").read_text() == out.stdout
    assert json.loads((tmp_path / "f.json").read_text())["pooled"]["median"] == 1.05
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "none.json")],
        check=False,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert "none.json" in bad.stderr
