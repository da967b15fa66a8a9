"""benchmarks/mpi_bench.py end to end in its ``--quick`` mode: it starts itself under
``mpiexec -n 2``, the ranks (two rounds: ``--rounds`` reaches them) ping-pong and allreduce
NumPy arrays and aml buffers, and rank 0 writes every kind at every size, with the bytes
checked. Skipped without mpi4py and an ``mpiexec``, as the other MPI tests."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py", reason="mpi4py is not installed (tox -e mpi installs it)")

from .support import ROOT, launcher, run_from_root

pytestmark = pytest.mark.skipif(launcher() is None, reason="no mpiexec beside this Python or on PATH")


def test_the_quick_benchmark_times_every_kind_and_size(tmp_path: Path) -> None:
    bench = ROOT / "benchmarks" / "mpi_bench.py"
    run_from_root([sys.executable, str(bench), "--out", str(tmp_path), "--quick", "--rounds", "2"])
    result = json.loads((tmp_path / "mpi_bench.json").read_text())
    assert result["ranks"] == 2
    assert result["data_ok"] is True
    assert result["rounds"] == 2
    kinds = result["kinds"]
    assert kinds[:3] == ["numpy", "aml", "aml-pool"]
    assert "aml-numa" in kinds or "aml-numa" in result["skipped"]
    rows = {(r["op"], r["size"], r["kind"]): r for r in result["rows"]}
    expected = {
        (op, size, kind) for op in ("pingpong", "allreduce") for size in result["sizes"] for kind in kinds
    }
    assert set(rows) == expected
    assert {8, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20} == set(result["sizes"])
    for (op, size, _kind), row in rows.items():
        assert row["data_ok"] is True
        assert len(row["rounds"]) == result["rounds"]
        assert row["us"] > 0
        assert all(t > 0 for t in row["rounds"])
        assert math.isclose(row["ratio"], row["us"] / rows[(op, size, "numpy")]["us"])
        assert row["ratio_min"] <= row["ratio_max"]
    assert (tmp_path / "mpi_bench.md").read_text().count("| 64 MiB |") == 2 * len(kinds)
    assert (tmp_path / "mpi_bench.png").is_file() or result["plot"].startswith("no plot")


def test_rounds_below_one_are_refused() -> None:
    bench = ROOT / "benchmarks" / "mpi_bench.py"
    got = run_from_root([sys.executable, str(bench), "--rounds", "0"], check=False)
    assert got.returncode == 2
    assert "--rounds must be at least 1" in got.stderr
