"""benchmarks/nccl_bench.py without GPUs: its arguments, the skip on fewer than two GPUs, the
data its checks use, and the launcher's handling of a pair of ranks that skip, fail or hang
(the ranks run for real, as processes; their engines are replaced by packages that cannot be
imported). Nothing here is timed; the two-GPU run is the GPU machine's."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from tests.support.benchmark_scripts import BENCH, load_benchmark

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = BENCH / "nccl_bench.py"


nccl_bench = load_benchmark("nccl_bench")


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


def test_the_ddp_phases_alternate_rounds_and_flip_their_order() -> None:
    phases = nccl_bench.PHASES
    assert nccl_bench.schedule(phases, 1) == [(p, p) for p in phases]
    assert nccl_bench.schedule(phases, 3) == [
        ("collectives-cupy", "collectives-cupy"),
        ("collectives-torch", "collectives-torch"),
        ("ddp-torch", "ddp-torch-1"),
        ("ddp-aml", "ddp-aml-1"),
        ("ddp-aml", "ddp-aml-2"),
        ("ddp-torch", "ddp-torch-2"),
        ("ddp-torch", "ddp-torch-3"),
        ("ddp-aml", "ddp-aml-3"),
    ]
    assert nccl_bench.parse_args(["--quick"]).ddp_rounds == 1


def _ddp_run(phase: str, label: str, rate: float, checksum: float = 1.5) -> dict[str, object]:
    rank = {
        "status": "ok",
        "steps_per_s": rate,
        "checksum": checksum,
        "samples": 9,
        "steps": 25,
        "ranks_in_sync": True,
        "allocator": phase,
    }
    return {"phase": phase, "label": label, "status": "ok", "ranks": [rank, rank]}


def test_the_ddp_ratio_is_of_the_medians_over_the_rounds() -> None:
    phases = {
        "ddp-torch-1": _ddp_run("ddp-torch", "ddp-torch-1", 100.0),
        "ddp-aml-1": _ddp_run("ddp-aml", "ddp-aml-1", 92.0),
        "ddp-aml-2": _ddp_run("ddp-aml", "ddp-aml-2", 110.0),
        "ddp-torch-2": _ddp_run("ddp-torch", "ddp-torch-2", 95.0),
        "ddp-torch-3": _ddp_run("ddp-torch", "ddp-torch-3", 105.0),
        "ddp-aml-3": _ddp_run("ddp-aml", "ddp-aml-3", 101.0),
    }
    results: dict[str, object] = {"meta": _meta(), "phases": phases}
    nccl_bench.summarize(results)
    ddp = results["ddp"]
    assert isinstance(ddp, dict)
    assert ddp["torch_steps_per_s"] == 100.0
    assert ddp["aml_steps_per_s"] == 101.0
    assert ddp["aml_over_torch"] == pytest.approx(1.01)
    # the headline is the median pair, and three pairs on both sides of 1 show nothing
    assert ddp["paired"]["median"] == pytest.approx(101 / 105)
    assert ddp["verdict"] == "not shown"
    assert not ddp["meets_target"]
    assert ddp["same_parameters"]
    assert ddp["round_ratios"] == pytest.approx([0.92, 110 / 95, 101 / 105])
    text = nccl_bench.markdown(results)
    assert "the median of 3 alternating pairs: 0.962x" in text
    assert "(target >= 1.0x: not shown; the ratio of the medians" in text
    assert "is 1.010x)" in text
    assert "0.920, 1.158, 0.962" in text
    phases["ddp-aml-3"] = _ddp_run("ddp-aml", "ddp-aml-3", 101.0, checksum=2.5)
    nccl_bench.summarize(results)
    assert not results["ddp"]["same_parameters"]  # type: ignore[index]


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
    times = nccl_bench.timed_samples(["a", "b", "c"], calls.append, lambda: syncs.append(1), 2, 3)
    assert set(times) == {"a", "b", "c"}
    assert all(len(v) == 3 and min(v) >= 0 for v in times.values())
    assert calls == ["a", "a", "b", "b", "c", "c", "b", "b", "c", "c", "a", "a", "c", "c", "a", "a", "b", "b"]
    assert len(syncs) == 2 * 3 * 3


def test_paired_ratios_compare_samples_taken_side_by_side() -> None:
    base = [10.0, 20.0, 10.0, 20.0, 10.0]
    # a slow stretch moves both: side by side the kind is 1.1x slower in every turn
    assert nccl_bench.paired_ratios([11.0, 22.0, 11.0, 22.0, 11.0], base) == pytest.approx((1.1, 1.1, 1.1))
    q1, q2, q3 = nccl_bench.paired_ratios([9.0, 22.0, 10.0, 21.0, 11.0], base)
    assert q1 < 1 < q3
    assert q2 == pytest.approx(1.05)
    assert nccl_bench.paired_ratios([3.0], [2.0]) == (1.5, 1.5, 1.5)
    with pytest.raises(ValueError, match="shorter"):
        nccl_bench.paired_ratios([1.0, 2.0], [1.0])


def _engines(tmp_path: Path, body: str) -> Path:
    """A folder of packages ``cupy`` and ``torch`` whose import runs ``body``."""
    folder = tmp_path / "engines"
    for name in ("cupy", "torch"):
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text(body.format(name=name))
    return folder


def _args(timeout: float = 60.0, pin: bool = True) -> argparse.Namespace:
    return argparse.Namespace(quick=True, phase_timeout=timeout, pin=pin)


@pytest.mark.parametrize("phase", ["collectives-cupy", "ddp-aml"])
def test_a_phase_without_its_engine_is_skipped_with_the_reason(
    phase: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engines = _engines(tmp_path, "raise ImportError('{name} is blocked for this test')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(engines), str(ROOT), str(ROOT / "backends/cuda")]))
    result = nccl_bench.run_phase(phase, phase, tmp_path, _args())
    assert result["status"] == "skipped", result
    engine = "CuPy" if phase.endswith("cupy") else "PyTorch"
    assert f"{engine} is not importable" in result["reason"]
    assert result["exit_codes"] == [0, 0]
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    # each rank ran on its own share of the CPUs (all of them, on a machine with one)
    mine = os.sched_getaffinity(0)
    for rank, report in enumerate(result["ranks"]):
        assert report["cpus"] == (nccl_bench.rank_cpus(rank, mine) or sorted(mine))
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
    result = nccl_bench.run_phase("collectives-cupy", "collectives-cupy", tmp_path, _args())
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
    result = nccl_bench.run_phase("ddp-torch", "ddp-torch", tmp_path, _args(timeout=3))
    assert result["status"] == "error"
    assert result["error"] == "timed out after 3 s"
    assert result["seconds"] < 60
    assert all(code is not None and code < 0 for code in result["exit_codes"])  # killed
    assert all(r["error"] == f"rank {i} wrote no result" for i, r in enumerate(result["ranks"]))


def test_each_rank_gets_its_own_half_of_the_physical_cores() -> None:
    def own_core(cpu: int) -> tuple[int, int]:
        return -1, cpu

    assert nccl_bench.rank_cpus(0, set(range(32)), own_core) == list(range(16))
    assert nccl_bench.rank_cpus(1, set(range(32)), own_core) == list(range(16, 32))
    assert nccl_bench.rank_cpus(1, {0, 2, 5, 7, 9}, own_core) == [5, 7]  # in order; the remainder unused
    assert nccl_bench.rank_cpus(0, {3}, own_core) is None  # fewer cores than ranks: no pinning
    with pytest.raises(ValueError, match="rank 2"):
        nccl_bench.rank_cpus(2, set(range(4)), own_core)


def test_hardware_threads_of_one_core_go_to_one_rank() -> None:
    def paired(cpu: int) -> tuple[int, int]:  # 16 cores, core c's threads numbered c and c + 16
        return 0, cpu % 16

    assert nccl_bench.rank_cpus(0, set(range(32)), paired) == [*range(8), *range(16, 24)]
    assert nccl_bench.rank_cpus(1, set(range(32)), paired) == [*range(8, 16), *range(24, 32)]
    assert nccl_bench.rank_cpus(0, {0, 16}, paired) is None  # one core: nothing to share out
    on_this_machine = [nccl_bench.rank_cpus(r, os.sched_getaffinity(0)) for r in range(2)]
    if all(on_this_machine):
        cores = [{nccl_bench.cpu_core(c) for c in cpus or []} for cpus in on_this_machine]
        assert not cores[0] & cores[1]


def test_the_placement_is_said_as_cpu_lists() -> None:
    assert nccl_bench.cpu_list([16, 17, 0, 1, 2, 5]) == "0-2,5,16-17"
    assert nccl_bench.placement([[0, 1, 2, 3], [4, 5, 6, 7]]) == (
        "Each rank on its own physical cores: rank 0 on CPUs 0-3, rank 1 on CPUs 4-7."
    )
    assert nccl_bench.placement([[0, 1, 16, 17], [2, 3, 18, 19]]).endswith(
        "rank 0 on CPUs 0-1,16-17, rank 1 on CPUs 2-3,18-19."
    )
    assert nccl_bench.placement([None, None]) == "The ranks' CPUs were left to the scheduler."


def test_no_pin_leaves_the_ranks_to_the_scheduler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engines = _engines(tmp_path, "raise ImportError('{name} is blocked for this test')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(engines), str(ROOT), str(ROOT / "backends/cuda")]))
    result = nccl_bench.run_phase("ddp-torch", "ddp-torch", tmp_path, _args(pin=False))
    assert result["status"] == "skipped"
    assert all(r["cpus"] == sorted(os.sched_getaffinity(0)) for r in result["ranks"])
    assert nccl_bench.parse_args(["--no-pin"]).pin is False
    assert nccl_bench.parse_args([]).pin is True


def _meta() -> dict[str, object]:
    return {
        "date": "today",
        "gpus": [],
        "cpu": "cpu",
        "cores": "2",
        "python": "3.11",
        "environment": nccl_bench.NO_MULTICAST,
    }


class _LoopbackEngine:
    """A rank of two in one process: the peer's contribution is what it would send. A
    receive buffer in ``faulty`` gets one wrong element per collective."""

    base = "loopback"
    versions: ClassVar[dict[str, int]] = {"loopback": 1}
    faulty: ClassVar[list[np.ndarray]] = []  # kept alive: compared by memory

    def __init__(self, rank: int, folder: Path) -> None:
        self.rank = rank
        self.closed = False

    def empty(self, count: int) -> np.ndarray:
        return np.empty(count, dtype=np.float32)

    def view(self, buf: np.ndarray, count: int) -> np.ndarray:
        return buf.view(np.float32)[:count]

    def collective(self, op: str, send: np.ndarray, recv: np.ndarray, count: int) -> None:
        peer = nccl_bench.fill_values(np, count, 1 - self.rank)
        if op == "allreduce":
            recv[:count] = send + peer
        else:
            parts = [send, peer] if self.rank == 0 else [peer, send]
            recv[:] = np.concatenate(parts)
        if any(np.shares_memory(recv, buf) for buf in self.faulty):
            recv[0] += 1

    def check(self, op: str, send: np.ndarray, recv: np.ndarray, count: int) -> int:
        send[...] = nccl_bench.fill_values(np, count, self.rank)
        recv.fill(-1)
        self.collective(op, send, recv, count)
        expected = (
            nccl_bench.allreduce_expected(np, count, 2)
            if op == "allreduce"
            else nccl_bench.allgather_expected(np, count, 2)
        )
        return nccl_bench.mismatches(np, recv[:count] if op == "allreduce" else recv, expected)

    def sync(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class _HostMemory:
    """The aml kinds as host byte arrays; ``vmm`` receive buffers are faulty."""

    made: ClassVar[list[tuple[str, int]]] = []

    def __init__(self, rank: int) -> None:
        self.live: list[np.ndarray] = []
        self.closed = False

    def mmap(self, kind: str, nbytes: int) -> np.ndarray:
        buf = np.zeros(nbytes, dtype=np.uint8)
        self.made.append((kind, nbytes))
        if kind == "aml-vmm" and nbytes > nccl_bench.MiB:  # the receive buffers (2 x the size)
            _LoopbackEngine.faulty.append(buf)
        self.live.append(buf)
        return buf

    def free_all(self) -> None:
        self.live.clear()

    def close(self) -> None:
        self.closed = True


def test_a_rank_checks_every_kind_and_op_and_reports_wrong_results(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The rank's loop (sizes, ops, kinds, checks before and after the timing, rows) over
    an engine that runs in one process; one kind's results are wrong and are reported."""
    monkeypatch.setattr(nccl_bench, "CupyEngine", _LoopbackEngine)
    monkeypatch.setattr(nccl_bench, "AmlMemory", _HostMemory)
    monkeypatch.setattr(nccl_bench, "QUICK_SIZES", (nccl_bench.MiB, 2 * nccl_bench.MiB))
    _HostMemory.made.clear()
    _LoopbackEngine.faulty.clear()
    report = nccl_bench.collectives("cupy", 0, tmp_path, quick=True)
    kinds = ["loopback", *nccl_bench.AML_KINDS]
    assert report["base"] == "loopback"
    assert [(r["op"], r["size"], r["kind"]) for r in report["rows"]] == [
        (op, size, kind) for size in nccl_bench.QUICK_SIZES for op in nccl_bench.OPS for kind in kinds
    ]
    for row in report["rows"]:
        assert row["median_us"] > 0
        assert len(row["samples_us"]) == nccl_bench.QUICK_SAMPLES[1]
        assert row["median_us"] == statistics.median(row["samples_us"])
        assert row["GBps"] > 0
        assert row["mismatches"] == (2 if row["kind"] == "aml-vmm" else 0)  # before and after
    assert len(report["failed_checks"]) == 4
    assert all("over aml-vmm: 2 wrong elements" in f for f in report["failed_checks"])
    # a send and a receive buffer (twice the size) of each aml kind, for each size
    assert sorted(_HostMemory.made) == sorted(
        (kind, n * size) for kind in nccl_bench.AML_KINDS for size in nccl_bench.QUICK_SIZES for n in (1, 2)
    )
    result = {"status": "ok", "ranks": [report, report]}
    assert not nccl_bench.checks_passed(result)
    results = {"meta": _meta(), "phases": {"collectives-cupy": result}}
    nccl_bench.summarize(results)
    assert all(r["over_base_time"] is not None for r in report["rows"])  # every row has its ratio to the base
    text = nccl_bench.markdown(results)
    assert "FAILED" in text
    assert "**Failed checks**" in text
