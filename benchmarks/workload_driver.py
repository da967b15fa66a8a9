"""What the framework workload benchmarks share (``torch_workloads.py``,
``cupy_workloads.py``): one process per (allocator, workload) pair, a parent that runs
them interleaved and summarizes, and the child's side of that exchange.

A framework takes one allocator per process (PyTorch's ``CUDAPluggableAllocator`` only
before its first allocation, for good), so every measurement runs in a child process:
``python benchmarks/<suite>.py --child ALLOCATOR WORKLOAD[,WORKLOAD]``. The parent

* runs every pair ``--repeats`` times (10, ``paired_stats.MIN_WORKLOAD_REPEATS``),
  interleaved: each repeat runs every allocator for one workload, then the next workload,
  the allocators' order alternating (``paired_stats.alternating``: each two allocators swap
  order as often as not) (``--quick``: one repeat, one child per allocator running all its
  workloads);
* does not start a child that would end past its time budget (``--budget``), taking the
  median of the children's run times so far as the next one's, and kills a child that runs
  past ``--child-timeout`` (so a run ends by about ``--budget``, at worst ``--budget`` plus
  one ``--child-timeout``);
* skips an allocator whose child reports it cannot start (a package missing, no GPU,
  a failed install), with the child's reason, and a pair whose child failed (its error
  and the log's tail are kept), without stopping the run;
* writes ``<name>.json`` (every child's result), ``<name>.md`` (medians over repeats,
  min..max, and each figure's ratio to the framework's own allocator: the median of the
  repeats' paired ratios with its bootstrap 95% interval, ``paired_stats.summarize``),
  ``<name>_<workload>.png`` (if matplotlib is there) and ``<name>.log`` (the children's
  output) to ``--out``, default ``$OUT``, else ``evidence/<date>-<machine>-<what>/``.

A child prints one line, :data:`RESULT_MARK` and a JSON object, and leaves with
``os._exit`` (no interpreter teardown: a framework freeing memory after its allocator's
pool is gone must not turn a measured run into a crash). Exit status of the parent: 0 when
at least one pair was measured, 3 when none was (files written anyway).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import attrs
import paired_stats
from machine_info import gpu, machine, out_dir

MiB = 1 << 20
#: the line a child prints its result on, followed by JSON
RESULT_MARK = "@@aml-workload-result "
#: exit status of a parent that measured nothing
NOTHING_MEASURED = 3
#: characters of a child's output kept in the JSON for a failed child, and in the log
TAIL_CHARS = 4000


class Skip(Exception):
    """An allocator that cannot run here (a package missing, no GPU, a failed install):
    the child reports it skipped, with this message as the reason."""


@attrs.frozen
class Metric:
    """One figure a workload reports: ``key`` in the child's result, ``label`` and
    ``unit`` for people, ``higher_is_better`` for the reader of ratios, ``kind`` how
    to print it (``"rate"``, ``"us"`` or ``"bytes"``) and ``meaning`` (what it measures)."""

    key: str
    label: str
    unit: str
    higher_is_better: bool
    kind: str
    meaning: str


#: the allocator's own peak of device memory held (each suite names the counter it reads)
PEAK_RESERVED = Metric(
    "peak_reserved",
    "peak reserved",
    "MiB",
    False,
    "bytes",
    "the allocator's own count of device memory it held at its peak, over the whole process "
    "(warm-up included); see each allocator above for the counter read.",
)
#: the most bytes of live tensors/arrays at once, where the allocator counts them
PEAK_IN_USE = Metric(
    "peak_in_use",
    "peak in use",
    "MiB",
    False,
    "bytes",
    "the most bytes of live tensors at once, where the allocator counts them.",
)


def device_used(including: str) -> Metric:
    """Device memory the driver sees the process take since the allocator was installed
    (``including``: what else, besides the allocator's memory, that counts)."""
    return Metric(
        "device_used",
        "device memory used",
        "MiB",
        False,
        "bytes",
        "free device memory (cudaMemGetInfo) when the allocator was installed minus free memory after "
        "the timed loop: what the driver sees the process take, the same way for every allocator "
        f"({including} included).",
    )


@attrs.frozen
class Workload:
    """A workload: its ``name`` (the child's argument), a ``title`` saying what it runs,
    and its metrics (the first is the headline figure, plotted and ratioed first)."""

    name: str
    title: str
    metrics: tuple[Metric, ...]


@attrs.frozen
class Suite:
    """A benchmark of one framework: its allocators (``native`` is the framework's own,
    the base of every ratio), workloads, the pairs run by default, and its time bounds."""

    #: file name prefix of the results ("torch_workloads") and the run folder's what
    name: str
    what: str
    title: str
    framework: str
    native: str
    #: allocator name -> what it is (and what its reserved figure reads)
    allocators: Mapping[str, str]
    workloads: tuple[Workload, ...]
    #: (allocator, workload) pairs run unless --allocators/--workloads narrow them
    pairs: tuple[tuple[str, str], ...]
    budget_s: float
    quick_budget_s: float
    child_timeout_s: float

    def workload(self, name: str) -> Workload:
        for w in self.workloads:
            if w.name == name:
                return w
        raise KeyError(name)


# -- arguments -----------------------------------------------------------------------------------


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_args(suite: Suite, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parent's options, or ``--child ALLOCATOR WORKLOADS`` for a child."""
    parser = argparse.ArgumentParser(
        prog=f"{suite.name}.py",
        description=f"{suite.title}: each (allocator, workload) pair in its own process.",
    )
    parser.add_argument("--out", help=f"default: $OUT, else evidence/<date>-<machine>-{suite.what}/")
    parser.add_argument("--name", default=suite.name, help="file name prefix (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="a smoke test: one short child per allocator")
    parser.add_argument("--repeats", type=int, default=None, help="processes per pair (default 10; quick 1)")
    parser.add_argument(
        "--allocators",
        type=_names,
        default=None,
        help=f"comma-separated subset of {', '.join(suite.allocators)}",
    )
    parser.add_argument(
        "--workloads",
        type=_names,
        default=None,
        help=f"comma-separated subset of {', '.join(w.name for w in suite.workloads)}",
    )
    parser.add_argument(
        "--budget", type=float, default=None, help="seconds by which the children should be done"
    )
    parser.add_argument(
        "--child-timeout", type=float, default=suite.child_timeout_s, help="seconds per child"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the sizes' sequence (same in every child)"
    )
    parser.add_argument("--child", nargs=2, metavar=("ALLOCATOR", "WORKLOADS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    known_w = [w.name for w in suite.workloads]
    if args.child:
        alloc, ws = args.child[0], _names(args.child[1])
        bad = [w for w in ws if w not in known_w]
        if alloc not in suite.allocators or bad or not ws:
            parser.error(f"--child takes one of {list(suite.allocators)} and workloads of {known_w}")
        args.child = (alloc, tuple(ws))
    for given, known, what in (
        (args.allocators, list(suite.allocators), "allocator"),
        (args.workloads, known_w, "workload"),
    ):
        unknown = [n for n in given or () if n not in known]
        if unknown:
            parser.error(f"unknown {what}(s) {unknown}; known: {known}")
    if args.repeats is None:
        args.repeats = 1 if args.quick else paired_stats.MIN_WORKLOAD_REPEATS
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.budget is None:
        args.budget = suite.quick_budget_s if args.quick else suite.budget_s
    if args.quick:
        args.child_timeout = min(args.child_timeout, args.budget)
    return args


def selected_pairs(suite: Suite, args: argparse.Namespace) -> list[tuple[str, str]]:
    return [
        (a, w)
        for a, w in suite.pairs
        if (args.allocators is None or a in args.allocators)
        and (args.workloads is None or w in args.workloads)
    ]


def schedule(
    pairs: Sequence[tuple[str, str]], repeats: int, group: bool
) -> list[tuple[int, str, tuple[str, ...]]]:
    """The children to run, in order, as (repeat, allocator, workloads): each repeat runs
    every allocator on one workload, then on the next, the allocators' order rotated by
    one each repeat (so none always runs first, on a cold GPU); with ``group``, one child
    per allocator and repeat runs all of that allocator's workloads."""
    allocators = list(dict.fromkeys(a for a, _ in pairs))
    workloads = list(dict.fromkeys(w for _, w in pairs))
    chosen = set(pairs)
    plan: list[tuple[int, str, tuple[str, ...]]] = []
    for rep in range(repeats):
        order = paired_stats.alternating(allocators, rep)
        if group:
            for a in order:
                ws = tuple(w for w in workloads if (a, w) in chosen)
                plan.append((rep, a, ws))
        else:
            for w in workloads:
                plan.extend((rep, a, (w,)) for a in order if (a, w) in chosen)
    return plan


# -- the child's side ----------------------------------------------------------------------------


def import_or_skip(name: str) -> Any:
    """``importlib.import_module(name)``, or :class:`Skip` saying it is missing."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise Skip(f"{name} is not importable ({type(exc).__name__}: {exc})") from exc


@attrs.define
class Installed:
    """The allocator a child installed: the framework module ``lib`` (torch, cupy), the
    run's options, how to synchronize the device and read its free memory, the
    allocator's own counters (None where it has none), aml's hook and details to report.
    :meth:`start` reads the free memory the memory figures are measured from."""

    lib: Any
    quick: bool
    seed: int
    sync: Callable[[], object]
    free_memory: Callable[[], int]
    peak_reserved: Callable[[], int] | None = None
    peak_in_use: Callable[[], int] | None = None
    hook: Any = None
    details: dict[str, Any] = attrs.Factory(dict)
    baseline_free: int = 0

    def use_aml(self, expandable: bool, hook: str) -> None:
        """Install aml's hook (``aml_cuda.<hook>``) over a pool (:func:`aml_pool`) and read
        the peaks from the pool's ``pool_stats``."""
        aml_cuda, pool, self.details = aml_pool(expandable)
        self.hook = getattr(aml_cuda, hook)(pool)
        self.peak_reserved = lambda: int(pool.pool_stats.peak_bytes_reserved)
        self.peak_in_use = lambda: int(pool.pool_stats.peak_bytes_in_use)

    def use_rmm(self, module: str, name: str, install: Callable[[Any], object]) -> None:
        """Make an RMM pool (:func:`rmm_pool`) the device's resource and ``install`` RMM's
        allocator for the framework (``<module>.<name>``); the peak reserved is the pool's
        size (it grows and never shrinks)."""
        rmm = import_or_skip("rmm")
        allocator = getattr(import_or_skip(module), name, None)
        if allocator is None:
            raise Skip(f"{module} has no {name} here")
        mr, initial = rmm_pool(rmm)
        install(allocator)
        self.peak_reserved = lambda: int(mr.pool_size())
        self.details = {"rmm_initial_pool_size": initial}

    def start(self) -> Installed:
        self.sync()
        self.baseline_free = int(self.free_memory())
        return self

    def memory(self) -> dict[str, Any]:
        """The memory figures now (after a workload): the allocator's peaks, what the
        driver sees taken since :meth:`start`, aml's hook errors, the details."""
        self.sync()
        out: dict[str, Any] = {
            "peak_reserved": int(self.peak_reserved()) if self.peak_reserved else None,
            "peak_in_use": int(self.peak_in_use()) if self.peak_in_use else None,
            "device_used": self.baseline_free - int(self.free_memory()),
        }
        errors = getattr(self.hook, "errors", None)
        if errors is not None:
            out["hook_errors"] = len(errors)
            if errors:
                out["note"] = f"the aml hook recorded {len(errors)} error(s), first: {errors[0]!r}"
        out.update(self.details)
        return out


def aml_pool(expandable: bool) -> tuple[Any, Any, dict[str, Any]]:
    """``(aml_cuda, pool, details)``: ``aml_core.pool(aml_cuda.create(0))``, or with
    ``expandable`` one growing segment over ``aml_cuda.virtual_memory(0)`` whose capacity
    is the GPU's memory (read through aml's probe: the framework must not touch the GPU
    before its allocator is installed). Skip where aml or the expandable pool is missing."""
    aml_core = import_or_skip("aml_core")
    aml_cuda = import_or_skip("aml_cuda")
    if not expandable:
        return aml_cuda, aml_core.pool(aml_cuda.create(0)), {}
    if not hasattr(aml_cuda, "virtual_memory"):
        raise Skip("this aml_cuda has no virtual_memory (no expandable pool)")
    details: dict[str, Any] = {"capacity": None}
    try:
        probe = aml_cuda.probe()
        if probe.available and probe.devices:
            details["capacity"] = int(probe.devices[0].total_memory)
    except Exception as exc:
        details["capacity_note"] = f"probe failed ({type(exc).__name__}: {exc}): the pool's default capacity"
    pool = aml_core.pool(aml_cuda.virtual_memory(0), expandable=True, capacity=details["capacity"])
    return aml_cuda, pool, details


def rmm_pool(rmm: Any) -> tuple[Any, int]:
    """An RMM pool (``rmm.mr.PoolMemoryResource`` over ``CudaMemoryResource``) made the
    current device's resource, starting empty where RMM allows (its default start is half
    the GPU, which would make its reserved figure meaningless); returns it and its
    initial size."""
    last: Exception | None = None
    for initial in (0, 2 * MiB):
        try:
            mr = rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=initial)
        except Exception as exc:  # an RMM that refuses an empty start: the next size
            last = exc
            continue
        rmm.mr.set_current_device_resource(mr)
        return mr, initial
    raise Skip(f"rmm.mr.PoolMemoryResource failed: {type(last).__name__}: {last}")


def versions(*names: str) -> dict[str, str]:
    """The ``__version__`` of each of these modules that the child imported."""
    found = {}
    for name in names:
        mod = sys.modules.get(name)
        if mod is not None:
            found[name] = str(getattr(mod, "__version__", "?"))
    return found


def emit(result: Mapping[str, Any]) -> None:
    """Print the child's result line (the parent reads the last one)."""
    sys.stdout.write(RESULT_MARK + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()


def child_main(
    allocator: str,
    workloads: Sequence[str],
    install: Callable[[str], Installed],
    runners: Mapping[str, Callable[[Installed], dict[str, Any]]],
    describe: Callable[[Installed], dict[str, Any]],
) -> NoReturn:
    """Run one child: ``install(allocator)`` (raises :class:`Skip`, or anything, when the
    allocator cannot run: reported as skipped with the reason), then each workload's
    runner on what it returned (a failure is that workload's error, the others still run),
    then ``describe`` (versions, device); print the result and leave at once."""
    result: dict[str, Any] = {"allocator": allocator, "workloads": {}, "pid": os.getpid()}
    try:
        installed = install(allocator)
    except Skip as exc:
        result.update(status="skipped", reason=str(exc))
    except Exception as exc:  # any failure to start the allocator: skipped, with why
        traceback.print_exc()
        result.update(status="skipped", reason=f"install failed: {type(exc).__name__}: {exc}")
    else:
        result["status"] = "ok"
        for w in workloads:
            t0 = time.monotonic()
            try:
                row = runners[w](installed)
            except Exception as exc:
                traceback.print_exc()
                row = {"error": f"{type(exc).__name__}: {exc}"}
            row["child_seconds"] = time.monotonic() - t0
            result["workloads"][w] = row
        try:
            result["env"] = describe(installed)
        except Exception as exc:
            result["env"] = {"error": f"{type(exc).__name__}: {exc}"}
    emit(result)
    sys.stderr.flush()
    os._exit(0)


# -- the parent's side ---------------------------------------------------------------------------


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def parse_result(stdout: str) -> dict[str, Any] | None:
    """The last result line of a child's output, or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            try:
                found = json.loads(line[len(RESULT_MARK) :])
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None


def run_child(cmd: Sequence[str], timeout: float) -> dict[str, Any]:
    """Run one child; its result, or ``{"status": "error", "reason": ...}`` with the
    tail of its output when it timed out, crashed or printed no result."""
    t0 = time.monotonic()
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        log = _text(exc.stdout) + _text(exc.stderr)
        return {
            "status": "error",
            "reason": f"timed out after {timeout:.0f} s",
            "seconds": time.monotonic() - t0,
            "log": log[-TAIL_CHARS:],
        }
    except OSError as exc:
        return {"status": "error", "reason": f"could not start: {exc}", "seconds": 0.0, "log": ""}
    log = (proc.stderr or "") + "".join(
        line + "\n" for line in (proc.stdout or "").splitlines() if not line.startswith(RESULT_MARK)
    )
    found = parse_result(proc.stdout or "")
    if found is None:
        return {
            "status": "error",
            "reason": f"exit status {proc.returncode} and no result line",
            "seconds": time.monotonic() - t0,
            "log": log[-TAIL_CHARS:],
        }
    found["seconds"] = time.monotonic() - t0
    found["log"] = log[-TAIL_CHARS:]
    if proc.returncode != 0:
        found["exit_status"] = proc.returncode
    return found


def drive(
    suite: Suite,
    args: argparse.Namespace,
    script: Path,
    runner: Callable[[Sequence[str], float], dict[str, Any]] = run_child,
) -> dict[str, Any]:
    """Run the schedule's children (through ``runner``, for tests) and collect them."""
    started = time.monotonic()
    pairs = selected_pairs(suite, args)
    plan = schedule(pairs, args.repeats, group=args.quick)
    runs: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}
    not_run: list[str] = []
    durations: list[float] = []
    for rep, alloc, ws in plan:
        if alloc in skipped:
            continue
        todo = tuple(w for w in ws if f"{alloc} / {w}" not in failed)
        if not todo:
            continue
        elapsed = time.monotonic() - started
        expected = statistics.median(durations) if durations else 0.0
        if elapsed + expected > args.budget:
            not_run.append(f"repeat {rep + 1}: {alloc} on {', '.join(todo)}")
            continue
        cmd = [sys.executable, str(script), "--child", alloc, ",".join(todo), "--seed", str(args.seed)]
        if args.quick:
            cmd.append("--quick")
        found = runner(cmd, args.child_timeout)
        durations.append(float(found.get("seconds") or 0.0))
        found.update(repeat=rep, allocator=alloc, asked=list(todo))
        runs.append(found)
        status = found.get("status")
        if status == "skipped":
            skipped[alloc] = str(found.get("reason"))
        elif status != "ok":
            for w in todo:
                failed[f"{alloc} / {w}"] = f"repeat {rep + 1}: {found.get('reason')}"
        else:
            for w in todo:
                err = (found.get("workloads") or {}).get(w, {}).get("error")
                if err is not None or w not in (found.get("workloads") or {}):
                    failed[f"{alloc} / {w}"] = f"repeat {rep + 1}: {err or 'no result for it'}"
        print(progress(suite, found), flush=True)
    meta: dict[str, Any] = {**machine(), "date": datetime.date.today().isoformat(), **gpu()}
    meta["python_executable"] = sys.executable
    for key in ("PYTORCH_CUDA_ALLOC_CONF", "CUPY_GPU_MEMORY_LIMIT", "PYTHONPATH"):
        if os.environ.get(key):
            meta[key] = os.environ[key]
    for run in runs:  # versions and device, as the children saw them
        if run.get("status") == "ok" and isinstance(run.get("env"), dict):
            for k, v in run["env"].items():
                meta.setdefault(k, v)
    return {
        "suite": suite.name,
        "title": suite.title,
        "quick": bool(args.quick),
        "repeats": args.repeats,
        "seed": args.seed,
        "budget_s": args.budget,
        "child_timeout_s": args.child_timeout,
        "meta": meta,
        "plan": [{"repeat": r, "allocator": a, "workloads": list(w)} for r, a, w in plan],
        "runs": runs,
        "skipped": skipped,
        "failed": failed,
        "not_run": not_run,
        "summary": summarize(suite, runs),
        "seconds": time.monotonic() - started,
    }


def progress(suite: Suite, found: Mapping[str, Any]) -> str:
    head = f"[repeat {int(found.get('repeat', 0)) + 1}] {found.get('allocator')}"
    seconds = f"({float(found.get('seconds') or 0.0):.1f} s)"
    if found.get("status") != "ok":
        return f"{head}: {found.get('status')}: {found.get('reason')} {seconds}"
    parts = []
    for w, row in (found.get("workloads") or {}).items():
        try:
            m = suite.workload(w).metrics[0]
        except KeyError:
            continue
        value = row.get(m.key)
        parts.append(
            f"{w} {fmt(m, value)} {m.unit}" if value is not None else f"{w} error: {row.get('error')}"
        )
    return f"{head}: {'; '.join(parts)} {seconds}"


def summarize(suite: Suite, runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (workload, allocator) measured: each metric's median, min, max and
    values over the repeats (``values_by_repeat`` keeps which repeat each came from), and,
    for an allocator other than the native one, the paired figures
    (``paired_stats.summarize`` of this allocator's value over the native one's in the same
    repeat: ``paired``), whose median is the row's ratio (``ratios``); the ratio of the
    medians is kept beside it (``ratio_of_medians``)."""
    values: dict[tuple[str, str], dict[str, dict[int, float]]] = {}
    for run in runs:
        if run.get("status") != "ok":
            continue
        for w, result in (run.get("workloads") or {}).items():
            if "error" in result:
                continue
            try:
                metrics = suite.workload(w).metrics
            except KeyError:
                continue
            got = values.setdefault((w, str(run.get("allocator"))), {})
            for m in metrics:
                v = result.get(m.key)
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    got.setdefault(m.key, {})[int(run.get("repeat", 0))] = float(v)
    rows: list[dict[str, Any]] = []
    for w in suite.workloads:
        allocs = [a for a in suite.allocators if (w.name, a) in values]
        native = values.get((w.name, suite.native), {})
        for a in allocs:
            got = values[(w.name, a)]
            row: dict[str, Any] = {
                "workload": w.name,
                "allocator": a,
                "metrics": {},
                "ratios": {},
                "paired": {},
                "ratio_of_medians": {},
            }
            row["runs"] = max((len(v) for v in got.values()), default=0)
            for m in w.metrics:
                by_rep = got.get(m.key)
                if not by_rep:
                    continue
                vs = list(by_rep.values())
                med = statistics.median(vs)
                row["metrics"][m.key] = {
                    "median": med,
                    "min": min(vs),
                    "max": max(vs),
                    "values": vs,
                    "values_by_repeat": {str(k): v for k, v in sorted(by_rep.items())},
                }
                base = native.get(m.key)
                if not base or not statistics.median(base.values()):
                    continue
                if a == suite.native:
                    row["ratios"][m.key] = 1.0
                    continue
                row["ratio_of_medians"][m.key] = med / statistics.median(base.values())
                pairs = [by_rep[k] / base[k] for k in sorted(by_rep) if base.get(k)]
                if pairs and all(p > 0 for p in pairs):
                    s = paired_stats.summarize(pairs)
                    row["paired"][m.key] = s
                    row["ratios"][m.key] = s["median"]
            rows.append(row)
    return rows


# -- output ----------------------------------------------------------------------------------------


def fmt(m: Metric, value: float | None) -> str:
    if value is None:
        return "-"
    if m.kind == "bytes":
        return f"{value / MiB:,.0f}"
    if m.kind == "us":
        return f"{value:.2f}"
    return f"{value:,.1f}"


def render(suite: Suite, r: Mapping[str, Any]) -> str:
    """The markdown summary of a run (``r`` as :func:`drive` returns it)."""
    m = r["meta"]
    native = suite.native
    lines = [f"# {suite.title}, {m.get('date', '?')}", ""]
    lines.append(", ".join(f"{k} {v}" for k, v in m.items() if k not in ("date", "python_executable")) + ".")
    lines += [
        "",
        f"Each (allocator, workload) pair ran in its own process ({suite.framework} takes one allocator per "
        f"process), {r['repeats']} time(s), interleaved: each repeat runs every allocator on one workload "
        "back to back, the order alternating from repeat to repeat (each two allocators swap order as "
        "often as not). Figures are medians over those processes (min..max beside them). A ratio is the "
        f"median of the paired ratios (an allocator's figure over `{native}`'s in the same repeat), with its "
        "bootstrap 95% interval in brackets (above 1 is better where higher is better, below 1 where lower "
        "is); every repeat's figure is in the JSON.",
    ]
    if r.get("quick"):
        lines += [
            "",
            "Quick mode (a smoke test): one short process per allocator ran all its workloads, so the "
            "memory figures of a later workload include the earlier ones'.",
        ]
    lines += ["", "Allocators:", ""]
    lines += [f"- `{a}`: {text}" for a, text in suite.allocators.items()]
    if r["skipped"]:
        lines += ["", "Skipped: " + "; ".join(f"`{k}` ({v})" for k, v in r["skipped"].items()) + "."]
    if r["failed"]:
        lines += ["", "Failed: " + "; ".join(f"`{k}` ({v})" for k, v in r["failed"].items()) + "."]
    if r["not_run"]:
        lines += ["", f"Not run (time budget of {r['budget_s']:.0f} s): " + "; ".join(r["not_run"]) + "."]
    rows = r["summary"]
    for w in suite.workloads:
        mine = [row for row in rows if row["workload"] == w.name]
        if not mine:
            continue
        lines += ["", f"## {w.name}: {w.title}", ""]
        head = ["allocator", "runs"]
        for met in w.metrics:
            head += [f"{met.label} ({met.unit})", f"/ {native}"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("| --- | ---: | " + " | ".join("---:" for _ in w.metrics for _ in (0, 1)) + " |")
        for row in mine:
            cells = [f"`{row['allocator']}`", str(row["runs"])]
            for met in w.metrics:
                got = row["metrics"].get(met.key)
                if got is None:
                    cells += ["-", "-"]
                    continue
                spread = (
                    f" ({fmt(met, got['min'])}..{fmt(met, got['max'])})" if len(got["values"]) > 1 else ""
                )
                cells.append(fmt(met, got["median"]) + spread)
                ratio = row["ratios"].get(met.key)
                paired = row.get("paired", {}).get(met.key)
                if ratio is None:
                    cells.append("-")
                elif paired and paired["pairs"] > 1:
                    low, high = paired["median_95"]
                    cells.append(f"{ratio:.3f} ({low:.3f}-{high:.3f})")
                else:
                    cells.append(f"{ratio:.3f}")
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "What the columns measure:", ""]
        for met in w.metrics:
            better = "higher is better" if met.higher_is_better else "lower is better"
            lines.append(f"- {met.label} ({met.unit}, {better}): {met.meaning}")
    notes = [
        f"`{run.get('allocator')}` repeat {int(run.get('repeat', 0)) + 1}, {w}: {row['note']}"
        for run in r["runs"]
        for w, row in (run.get("workloads") or {}).items()
        if row.get("note")
    ]
    if notes:
        lines += ["", "## Notes from the children", "", *[f"- {n}" for n in notes]]
    if r.get("plot_error"):
        lines += ["", f"The plots failed: {r['plot_error']}."]
    lines += ["", f"Run time: {r['seconds']:.0f} s, {len(r['runs'])} processes.", ""]
    return "\n".join(lines)


def plots(suite: Suite, r: Mapping[str, Any], out: Path, name: str) -> list[str]:
    """One PNG per workload: a panel per metric, the median as a bar and each process as a
    dot. Nothing (and a line saying why) without matplotlib."""
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except Exception as exc:
        print(f"no plots: matplotlib is not usable ({exc})", flush=True)
        return []
    files: list[str] = []
    for w in suite.workloads:
        rows = [row for row in r["summary"] if row["workload"] == w.name]
        metrics = [m for m in w.metrics if any(m.key in row["metrics"] for row in rows)]
        if not rows or not metrics:
            continue
        fig, axes = plt.subplots(
            1, len(metrics), figsize=(4.5 * len(metrics), 0.6 * len(rows) + 1.8), squeeze=False
        )
        for ax, met in zip(axes[0], metrics, strict=True):
            have = [row for row in rows if met.key in row["metrics"]]
            scale = 1 / MiB if met.kind == "bytes" else 1.0
            names = [row["allocator"] for row in have]
            ax.barh(names, [row["metrics"][met.key]["median"] * scale for row in have], color="#8fb3d9")
            for i, row in enumerate(have):
                vals = [v * scale for v in row["metrics"][met.key]["values"]]
                ax.plot(vals, [i] * len(vals), "k.", markersize=4)
            ax.invert_yaxis()
            unit = "MiB" if met.kind == "bytes" else met.unit
            better = "higher" if met.higher_is_better else "lower"
            ax.set_xlabel(f"{met.label} ({unit}; {better} is better)")
            ax.grid(True, axis="x", alpha=0.3)
        fig.suptitle(f"{suite.framework}: {w.name}", fontsize=10)
        fig.tight_layout()
        path = out / f"{name}_{w.name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path.name)
    return files


def write(suite: Suite, r: dict[str, Any], out: Path, name: str) -> str:
    """Write the children's log, the JSON, the plots and the markdown; return the markdown.
    The results are on disk before the plots are drawn, and a plot that fails is written
    down instead of losing the run."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / f"{name}.log").open("w") as log:
        for run in r["runs"]:
            log.write(
                f"== repeat {int(run.get('repeat', 0)) + 1}, {run.get('allocator')} on {run.get('asked')}: "
            )
            log.write(f"{run.get('status')} ({run.get('reason', '')})\n{run.get('log', '')}\n")
    r["plots"] = []
    (out / f"{name}.json").write_text(json.dumps(r, indent=1, default=str))
    try:
        r["plots"] = plots(suite, r, out, name)
    except Exception as exc:
        traceback.print_exc()
        r["plot_error"] = f"{type(exc).__name__}: {exc}"
    (out / f"{name}.json").write_text(json.dumps(r, indent=1, default=str))
    md = render(suite, r)
    (out / f"{name}.md").write_text(md)
    return md


def main(
    suite: Suite,
    script: Path,
    install: Callable[[str, argparse.Namespace], Installed],
    runners: Mapping[str, Callable[[Installed], dict[str, Any]]],
    describe: Callable[[Installed], dict[str, Any]],
    argv: Sequence[str] | None = None,
) -> int:
    """The entry point of a suite's script: a child's run (never returns), or the parent's
    (returns its exit status)."""
    args = parse_args(suite, argv)
    if args.child:
        alloc, ws = args.child
        child_main(
            alloc,
            ws,
            lambda a: install(a, args),
            runners,
            describe,
        )
    r = drive(suite, args, script)
    out = out_dir(args.out, suite.what)
    md = write(suite, r, out, args.name)
    print()
    print(md, flush=True)
    print(f"written to {out}", flush=True)
    return 0 if r["summary"] else NOTHING_MEASURED
