"""The framework workload benchmarks (benchmarks/torch_workloads.py, cupy_workloads.py and
their workload_driver.py) without a GPU: arguments, the schedule, the parent's handling of
children that skip, fail, crash or time out, the summary, the markdown and the files, and
the skip-with-reason path when PyTorch, CuPy or RMM are missing. Nothing here is timed."""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.benchmark_scripts import BENCH, load_benchmark

driver = load_benchmark("workload_driver")
torch_workloads = load_benchmark("torch_workloads")
cupy_workloads = load_benchmark("cupy_workloads")
SUITES = [torch_workloads.SUITE, cupy_workloads.SUITE]


@pytest.fixture
def blocked(tmp_path: Path) -> dict[str, str]:
    """An environment in which ``import torch``, ``cupy`` and ``rmm`` fail (whether or
    not they are installed here), as on a machine without them."""
    block = tmp_path / "blocked"
    for name in ("torch", "cupy", "rmm"):
        (block / name).mkdir(parents=True)
        (block / name / "__init__.py").write_text(f"raise ImportError('{name} is blocked for this test')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(block), env.get("PYTHONPATH", "")) if p)
    env.pop("OUT", None)
    return env


# -- arguments and schedule --------------------------------------------------------------------


@pytest.mark.parametrize("suite", SUITES, ids=lambda s: s.name)
def test_defaults_run_ten_repeats_within_the_budget(suite: Any) -> None:
    args = driver.parse_args(suite, [])
    assert (args.repeats, args.budget, args.child_timeout, args.child) == (
        10,
        suite.budget_s,
        suite.child_timeout_s,
        None,
    )
    quick = driver.parse_args(suite, ["--quick"])
    assert quick.repeats == 1
    assert quick.budget == suite.quick_budget_s
    assert quick.child_timeout <= quick.budget


def test_a_child_names_its_allocator_and_workloads() -> None:
    args = driver.parse_args(torch_workloads.SUITE, ["--child", "aml", "train,infer", "--seed", "7"])
    assert args.child == ("aml", ("train", "infer"))
    assert args.seed == 7


@pytest.mark.parametrize(
    "argv",
    [
        ["--child", "nope", "train"],
        ["--child", "aml", "train,nope"],
        ["--child", "aml", ","],
        ["--allocators", "torch,nope"],
        ["--workloads", "fft"],
        ["--repeats", "0"],
    ],
)
def test_bad_arguments_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        driver.parse_args(torch_workloads.SUITE, argv)
    assert info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_the_selection_narrows_the_pairs() -> None:
    suite = torch_workloads.SUITE
    args = driver.parse_args(suite, ["--allocators", "torch,aml", "--workloads", "infer"])
    assert driver.selected_pairs(suite, args) == [("torch", "infer"), ("aml", "infer")]


def test_torch_expandable_runs_the_training_loop_only() -> None:
    pairs = set(torch_workloads.SUITE.pairs)
    assert ("torch-expandable", "train") in pairs
    assert ("torch-expandable", "infer") not in pairs


@pytest.mark.parametrize("suite", SUITES, ids=lambda s: s.name)
def test_the_suites_describe_what_they_run(suite: Any) -> None:
    assert suite.native in suite.allocators
    for alloc, workload in suite.pairs:
        assert alloc in suite.allocators
        assert suite.workload(workload).name == workload
    for w in suite.workloads:
        keys = [m.key for m in w.metrics]
        assert len(keys) == len(set(keys))
        assert all(m.meaning and m.kind in ("rate", "us", "bytes") for m in w.metrics)


def test_the_schedule_interleaves_and_rotates() -> None:
    pairs = list(torch_workloads.SUITE.pairs)
    plan = driver.schedule(pairs, 3, group=False)
    assert len(plan) == 3 * len(pairs)
    firsts = []
    for rep in range(3):
        mine = [(a, ws) for r, a, ws in plan if r == rep]
        assert sorted((a, ws[0]) for a, ws in mine) == sorted(pairs)  # every pair once a repeat
        workloads = [ws[0] for _, ws in mine]
        assert workloads == sorted(workloads, key=["train", "infer"].index)  # one workload, then the next
        firsts.append(mine[0][0])
    assert len(set(firsts)) == 3  # no allocator always runs first


def test_quick_runs_one_child_per_allocator() -> None:
    plan = driver.schedule(list(torch_workloads.SUITE.pairs), 1, group=True)
    assert plan == [
        (0, "torch", ("train", "infer")),
        (0, "torch-expandable", ("train",)),
        (0, "aml", ("train", "infer")),
        (0, "aml-expandable", ("train", "infer")),
        (0, "rmm", ("train", "infer")),
    ]


# -- the parent with scripted children ---------------------------------------------------------


def _ok(alloc: str, workloads: Sequence[str], value: float, seconds: float = 1.0) -> dict[str, Any]:
    rows = {w: {"steps_per_s": value, "us_per_op": value, "peak_reserved": value * 1e6} for w in workloads}
    return {
        "status": "ok",
        "allocator": alloc,
        "workloads": rows,
        "seconds": seconds,
        "env": {"torch": "9.9"},
    }


class Scripted:
    """The parent's runner for tests: answers each command as its allocator says."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.cmds: list[list[str]] = []

    def __call__(self, cmd: Sequence[str], timeout: float) -> dict[str, Any]:
        self.cmds.append(list(cmd))
        i = cmd.index("--child")
        alloc, workloads = cmd[i + 1], cmd[i + 2].split(",")
        return dict(self.answer(alloc, workloads, len(self.cmds)))


def _args(suite: Any, *argv: str) -> argparse.Namespace:
    args: argparse.Namespace = driver.parse_args(suite, list(argv))
    return args


def test_a_skipped_allocator_is_not_started_again_and_a_failed_pair_not_retried() -> None:
    suite = torch_workloads.SUITE

    def answer(alloc: str, workloads: list[str], n: int) -> dict[str, Any]:
        if alloc == "rmm":
            return {"status": "skipped", "reason": "rmm is not importable", "seconds": 0.5}
        if alloc == "aml-expandable":
            return {"status": "error", "reason": "exit status -11 and no result line", "seconds": 2.0}
        if alloc == "aml" and workloads == ["infer"]:
            return {
                "status": "ok",
                "workloads": {"infer": {"error": "RuntimeError: out of memory"}},
                "seconds": 1,
            }
        return _ok(alloc, workloads, 100.0 + n)

    runner = Scripted(answer)
    r = driver.drive(suite, _args(suite, "--budget", "1e9"), BENCH / "torch_workloads.py", runner=runner)
    started = [c[c.index("--child") + 1 : c.index("--child") + 3] for c in runner.cmds]
    assert started.count(["rmm", "train"]) == 1
    assert ["rmm", "infer"] not in started
    assert started.count(["aml-expandable", "train"]) == 1
    assert started.count(["aml-expandable", "infer"]) == 1
    assert started.count(["aml", "infer"]) == 1
    assert started.count(["aml", "train"]) == 10  # the default repeats
    assert r["skipped"] == {"rmm": "rmm is not importable"}
    assert set(r["failed"]) == {"aml-expandable / train", "aml-expandable / infer", "aml / infer"}
    assert "out of memory" in r["failed"]["aml / infer"]
    assert all(c[0] == sys.executable and "--seed" in c for c in runner.cmds)
    assert r["meta"]["torch"] == "9.9"
    measured = {(row["workload"], row["allocator"]) for row in r["summary"]}
    assert measured == {
        ("train", "torch"),
        ("train", "torch-expandable"),
        ("train", "aml"),
        ("infer", "torch"),
    }


def test_no_child_starts_past_the_budget() -> None:
    suite = cupy_workloads.SUITE
    runner = Scripted(lambda alloc, workloads, n: _ok(alloc, workloads, 1.0, seconds=30.0))
    r = driver.drive(suite, _args(suite, "--budget", "5"), BENCH / "cupy_workloads.py", runner=runner)
    assert len(runner.cmds) == 1  # the first starts (nothing measured yet); the next would pass the budget
    assert len(r["not_run"]) == len(r["plan"]) - 1
    assert r["not_run"][0].startswith("repeat 1: ")


def test_quick_children_get_quick_and_all_their_workloads() -> None:
    suite = cupy_workloads.SUITE
    runner = Scripted(lambda alloc, workloads, n: _ok(alloc, workloads, 1.0))
    driver.drive(suite, _args(suite, "--quick"), BENCH / "cupy_workloads.py", runner=runner)
    assert len(runner.cmds) == len(suite.allocators)
    assert all(c[-1] == "--quick" and "elementwise,fft" in c for c in runner.cmds)


# -- summary, markdown, files ------------------------------------------------------------------


def _run(alloc: str, workload: str, rep: int, **values: float) -> dict[str, Any]:
    return {"status": "ok", "allocator": alloc, "repeat": rep, "workloads": {workload: dict(values)}}


def _synthetic() -> dict[str, Any]:
    suite = torch_workloads.SUITE
    runs = [
        _run("torch", "train", 0, steps_per_s=100, peak_reserved=2000 * 2**20, device_used=2100 * 2**20),
        _run("torch", "train", 1, steps_per_s=110, peak_reserved=2000 * 2**20),
        _run("torch", "train", 2, steps_per_s=90, peak_reserved=2000 * 2**20),
        _run("aml", "train", 0, steps_per_s=95, peak_reserved=1500 * 2**20),
        _run("aml", "train", 1, steps_per_s=99, peak_reserved=1500 * 2**20, peak_in_use=float("nan")),
        _run("aml", "train", 2, steps_per_s=90, peak_reserved=1500 * 2**20),
        _run("aml", "infer", 0, us_per_op=20.0),
        {"status": "ok", "allocator": "aml", "repeat": 1, "workloads": {"infer": {"error": "boom"}}},
        {"status": "skipped", "allocator": "rmm", "repeat": 0, "reason": "rmm is not importable"},
    ]
    runs[4]["workloads"]["train"]["note"] = "the aml hook recorded 1 error(s), first: AMLMemoryError()"
    return {
        "quick": False,
        "repeats": 3,
        "budget_s": 240.0,
        "meta": {"date": "2026-11-26", "gpu": "NVIDIA H200", "driver": "580.159.03"},
        "runs": runs,
        "skipped": {"rmm": "rmm is not importable"},
        "failed": {"aml / infer": "repeat 2: boom"},
        "not_run": ["repeat 3: torch on infer"],
        "summary": driver.summarize(suite, runs),
        "seconds": 12.0,
    }


def test_the_summary_takes_medians_and_same_run_ratios() -> None:
    rows = {(row["workload"], row["allocator"]): row for row in _synthetic()["summary"]}
    assert set(rows) == {("train", "torch"), ("train", "aml"), ("infer", "aml")}
    aml = rows[("train", "aml")]
    assert aml["runs"] == 3
    assert aml["metrics"]["steps_per_s"]["median"] == 95
    assert (aml["metrics"]["steps_per_s"]["min"], aml["metrics"]["steps_per_s"]["max"]) == (90, 99)
    # the median of the repeats' pairs (95/100, 99/110, 90/90), not the ratio of the medians
    assert aml["paired"]["steps_per_s"]["ratios"] == pytest.approx([0.95, 0.9, 1.0])
    assert aml["ratios"]["steps_per_s"] == pytest.approx(0.95)
    assert aml["ratio_of_medians"]["steps_per_s"] == pytest.approx(95 / 100)
    low, high = aml["paired"]["steps_per_s"]["median_95"]
    assert 0.9 <= low <= 0.95 <= high <= 1.0
    assert aml["ratios"]["peak_reserved"] == pytest.approx(0.75)
    assert rows[("train", "torch")]["ratios"]["steps_per_s"] == 1.0  # no self-comparison figures
    assert rows[("train", "torch")]["paired"] == {}
    assert "peak_in_use" not in aml["metrics"]  # a NaN is no figure
    assert rows[("infer", "aml")]["ratios"] == {}  # no torch figure to divide by
    assert rows[("infer", "aml")]["metrics"]["us_per_op"]["values"] == [20.0]


def test_the_markdown_gives_tables_ratios_reasons_and_meanings() -> None:
    md = driver.render(torch_workloads.SUITE, _synthetic())
    assert md.startswith("# PyTorch workloads on aml's hook and its peers, 2026-11-26")
    assert "gpu NVIDIA H200, driver 580.159.03." in md
    assert "Skipped: `rmm` (rmm is not importable)." in md
    assert "Failed: `aml / infer` (repeat 2: boom)." in md
    assert "Not run (time budget of 240 s): repeat 3: torch on infer." in md
    assert (
        "| `aml` | 3 | 95.0 (90.0..99.0) | 0.950 (0.900-1.000) | 1,500 (1,500..1,500) | 0.750 (0.750-0.750) "
        "| - | - | - | - |" in md
    )
    assert (
        "| `torch` | 3 | 100.0 (90.0..110.0) | 1.000 | 2,000 (2,000..2,000) | 1.000 | - | - | 2,100 | 1.000 |"
        in md
    )
    assert "| `aml` | 1 | 20.00 | - |" in md
    assert "the aml hook recorded 1 error(s)" in md
    for w in torch_workloads.SUITE.workloads:
        for m in w.metrics:
            assert m.meaning in md
    for text in torch_workloads.SUITE.allocators.values():
        assert text in md


def test_the_files_are_written(tmp_path: Path) -> None:
    r = _synthetic()
    r["runs"][0]["log"] = "a child's stderr\n"
    md = driver.write(torch_workloads.SUITE, r, tmp_path / "run", "tw")
    assert (tmp_path / "run" / "tw.md").read_text() == md
    back = json.loads((tmp_path / "run" / "tw.json").read_text())
    assert back["summary"] == json.loads(json.dumps(r["summary"]))
    assert "a child's stderr" in (tmp_path / "run" / "tw.log").read_text()
    for name in back["plots"]:
        assert (tmp_path / "run" / name).stat().st_size > 0
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        assert back["plots"] == []
    else:
        assert back["plots"] == ["tw_train.png", "tw_infer.png"]


# -- children ------------------------------------------------------------------------------------


def test_a_child_result_is_read_from_its_last_marked_line() -> None:
    mark = driver.RESULT_MARK
    assert driver.parse_result(f'noise\n{mark}{{"status": "ok"}}\nmore\n') == {"status": "ok"}
    assert driver.parse_result("no result\n") is None
    assert driver.parse_result(f"{mark}not json\n") is None
    assert driver.parse_result(f"{mark}[1, 2]\n") is None


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_child_that_times_out_crashes_or_says_nothing_is_an_error_with_its_output() -> None:
    slow = driver.run_child(_py("import time; print('started', flush=True); time.sleep(30)"), timeout=1.0)
    assert slow["status"] == "error"
    assert slow["reason"] == "timed out after 1 s"
    assert "started" in slow["log"]
    crash = driver.run_child(_py("import sys; sys.stderr.write('it broke'); sys.exit(4)"), timeout=30)
    assert (crash["status"], crash["reason"]) == ("error", "exit status 4 and no result line")
    assert "it broke" in crash["log"]
    late = driver.run_child(
        _py(f'import os; print({driver.RESULT_MARK!r} + \'{{"status": "ok"}}\', flush=True); os.abort()'),
        timeout=30,
    )
    assert late["status"] == "ok"
    assert late["exit_status"] < 0  # the result stands; the crash after it is written down
    missing = driver.run_child(["/nonexistent/python"], timeout=30)
    assert missing["status"] == "error"
    assert missing["reason"].startswith("could not start")


CHILD = """
import sys
sys.path.insert(0, {bench!r})
import workload_driver as d

def install(alloc):
    if alloc == "broken":
        raise RuntimeError("no such device")
    frees = iter([1000, 400])
    return d.Installed(None, quick=True, seed=0, sync=lambda: None, free_memory=frees.__next__).start()

def fails(inst):
    raise ValueError("bad shape")

def works(inst):
    return {{"value": 1.5, **inst.memory()}}

runners = {{"fails": fails, "works": works}}
d.child_main(sys.argv[1], ["fails", "works"], install, runners, lambda inst: {{"v": "1"}})
"""


def test_a_child_reports_a_failed_workload_and_runs_the_next() -> None:
    out = driver.run_child([*_py(CHILD.format(bench=str(BENCH))), "fine"], timeout=60)
    assert out["status"] == "ok"
    assert out["workloads"]["fails"]["error"] == "ValueError: bad shape"
    assert "bad shape" in out["log"]  # the traceback, for the run's log
    works = out["workloads"]["works"]
    assert (works["value"], works["device_used"], works["peak_reserved"]) == (1.5, 600, None)
    assert out["env"] == {"v": "1"}
    assert "exit_status" not in out


def test_a_child_whose_allocator_fails_to_install_is_skipped_with_why() -> None:
    out = driver.run_child([*_py(CHILD.format(bench=str(BENCH))), "broken"], timeout=60)
    assert out["status"] == "skipped"
    assert out["reason"] == "install failed: RuntimeError: no such device"
    assert out["workloads"] == {}


def test_the_memory_figures_name_the_hooks_errors() -> None:
    class Hook:
        def __init__(self) -> None:
            self.errors = [MemoryError("pool exhausted")]

    frees: Iterator[int] = iter([5000, 2000])
    inst = driver.Installed(None, quick=True, seed=0, sync=lambda: None, free_memory=lambda: next(frees))
    inst.peak_reserved = lambda: 42
    inst.hook = Hook()
    inst.details = {"capacity": 7}
    got = inst.start().memory()
    assert got["peak_reserved"] == 42
    assert got["device_used"] == 3000
    assert got["hook_errors"] == 1
    assert "pool exhausted" in got["note"]
    assert got["capacity"] == 7


@pytest.mark.parametrize(
    ("script", "alloc", "workloads", "missing"),
    [
        ("torch_workloads.py", "aml", "train", "torch"),
        ("torch_workloads.py", "rmm", "infer", "torch"),
        ("cupy_workloads.py", "aml-expandable", "fft", "cupy"),
        ("cupy_workloads.py", "rmm", "elementwise,fft", "cupy"),
    ],
)
def test_a_child_without_its_framework_is_skipped_with_why(
    blocked: dict[str, str], script: str, alloc: str, workloads: str, missing: str
) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--child", alloc, workloads],
        capture_output=True,
        text=True,
        timeout=120,
        env=blocked,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = driver.parse_result(proc.stdout)
    assert out is not None
    assert out["status"] == "skipped"
    assert out["reason"].startswith(f"{missing} is not importable (ImportError: {missing} is blocked")


def _bare() -> Any:
    return driver.Installed(None, quick=True, seed=0, sync=lambda: None, free_memory=lambda: 0)


def test_a_missing_rmm_is_a_skip_before_anything_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "rmm", None)  # import rmm raises ImportError
    installed: list[object] = []
    inst = _bare()
    with pytest.raises(driver.Skip, match=r"^rmm is not importable \(ModuleNotFoundError"):
        inst.use_rmm("rmm.allocators.torch", "rmm_torch_allocator", installed.append)
    assert installed == []
    assert inst.peak_reserved is None


def test_a_missing_aml_backend_is_a_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aml_cuda", None)
    inst = _bare()
    with pytest.raises(driver.Skip, match=r"^aml_cuda is not importable"):
        inst.use_aml(expandable=True, hook="use_with_torch")
    assert inst.hook is None


def test_a_whole_run_without_the_frameworks_writes_its_files_and_says_nothing_was_measured(
    blocked: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "torch_workloads.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=blocked,
        check=False,
    )
    assert proc.returncode == driver.NOTHING_MEASURED, proc.stderr
    r = json.loads((out / "torch_workloads.json").read_text())
    assert set(r["skipped"]) == set(torch_workloads.SUITE.allocators)
    assert all(reason.startswith("torch is not importable") for reason in r["skipped"].values())
    assert r["summary"] == []
    md = (out / "torch_workloads.md").read_text()
    assert "Skipped: `torch` (torch is not importable" in md
    assert md.strip() in proc.stdout


# -- the CuPy loops on an array module with CuPy's API (NumPy) ------------------------------------


def test_the_cupy_loops_run_and_report_their_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    np = pytest.importorskip("numpy")
    monkeypatch.setattr(cupy_workloads, "ELEMENTWISE_SIZES", (16, 64, 256))
    monkeypatch.setattr(cupy_workloads, "FFT_SIZES", (16, 64))
    frees = iter([1000, 900, 800])
    inst = driver.Installed(
        np, quick=True, seed=3, sync=lambda: None, free_memory=lambda: next(frees)
    ).start()
    inst.peak_reserved = lambda: 4096
    for run, iterations in ((cupy_workloads.elementwise, 1000), (cupy_workloads.fft, 300)):
        got = run(inst)
        assert got["iterations"] == iterations
        assert got["it_per_s"] > 0
        assert math.isfinite(got["it_per_s"])
        assert got["peak_reserved"] == 4096
    assert got["device_used"] == 200
