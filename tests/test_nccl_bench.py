"""benchmarks/nccl_bench.py without GPUs: its arguments, the skip on fewer than two GPUs, the
data its checks use, and the launcher's handling of a pair of ranks that skip, fail or hang
(the ranks run for real, as processes; their engines are replaced by packages that cannot be
imported). Nothing here is timed; the two-GPU run is the GPU machine's."""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
SCRIPT = BENCH / "nccl_bench.py"


def _load() -> ModuleType:
    """The script as a module, imported as it imports its neighbours (by bare name)."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("nccl_bench")
    finally:
        sys.path.remove(str(BENCH))


nccl_bench = _load()


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("OUT", None)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    paths = [str(ROOT), str(ROOT / "backends" / "cuda"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.update(extra)
    return env


def test_help_names_the_options_and_the_exit_statuses(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    for option in ("--out", "--quick", "--phases", "--phase-timeout"):
        assert option in out.stdout
    assert "77 fewer than 2 GPUs" in " ".join(out.stdout.split())
    assert "--child" not in out.stdout  # the ranks' own arguments are not the user's


def test_fewer_than_two_gpus_measures_nothing_and_writes_nothing(tmp_path: Path) -> None:
    """No GPU is visible (CUDA_VISIBLE_DEVICES empty, on any machine): status 77 and the reason."""
    out_dir = tmp_path / "out"
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out_dir)],
        capture_output=True,
        text=True,
        env=_env(tmp_path, CUDA_VISIBLE_DEVICES=""),
        timeout=120,
        check=False,
    )
    assert out.returncode == nccl_bench.NOT_TWO_GPUS, out.stderr
    assert "nccl_bench needs 2 GPUs" in out.stderr
    assert "nothing measured, nothing written" in out.stderr
    assert out.stdout == ""
    assert not out_dir.exists()


@pytest.mark.parametrize(
    "argv",
    [["--phases", "collectives-cupy,nope"], ["--phases", ","], ["--phase-timeout", "soon"]],
)
def test_bad_arguments_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        nccl_bench.parse_args(argv)
    assert info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_phases_are_chosen_in_order() -> None:
    assert nccl_bench.parse_args([]).phases == nccl_bench.PHASES
    assert nccl_bench.parse_args(["--phases", "ddp-aml,ddp-torch"]).phases == ("ddp-aml", "ddp-torch")


@pytest.mark.parametrize("world", [2, 3, 4])
def test_the_checked_values_are_what_the_collectives_compute(world: int) -> None:
    """The expected results are the sum and the concatenation of what the ranks send,
    exactly (small integers in float32), and a wrong element is counted."""
    count = 3 * nccl_bench.PERIOD + 7
    sent = [nccl_bench.fill_values(np, count, rank) for rank in range(world)]
    assert all(s.dtype == np.float32 and s.shape == (count,) for s in sent)
    assert len({s.tobytes() for s in sent}) == world  # every rank sends something else
    total = np.sum(np.stack(sent).astype(np.float64), axis=0)
    reduced = nccl_bench.allreduce_expected(np, count, world)
    assert np.array_equal(reduced.astype(np.float64), total)
    gathered = nccl_bench.allgather_expected(np, count, world)
    assert np.array_equal(gathered, np.concatenate(sent))
    assert nccl_bench.mismatches(np, reduced, nccl_bench.allreduce_expected(np, count, world)) == 0
    wrong = reduced.copy()
    wrong[[0, count // 2, count - 1]] += 1
    assert nccl_bench.mismatches(np, wrong, reduced) == 3


def test_timed_samples_interleave_the_kinds() -> None:
    calls: list[str] = []
    syncs: list[int] = []
    medians = nccl_bench.timed_samples(["a", "b", "c"], calls.append, lambda: syncs.append(1), 2, 3)
    assert set(medians) == {"a", "b", "c"}
    assert all(v >= 0 for v in medians.values())
    assert calls == ["a", "a", "b", "b", "c", "c", "b", "b", "c", "c", "a", "a", "c", "c", "a", "a", "b", "b"]
    assert len(syncs) == 2 * 3 * 3


def _engines(tmp_path: Path, body: str) -> Path:
    """A folder of packages ``cupy`` and ``torch`` whose import runs ``body``."""
    folder = tmp_path / "engines"
    for name in ("cupy", "torch"):
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(body.format(name=name))
    return folder


def _args(timeout: float = 60.0) -> argparse.Namespace:
    return argparse.Namespace(quick=True, phase_timeout=timeout)


@pytest.mark.parametrize("phase", ["collectives-cupy", "ddp-aml"])
def test_a_phase_without_its_engine_is_skipped_with_the_reason(
    phase: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engines = _engines(tmp_path, "raise ImportError('{name} is blocked for this test')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(engines), str(ROOT), str(ROOT / "backends/cuda")]))
    result = nccl_bench.run_phase(phase, tmp_path, _args())
    assert result["status"] == "skipped", result
    engine = "CuPy" if phase.endswith("cupy") else "PyTorch"
    assert f"{engine} is not importable" in result["reason"]
    assert result["exit_codes"] == [0, 0]
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    for rank in (0, 1):
        assert f"rank {rank}: skipped" in (tmp_path / f"{phase}-rank{rank}.log").read_text()
    text = nccl_bench.markdown({"meta": _meta(), "phases": {phase: result}})
    assert f"## {phase}" in text
    assert "Skipped: " + result["reason"] in text
    assert nccl_bench.checks_passed(result)


def test_a_failing_rank_fails_the_phase_with_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engines = _engines(tmp_path, "raise RuntimeError('{name} is broken for this test')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(engines), str(ROOT), str(ROOT / "backends/cuda")]))
    result = nccl_bench.run_phase("collectives-cupy", tmp_path, _args())
    assert result["status"] == "error"
    assert result["exit_codes"] == [1, 1]
    assert "RuntimeError: cupy is broken for this test" in result["error"]
    log = (tmp_path / "collectives-cupy-rank1.log").read_text()
    assert "Traceback" in log
    assert "cupy is broken for this test" in log
    text = nccl_bench.markdown({"meta": _meta(), "phases": {"collectives-cupy": result}})
    assert "**Failed**" in text
    assert "collectives-cupy-rank0.log" in text


def test_a_rank_that_hangs_is_killed_at_the_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engines = _engines(tmp_path, "import time\ntime.sleep(120)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(engines), str(ROOT), str(ROOT / "backends/cuda")]))
    result = nccl_bench.run_phase("ddp-torch", tmp_path, _args(timeout=3))
    assert result["status"] == "error"
    assert result["error"] == "timed out after 3 s"
    assert result["seconds"] < 60
    assert all(code is not None and code < 0 for code in result["exit_codes"])  # killed
    assert all(r["error"] == f"rank {i} wrote no result" for i, r in enumerate(result["ranks"]))


def _meta() -> dict[str, object]:
    return {
        "date": "today",
        "gpus": [],
        "cpu": "cpu",
        "cores": "2",
        "python": "3.11",
        "environment": nccl_bench.NO_MULTICAST,
    }
