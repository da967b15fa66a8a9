"""NCCL over aml memory on two GPUs, one process per GPU (issue 21, item 3).

Four phases, each a pair of processes (rank 0 on GPU 0, rank 1 on GPU 1) started by this
script with ``subprocess``, each pair bounded by ``--phase-timeout``:

1. ``collectives-cupy``: ``allReduce`` (float32 SUM) and ``allGather`` of CuPy's NCCL
   binding (``cupy.cuda.nccl.NcclCommunicator``) over four kinds of memory, interleaved
   sample by sample: CuPy arrays (CuPy's memory pool: the base of the ratios), an aml
   device area (``aml_cuda.create(rank)``), a pool over one (``aml_core.pool(...)``) and
   virtual memory (``aml_cuda.virtual_memory(rank)``); 1 MiB, 64 MiB and 256 MiB per rank;
   median µs per operation, the results checked (every element) before and after the timing;
2. ``collectives-torch``: the same with ``torch.distributed`` (NCCL backend:
   ``all_reduce`` in place, ``all_gather_into_tensor``), PyTorch's tensors as the base and
   the aml buffers seen as tensors without a copy (``__cuda_array_interface__``);
3. ``ddp-torch`` and 4. ``ddp-aml``: a data-parallel training step (``DistributedDataParallel``
   over a stack of ``Linear`` layers, SGD) on PyTorch's caching allocator, and with both
   processes allocating through ``aml_cuda.use_with_torch(aml_core.pool(aml_cuda.create(rank)))``:
   median steps per second, the ranks' parameters checked equal. An allocator is chosen once
   per process, so the two alternate as pairs of processes, ``--ddp-rounds`` of each (default
   5; the order flips each round: torch first, then aml first, ...): the ratio is the median
   of aml's rounds over the median of PyTorch's, and each round's pair is reported too (runs
   of one allocator differed by up to 12% on the same code, more than the allocators did).

Each rank runs on its own half of the physical cores this script may use, every hardware
thread of them (rank 0 the first half, rank 1 the second; ``--no-pin`` leaves them to the
scheduler). The DDP step is bound by the CPU, but pinning did not narrow how much runs of
one allocator differ (380-507 steps/s over 15 rounds on two H200s): judge the pairs,
pooled over runs with ``benchmarks/ddp_pairs.py``, not one run's ratio.

NVLink multicast stays off in every process (``NCCL_NVLS_ENABLE=0``,
``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``, ``NVSHMEM_DISABLE_NVLS=1``: in each rank's environment
from its start, and in the launcher's before it loads CUDA): on shared machines multicast can
take the GPUs out of service.

Usage on a machine with two GPUs (writes nccl_bench.json, nccl_bench.md and each rank's log
``<phase>-rank<r>.log`` to --out, default $OUT, else ``evidence/<date>-<machine>-nccl-bench/``;
prints the summary last; about three minutes, at most (2 + 2 x ``--ddp-rounds``) x ``--phase-timeout``)::

    PYTHONUNBUFFERED=1 python benchmarks/nccl_bench.py --out $OUT

With fewer than two GPUs it measures nothing, writes nothing and exits with status 77 and
the reason. A phase whose engine is missing (CuPy without NCCL, PyTorch without NCCL) is
skipped with the reason; a phase that fails or times out is reported with its ranks' logs
and makes the exit status 1, the other phases still run. ``--quick``: 1 MiB and 64 MiB, fewer
samples.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paired_stats

#: In the launcher's environment (set first thing in main) and in every rank's, from its start.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

MiB = 1 << 20
SIZES = (MiB, 64 * MiB, 256 * MiB)
QUICK_SIZES = (MiB, 64 * MiB)
WORLD = 2
#: Exit status when there are not two GPUs (nothing measured, nothing written).
NOT_TWO_GPUS = 77
PHASES = ("collectives-cupy", "collectives-torch", "ddp-torch", "ddp-aml")
#: Memory kinds of the collectives; the first is the engine's own memory (the base).
AML_KINDS = ("aml-device", "aml-pool", "aml-vmm")
OPS = ("allreduce", "allgather")
#: Elements repeat with this period: every value is a small integer, exact in float32 sums.
PERIOD = 251
#: (operations per sample, samples) by size; warm-up: WARM operations of each kind and op.
SAMPLES = {MiB: (100, 101), 64 * MiB: (5, 21), 256 * MiB: (3, 15)}
QUICK_SAMPLES = (2, 3)
WARM = 3
#: The data-parallel step: LAYERS x Linear(HIDDEN, HIDDEN) with ReLU, BATCH rows per rank.
HIDDEN, LAYERS, BATCH = 2048, 4, 64
DDP_WARM, DDP_STEPS, DDP_SAMPLES, DDP_ROUNDS = 10, 25, 15, 5
#: Collectives within this fraction of the base, steps/s at least the base (issue 21's targets).
COLLECTIVE_TARGET, DDP_TARGET = 0.02, 1.0


# -- the data and its checks --------------------------------------------------------------------
# ``xp`` is the array module (numpy, cupy or torch); ``where`` goes to its arange (torch: device=).
def _pattern(xp: Any, count: int, factor: int, where: dict[str, Any]) -> Any:
    values = (xp.arange(count, dtype=xp.int64, **where) % PERIOD) * factor
    return values.astype(xp.float32) if hasattr(values, "astype") else values.to(xp.float32)


def fill_values(xp: Any, count: int, rank: int, **where: Any) -> Any:
    """What rank ``rank`` sends: ``(rank + 1) * (i % PERIOD)``, float32."""
    return _pattern(xp, count, rank + 1, where)


def allreduce_expected(xp: Any, count: int, world: int, **where: Any) -> Any:
    """The SUM of every rank's :func:`fill_values`."""
    return _pattern(xp, count, world * (world + 1) // 2, where)


def allgather_expected(xp: Any, count: int, world: int, **where: Any) -> Any:
    """Every rank's :func:`fill_values`, in rank order."""
    parts = [fill_values(xp, count, r, **where) for r in range(world)]
    return xp.cat(parts) if hasattr(xp, "cat") else xp.concatenate(parts)


def mismatches(xp: Any, got: Any, expected: Any) -> int:
    """How many elements differ (0: the collective's result is right)."""
    return int(xp.count_nonzero(got != expected))


# -- the launcher ----------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog="Exit status: 0 all phases ran or were skipped with a reason and every check passed; "
        "1 a phase failed, timed out or a check failed; 77 fewer than 2 GPUs (nothing written).",
    )
    parser.add_argument("--out", help="default: $OUT, else evidence/<date>-<machine>-nccl-bench/")
    parser.add_argument("--quick", action="store_true", help="1 MiB and 64 MiB, fewer samples: a smoke test")
    parser.add_argument(
        "--phases",
        default=",".join(PHASES),
        help=f"comma-separated phases to run (default: all of {', '.join(PHASES)})",
    )
    parser.add_argument(
        "--phase-timeout", type=float, default=65.0, help="seconds a pair of ranks may run (default 65)"
    )
    parser.add_argument(
        "--ddp-rounds",
        type=int,
        default=DDP_ROUNDS,
        help=f"runs of each DDP phase, alternating (default {DDP_ROUNDS}; --quick: 1)",
    )
    parser.add_argument(
        "--no-pin",
        dest="pin",
        action="store_false",
        help="leave the ranks' CPUs to the scheduler (default: each rank on half the physical cores)",
    )
    # A rank (started by the launcher, not by hand).
    parser.add_argument("--child", choices=PHASES, help=argparse.SUPPRESS)
    parser.add_argument("--cpus", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--rendezvous", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    phases = tuple(p for p in args.phases.split(",") if p)
    unknown = [p for p in phases if p not in PHASES]
    if unknown or not phases:
        parser.error(f"unknown phase(s) {unknown or args.phases!r}; choose from {', '.join(PHASES)}")
    args.phases = phases
    if args.ddp_rounds < 1:
        parser.error("--ddp-rounds must be at least 1")
    if args.quick:
        args.ddp_rounds = 1
    return args


def cpu_core(cpu: int) -> tuple[int, int]:
    """The physical core ``cpu`` is a hardware thread of, as sysfs names it: (package, core
    id); (-1, cpu), a core of its own, where sysfs does not say."""
    topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
    try:
        return int((topology / "physical_package_id").read_text()), int((topology / "core_id").read_text())
    except (OSError, ValueError):
        return -1, cpu


def rank_cpus(
    rank: int, available: set[int], core: Callable[[int], tuple[int, int]] = cpu_core
) -> list[int] | None:
    """Rank ``rank``'s share of ``available``: whole physical cores (every available
    hardware thread of each), equal shares of the cores taken in the order of their first
    CPU (a remainder goes to no rank), so no two ranks share a core (hardware threads of one
    core slow each other, and GPU hosts often number a core's threads N and N + cores/2);
    None when there are fewer cores than ranks."""
    if not 0 <= rank < WORLD:
        raise ValueError(f"rank {rank} is not one of {WORLD}")
    cores: dict[tuple[int, int], list[int]] = {}
    for cpu in sorted(available):
        cores.setdefault(core(cpu), []).append(cpu)
    groups = list(cores.values())  # in the order of each core's first CPU
    share = len(groups) // WORLD
    return sorted(c for g in groups[rank * share : (rank + 1) * share] for c in g) if share else None


def placements(pin: bool) -> list[list[int] | None]:
    """Each rank's CPUs (None: left to the scheduler), from the CPUs this process may use."""
    return [rank_cpus(r, os.sched_getaffinity(0)) if pin else None for r in range(WORLD)]


def pin(cpus: str | None) -> list[int]:
    """Bind this process (and every thread it starts later) to ``cpus`` ("0,1,2"); the CPUs
    it may use now."""
    if cpus:
        os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    return sorted(os.sched_getaffinity(0))


def schedule(phases: tuple[str, ...], ddp_rounds: int) -> list[tuple[str, str]]:
    """(phase, label) in the order they run: the collectives once, the DDP phases
    ``ddp_rounds`` times each, alternating and flipping which goes first each round; the
    label (``ddp-torch-2``) names the round's results and logs."""
    runs = [(p, p) for p in phases if not p.startswith("ddp")]
    ddps = [p for p in phases if p.startswith("ddp")]
    for r in range(ddp_rounds):
        for phase in ddps if r % 2 == 0 else ddps[::-1]:
            runs.append((phase, phase if ddp_rounds == 1 else f"{phase}-{r + 1}"))
    return runs


def gpu_count() -> tuple[int, str, dict[str, Any]]:
    """(usable CUDA GPUs, why none when 0, what the machine's GPUs are), from aml_cuda's
    probe (without importing CuPy or PyTorch here)."""
    try:
        import aml_cuda

        probe = aml_cuda.probe()
    except Exception as exc:
        return 0, f"aml_cuda cannot be used ({type(exc).__name__}: {exc})", {}
    if not probe.available:
        return 0, f"no usable CUDA GPU ({probe.reason})", {}
    devices = list(probe.devices)
    info = {
        "gpus": [
            {
                "index": d.index,
                "name": d.name,
                "memory_bytes": d.total_memory,
                "pci_bus_id": d.details.get("pci_bus_id"),
            }
            for d in devices
        ],
        "driver": devices[0].details.get("driver_version") if devices else None,
        "cuda_driver_api": devices[0].details.get("cuda_driver_api") if devices else None,
        "aml_cuda": getattr(aml_cuda, "__version__", None),
    }
    return len(devices), "", info


def run_phase(phase: str, label: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Start the two ranks of ``phase``, wait for both (killing both when one fails or the
    time is up), and return what they reported; their logs are ``<label>-rank<r>.log``."""
    env = dict(os.environ, **NO_MULTICAST, PYTHONUNBUFFERED="1")
    env.setdefault("NCCL_DEBUG", "WARN")  # NCCL says why, should it fail
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="aml-nccl-") as tmp:
        procs: list[subprocess.Popen[bytes]] = []
        logs = []
        for rank, cpus in enumerate(placements(args.pin)):
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", phase, "--rank", str(rank)]
            cmd += ["--rendezvous", tmp] + (["--quick"] if args.quick else [])
            if cpus:
                cmd += ["--cpus", ",".join(map(str, cpus))]
            log = (out / f"{label}-rank{rank}.log").open("wb")
            logs.append(log)
            procs.append(
                subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            )
        why = wait_pair(procs, args.phase_timeout)
        for log in logs:
            log.close()
        reports: list[dict[str, Any]] = []
        for rank in range(WORLD):
            path = Path(tmp, f"result-{rank}.json")
            if path.exists():
                reports.append(json.loads(path.read_text()))
            else:
                reports.append({"status": "error", "error": f"rank {rank} wrote no result"})
    result: dict[str, Any] = {
        "phase": phase,
        "label": label,
        "seconds": round(time.monotonic() - started, 1),
        "exit_codes": [p.returncode for p in procs],
        "ranks": reports,
    }
    statuses = {r.get("status") for r in reports}
    if why:
        result["status"], result["error"] = "error", why
    elif statuses == {"skipped"}:
        result["status"], result["reason"] = "skipped", reports[0].get("reason", "")
    elif statuses == {"ok"} and all(code == 0 for code in result["exit_codes"]):
        result["status"] = "ok"
    else:
        result["status"] = "error"
        result["error"] = "; ".join(
            f"rank {i}: {r.get('error') or r.get('reason') or r.get('status')}" for i, r in enumerate(reports)
        )
    return result


def wait_pair(procs: list[subprocess.Popen[bytes]], timeout: float) -> str:
    """Wait for every process; kill them all when one fails (after a grace period for
    the other to notice) or when ``timeout`` seconds are up. Returns why they were
    killed, or ""."""
    deadline = time.monotonic() + timeout
    failed_at: float | None = None
    why = ""
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = now
        if now > deadline:
            why = f"timed out after {timeout:.0f} s"
        elif failed_at is not None and now - failed_at > 15:
            why = "a rank failed and the other did not end within 15 s"
        if why:
            for p in procs:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
            for p in procs:
                p.wait()
            break
        time.sleep(0.2)
    return why


def main(argv: list[str] | None = None) -> int:
    os.environ.update(NO_MULTICAST)  # before CUDA is loaded here (aml_cuda's probe)
    args = parse_args(argv)
    if args.child:
        return child_main(args)
    count, why, info = gpu_count()
    if count < WORLD:
        reason = why or f"this machine has {count}"
        print(f"nccl_bench needs {WORLD} GPUs, {reason}: nothing measured, nothing written", file=sys.stderr)
        return NOT_TWO_GPUS
    from machine_info import machine, out_dir

    out = out_dir(args.out, "nccl-bench")
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        **machine(),
        **info,
        "date": datetime.date.today().isoformat(),
        "environment": NO_MULTICAST,
        "quick": args.quick,
        "ranks_cpus": placements(args.pin),
    }
    print(json.dumps(meta), flush=True)
    results: dict[str, Any] = {"meta": meta, "phases": {}}
    status = 0
    for phase, label in schedule(args.phases, args.ddp_rounds):
        print(f"== {label}", flush=True)
        result = run_phase(phase, label, out, args)
        results["phases"][label] = result
        print(json.dumps({k: v for k, v in result.items() if k != "ranks"}), flush=True)
        if result["status"] == "error" or not checks_passed(result):
            status = 1
    summarize(results)
    (out / "nccl_bench.json").write_text(json.dumps(results, indent=1) + "\n")
    text = markdown(results)
    (out / "nccl_bench.md").write_text(text)
    print(text)
    return status


def checks_passed(result: dict[str, Any]) -> bool:
    """Whether every rank's every check of a phase that ran found nothing wrong."""
    if result["status"] != "ok":
        return True
    return all(not rank.get("failed_checks") for rank in result["ranks"])


# -- the summary -----------------------------------------------------------------------------------
def summarize(results: dict[str, Any]) -> None:
    """Ratios against the base, from rank 0's medians (the ranks wait for each other in
    every collective, so their medians agree), and the targets."""
    phases = results["phases"]
    for phase in ("collectives-cupy", "collectives-torch"):
        result = phases.get(phase)
        if not result or result["status"] != "ok":
            continue
        rows = result["ranks"][0]["rows"]
        base = {(r["op"], r["size"]): r for r in rows if r["kind"] == result["ranks"][0]["base"]}
        for row in rows:
            ref = base.get((row["op"], row["size"]))
            if ref is None or not ref["median_us"]:
                row["over_base_time"] = row["within_target"] = row["paired_ratios"] = None
                continue
            row["over_base_time"] = row["median_us"] / ref["median_us"]
            row["within_target"] = row["median_us"] <= ref["median_us"] * (1 + COLLECTIVE_TARGET)
            if row.get("samples_us") and ref.get("samples_us"):
                row["paired_ratios"] = paired_ratios(row["samples_us"], ref["samples_us"])
                if row["kind"] != ref["kind"]:  # the base against itself is no comparison
                    pairs = paired_stats.paired_ratios(row["samples_us"], ref["samples_us"])
                    row["paired"] = paired_stats.summarize(pairs) if pairs and min(pairs) > 0 else None
    runs = {
        name: [r for r in phases.values() if r.get("phase") == f"ddp-{name}" and r["status"] == "ok"]
        for name in ("torch", "aml")
    }
    if runs["torch"] and runs["aml"]:
        rates = {name: [r["ranks"][0]["steps_per_s"] for r in got] for name, got in runs.items()}
        base_rate, aml_rate = statistics.median(rates["torch"]), statistics.median(rates["aml"])
        checksums = {r["ranks"][0]["checksum"] for got in runs.values() for r in got}
        round_ratios = [a / t for a, t in zip(rates["aml"], rates["torch"], strict=False)]
        pairs = paired_stats.summarize(round_ratios)
        results["ddp"] = {
            "torch_steps_per_s": base_rate,
            "aml_steps_per_s": aml_rate,
            "aml_over_torch": aml_rate / base_rate,
            "rounds": {name: [r["label"] for r in got] for name, got in runs.items()},
            "round_rates": rates,
            "round_ratios": round_ratios,
            # the headline: the median of the rounds' pairs and its interval; the target is
            # met only when the interval's low end is at or above it
            "paired": pairs,
            "verdict": paired_stats.verdict(pairs, at_least=DDP_TARGET),
            "meets_target": paired_stats.verdict(pairs, at_least=DDP_TARGET) == paired_stats.MET,
            "same_parameters": len(checksums) == 1,
        }


def cpu_list(cpus: list[int]) -> str:
    """``cpus`` as Linux writes a CPU list: runs as ranges ("0-7,16-23", "2,5")."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def placement(ranks_cpus: list[list[int] | None] | None) -> str:
    """How the ranks were placed on the CPUs, in words."""
    if not ranks_cpus or not all(ranks_cpus):
        return "The ranks' CPUs were left to the scheduler."
    spans = [f"rank {rank} on CPUs {cpu_list(cpus or [])}" for rank, cpus in enumerate(ranks_cpus)]
    return "Each rank on its own physical cores: " + ", ".join(spans) + "."


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    gpus = ", ".join(f"GPU {g['index']}: {g['name']}" for g in meta.get("gpus", []))
    lines = [
        "# NCCL over aml memory, two GPUs, one process per GPU (benchmarks/nccl_bench.py)",
        "",
        f"{meta['date']}, {gpus}, driver {meta.get('driver')}, "
        f"CUDA driver API {meta.get('cuda_driver_api')}, "
        f"aml-cuda {meta.get('aml_cuda')}, {meta['cpu']} ({meta['cores']} cores), Python {meta['python']}."
        + (" **--quick (smoke test).**" if meta.get("quick") else ""),
        "NVLink multicast off in every process: "
        + ", ".join(f"`{k}={v}`" for k, v in meta["environment"].items())
        + ". "
        + placement(meta.get("ranks_cpus")),
        "",
    ]
    for phase, result in results["phases"].items():
        lines.append(f"## {phase}")
        lines.append("")
        if result["status"] == "skipped":
            lines += [f"Skipped: {result.get('reason')}", ""]
            continue
        if result["status"] != "ok":
            lines += [
                f"**Failed**: {result.get('error')} (exit codes {result['exit_codes']}; "
                f"see {phase}-rank0.log and {phase}-rank1.log).",
                "",
            ]
            continue
        rank0 = result["ranks"][0]
        lines.append(", ".join(f"{k} {v}" for k, v in rank0.get("versions", {}).items()) + ".")
        lines.append("")
        if phase.startswith("collectives"):
            lines += [
                f"Median µs per operation (rank 0); base: {rank0['base']}; "
                f"target: within {COLLECTIVE_TARGET:.0%} of the base. Side by side: the quartiles "
                "of each sample's time over the base's sample taken in the same turn (both "
                "quartiles above 1: slower; on both sides of 1: noise).",
                "",
                "| op | size per rank | memory | median µs | GB/s | x base time "
                "| side by side (25%, 50%, 75%) | checks |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for row in rank0["rows"]:
                ratio, paired = row.get("over_base_time"), row.get("paired_ratios")
                lines.append(
                    f"| {row['op']} | {row['size'] // MiB} MiB | {row['kind']} | {row['median_us']:.1f} | "
                    f"{row['GBps']:.1f} | {'' if ratio is None else f'{ratio:.3f}'} | "
                    f"{'' if not paired else ', '.join(f'{q:.3f}' for q in paired)} | "
                    f"{'ok' if row['checked'] and not row['mismatches'] else 'FAILED'} |"
                )
        else:
            lines += [
                f"{rank0['steps_per_s']:.1f} steps/s (median of {rank0['samples']} samples of "
                f"{rank0['steps']} steps; rank 1: {result['ranks'][1]['steps_per_s']:.1f}); "
                f"ranks' parameters equal: {rank0['ranks_in_sync']}; allocator: {rank0['allocator']}.",
            ]
            if rank0.get("hook"):
                lines.append(f"aml hook: {rank0['hook']}.")
        failed = [c for rank in result["ranks"] for c in rank.get("failed_checks", [])]
        if failed:
            lines += ["", "**Failed checks**: " + "; ".join(failed)]
        lines.append("")
    ddp = results.get("ddp")
    if ddp:
        lines += [
            "## Data-parallel step: aml's hook against PyTorch's allocator",
            "",
            f"aml / PyTorch steps/s, the median of {ddp['paired']['pairs']} alternating pairs: "
            f"{paired_stats.describe(ddp['paired'])} (target >= {DDP_TARGET:.1f}x: {ddp['verdict']}; "
            f"the ratio of the medians, aml {ddp['aml_steps_per_s']:.1f} over PyTorch "
            f"{ddp['torch_steps_per_s']:.1f} steps/s, is {ddp['aml_over_torch']:.3f}x); "
            "each round's aml / PyTorch: "
            + ", ".join(f"{x:.3f}" for x in ddp["round_ratios"])
            + f"; the same final parameters in every run: {ddp['same_parameters']}.",
            "",
        ]
    return "\n".join(lines) + "\n"


# -- a rank ----------------------------------------------------------------------------------------
def child_main(args: argparse.Namespace) -> int:
    """Run one rank of ``args.child``; write result-<rank>.json into the rendezvous folder
    (status ok, skipped with a reason, or error with the traceback)."""
    rank, phase = args.rank, args.child
    result_path = Path(args.rendezvous, f"result-{rank}.json")
    cpus: list[int] = []
    try:
        cpus = pin(args.cpus)  # before the engines start their threads
        if phase.startswith("collectives"):
            result = collectives(phase.split("-", 1)[1], rank, Path(args.rendezvous), args.quick)
        else:
            result = ddp(phase.split("-", 1)[1], rank, Path(args.rendezvous), args.quick)
        code = 0
    except Skip as skip:
        result, code = {"status": "skipped", "reason": str(skip)}, 0
    except BaseException as exc:
        traceback.print_exc()
        result, code = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}, 1
    result.setdefault("status", "ok")
    result["rank"] = rank
    result["cpus"] = cpus
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(result_path)
    print(f"rank {rank}: {result['status']}", flush=True)
    return code


class Skip(Exception):
    """The phase cannot run here (its engine is missing): the reason."""


def rendezvous_value(
    folder: Path, name: str, rank: int, make: Callable[[], Any], timeout: float = 60.0
) -> Any:
    """Rank 0 makes a JSON value and publishes it in ``folder``; the others wait for it."""
    path = folder / name
    if rank == 0:
        value = make()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(value))
        tmp.replace(path)
        return value
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank 0 published no {name} within {timeout:.0f} s")
        time.sleep(0.05)
    return json.loads(path.read_text())


class AmlMemory:
    """The three aml kinds of memory of one device, their buffers, and their release."""

    def __init__(self, rank: int) -> None:
        import aml_cuda

        import aml_core

        self.areas: dict[str, Any] = {
            "aml-device": aml_cuda.create(rank),
            "aml-pool": aml_core.pool(aml_cuda.create(rank)),
            "aml-vmm": aml_cuda.virtual_memory(rank),
        }
        self.live: list[tuple[Any, Any]] = []

    def mmap(self, kind: str, nbytes: int) -> Any:
        area = self.areas[kind]
        buf = area.mmap(nbytes)
        self.live.append((area, buf))
        return buf

    def free_all(self) -> None:
        """Free every buffer; one an engine still holds (a DLPack export that PyTorch's
        NCCL work has not dropped yet) is left to the process's exit, and said so."""
        import gc

        gc.collect()
        while self.live:
            area, buf = self.live.pop()
            try:
                area.munmap(buf)
            except Exception as exc:
                print(f"left to the exit: {buf!r} ({type(exc).__name__}: {exc})", flush=True)

    def close(self) -> None:
        self.free_all()
        for kind, area in self.areas.items():
            try:
                area.close()
            except Exception as exc:
                print(f"left to the exit: the {kind} area ({type(exc).__name__}: {exc})", flush=True)


def timed_samples(
    kinds: list[str], run: Callable[[str], None], sync: Callable[[], None], inner: int, samples: int
) -> dict[str, list[float]]:
    """µs per operation of each kind, sample by sample: ``samples`` samples of ``inner``
    operations, the kinds interleaved sample by sample (the order rotating), ``sync`` after
    each. Sample ``i`` of every kind ran in the same turn, side by side."""
    times: dict[str, list[float]] = {k: [] for k in kinds}
    clock = time.perf_counter_ns
    for s in range(samples):
        order = kinds[s % len(kinds) :] + kinds[: s % len(kinds)]
        for kind in order:
            sync()
            t0 = clock()
            for _ in range(inner):
                run(kind)
            sync()
            times[kind].append((clock() - t0) / inner / 1e3)
    return times


def paired_ratios(samples: list[float], base: list[float]) -> tuple[float, float, float]:
    """The quartiles (25%, 50%, 75%) of sample ``i`` over the base's sample ``i``: ratios of
    measurements made side by side, which a slow stretch of the machine moves together. A
    median ratio with quartiles on both sides of 1 is noise; quartiles both above 1 are
    a real difference."""
    ratios = [a / b for a, b in zip(samples, base, strict=True)]
    q1, q2, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return q1, q2, q3


def collectives(engine: str, rank: int, folder: Path, quick: bool) -> dict[str, Any]:
    """One rank of the collectives phase of ``engine`` (cupy or torch)."""
    import_engine = {"cupy": CupyEngine, "torch": TorchEngine}[engine]
    eng = import_engine(rank, folder)
    memory = AmlMemory(rank)
    kinds = [eng.base, *AML_KINDS]
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    try:
        for nbytes in QUICK_SIZES if quick else SIZES:
            count = nbytes // 4
            inner, samples = QUICK_SAMPLES if quick else SAMPLES[nbytes]
            send: dict[str, Any] = {}
            recv: dict[str, Any] = {}
            for kind in kinds:
                if kind == eng.base:
                    send[kind], recv[kind] = eng.empty(count), eng.empty(WORLD * count)
                else:
                    send[kind] = eng.view(memory.mmap(kind, nbytes), count)
                    recv[kind] = eng.view(memory.mmap(kind, WORLD * nbytes), WORLD * count)
            for op in OPS:

                def run(
                    kind: str, op: str = op, count: int = count, send: Any = send, recv: Any = recv
                ) -> None:
                    eng.collective(op, send[kind], recv[kind], count)

                checked: dict[str, int] = {}
                for kind in kinds:  # checked before the timing ...
                    checked[kind] = eng.check(op, send[kind], recv[kind], count)
                for kind in kinds:
                    for _ in range(WARM):
                        run(kind)
                times = timed_samples(kinds, run, eng.sync, inner, samples)
                for kind in kinds:  # ... and after
                    checked[kind] += eng.check(op, send[kind], recv[kind], count)
                    moved = nbytes * (WORLD if op == "allgather" else 1)
                    median = statistics.median(times[kind])
                    rows.append(
                        {
                            "op": op,
                            "size": nbytes,
                            "kind": kind,
                            "inner": inner,
                            "samples": samples,
                            "median_us": median,
                            "samples_us": times[kind],
                            "GBps": moved / (median * 1e-6) / 1e9,
                            "checked": True,
                            "mismatches": checked[kind],
                        }
                    )
                    print(json.dumps(rows[-1]), flush=True)
                    if checked[kind]:
                        failed.append(f"{op} {nbytes // MiB} MiB over {kind}: {checked[kind]} wrong elements")
            send.clear()
            recv.clear()
            eng.sync()
            memory.free_all()
    finally:
        eng.close()
        memory.close()
    return {"base": eng.base, "versions": eng.versions, "rows": rows, "failed_checks": failed}


class CupyEngine:
    """CuPy's NCCL binding on the current device; CuPy arrays as the base."""

    base = "cupy"

    def __init__(self, rank: int, folder: Path) -> None:
        try:
            import cupy
            from cupy.cuda import nccl
        except ImportError as exc:
            raise Skip(f"CuPy is not importable ({exc})") from exc
        loaded = None
        if not getattr(nccl, "available", False):
            # CuPy found no libnccl.so.2; PyTorch's wheels carry one (the nvidia-nccl wheel):
            # load it by path, and CuPy's binding, which asks for the same soname, uses it.
            loaded = preload_pip_nccl()
            if loaded:
                nccl = importlib.reload(nccl)
        if not getattr(nccl, "available", False):
            raise Skip(
                "CuPy's NCCL binding is not available (cupy.cuda.nccl.available is False: CuPy finds no "
                f"libnccl.so.2{'' if loaded else ', and no nvidia-nccl wheel is installed'})"
            )
        self.cp, self.nccl, self.rank = cupy, nccl, rank
        cupy.cuda.Device(rank).use()
        import aml_cuda

        aml_cuda.get_runtime().set_device(rank)
        uid = rendezvous_value(folder, "nccl-unique-id.json", rank, lambda: list(nccl.get_unique_id()))
        try:  # CuPy 14 gives and takes the id as bytes; older CuPy as a tuple of chars
            self.comm = nccl.NcclCommunicator(WORLD, bytes(v & 0xFF for v in uid), rank)
        except TypeError:
            self.comm = nccl.NcclCommunicator(WORLD, tuple(uid), rank)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.versions = {"cupy": cupy.__version__, "nccl": nccl.get_version()}
        if loaded:
            self.versions["libnccl"] = loaded

    def empty(self, count: int) -> Any:
        return self.cp.empty(count, dtype=self.cp.float32)

    def view(self, buf: Any, count: int) -> Any:
        cp = self.cp
        mem = cp.cuda.UnownedMemory(buf.ptr, buf.size, buf, self.rank)
        return cp.ndarray((count,), dtype=cp.float32, memptr=cp.cuda.MemoryPointer(mem, 0))

    def collective(self, op: str, send: Any, recv: Any, count: int) -> None:
        # ncclFloat32 is 7 and ncclSum 0 in nccl.h: the binding's names where it has them
        float32, total = getattr(self.nccl, "NCCL_FLOAT32", 7), getattr(self.nccl, "NCCL_SUM", 0)
        if op == "allreduce":
            self.comm.allReduce(send.data.ptr, recv.data.ptr, count, float32, total, self.stream.ptr)
        else:
            self.comm.allGather(send.data.ptr, recv.data.ptr, count, float32, self.stream.ptr)

    def check(self, op: str, send: Any, recv: Any, count: int) -> int:
        """Fill, run once, count the wrong elements of the result."""
        cp = self.cp
        with self.stream:
            send[...] = fill_values(cp, count, self.rank)
            recv.fill(-1)
        self.collective(op, send, recv, count)
        self.stream.synchronize()
        with self.stream:
            if op == "allreduce":
                wrong = mismatches(cp, recv[:count], allreduce_expected(cp, count, WORLD))
            else:
                wrong = mismatches(cp, recv, allgather_expected(cp, count, WORLD))
        self.stream.synchronize()
        return wrong

    def sync(self) -> None:
        self.stream.synchronize()

    def close(self) -> None:
        self.stream.synchronize()
        self.comm.destroy()


class TorchEngine:
    """torch.distributed (NCCL backend) on the current device; PyTorch's tensors as the base."""

    base = "torch"

    def __init__(self, rank: int, folder: Path) -> None:
        self.torch, self.dist = torch_distributed(rank, folder)
        self.rank = rank
        self.device = self.torch.device("cuda", rank)
        import aml_cuda

        aml_cuda.get_runtime().set_device(rank)
        self.versions = torch_versions(self.torch)

    def empty(self, count: int) -> Any:
        return self.torch.empty(count, dtype=self.torch.float32, device=self.device)

    def view(self, buf: Any, count: int) -> Any:
        """The aml buffer as a float32 tensor, no copy (its __cuda_array_interface__, else
        DLPack)."""
        try:
            t = self.torch.as_tensor(buf, device=self.device)
        except (TypeError, RuntimeError, ValueError) as exc:
            print(f"torch.as_tensor refused the aml buffer ({exc}); trying DLPack", flush=True)
            t = self.torch.from_dlpack(buf)
        if t.data_ptr() != buf.ptr:
            raise RuntimeError(f"PyTorch copied the aml buffer (0x{buf.ptr:x} -> 0x{t.data_ptr():x})")
        return t.view(self.torch.float32)[:count]

    def collective(self, op: str, send: Any, recv: Any, count: int) -> None:
        if op == "allreduce":  # in place, as torch.distributed reduces
            self.dist.all_reduce(recv[:count])
        else:
            self.dist.all_gather_into_tensor(recv, send)

    def check(self, op: str, send: Any, recv: Any, count: int) -> int:
        torch = self.torch
        here = {"device": self.device}
        if op == "allreduce":
            recv[:count].copy_(fill_values(torch, count, self.rank, **here))
        else:
            send.copy_(fill_values(torch, count, self.rank, **here))
            recv.fill_(-1)
        self.collective(op, send, recv, count)
        torch.cuda.synchronize()
        if op == "allreduce":
            return mismatches(torch, recv[:count], allreduce_expected(torch, count, WORLD, **here))
        return mismatches(torch, recv, allgather_expected(torch, count, WORLD, **here))

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def close(self) -> None:
        self.torch.cuda.synchronize()
        self.dist.destroy_process_group()


def preload_pip_nccl() -> str | None:
    """Load libnccl.so.2 of the nvidia-nccl wheel (PyTorch's), if one is installed: its path."""
    import ctypes
    import importlib.util

    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return None
    for folder in list(spec.submodule_search_locations or []) if spec else []:
        lib = Path(folder, "lib", "libnccl.so.2")
        if lib.exists():
            try:
                ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
            except OSError as exc:
                print(f"could not load {lib}: {exc}", flush=True)
                return None
            return str(lib)
    return None


def torch_distributed(
    rank: int, folder: Path, before_init: Callable[[], None] | None = None
) -> tuple[Any, Any]:
    """PyTorch with the current device ``rank`` and a NCCL process group of WORLD ranks
    (a file store in ``folder``). ``before_init`` (where aml's hook is installed) runs
    before PyTorch initialises CUDA: ``torch.cuda.set_device`` does, and PyTorch swaps its
    allocator only before that."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        raise Skip(f"PyTorch is not importable ({exc})") from exc
    if not dist.is_available() or not dist.is_nccl_available():
        raise Skip("this PyTorch has no NCCL backend (torch.distributed.is_nccl_available() is False)")
    if before_init is not None:
        before_init()
    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl",
        init_method=f"file://{folder / 'torch-store'}",
        rank=rank,
        world_size=WORLD,
        timeout=datetime.timedelta(seconds=60),
    )
    return torch, dist


def torch_versions(torch: Any) -> dict[str, Any]:
    """PyTorch's version and its NCCL's (or why that is unknown)."""
    try:
        import torch.cuda.nccl as torch_nccl

        nccl: Any = torch_nccl.version()
    except Exception as exc:
        nccl = f"unknown ({type(exc).__name__}: {exc})"
    return {"torch": torch.__version__, "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl}


def ddp(allocator: str, rank: int, folder: Path, quick: bool) -> dict[str, Any]:
    """One rank of a data-parallel run on ``allocator`` (torch or aml): median steps/s."""
    hook: Any = None
    pool: Any = None

    def install() -> None:
        nonlocal hook, pool
        if allocator == "aml":
            import aml_cuda

            import aml_core

            pool = aml_core.pool(aml_cuda.create(rank))
            hook = aml_cuda.use_with_torch(pool)

    torch, dist = torch_distributed(rank, folder, install)
    from torch.nn.parallel import DistributedDataParallel

    device = torch.device("cuda", rank)
    torch.manual_seed(0)  # the same initial model on both ranks (DDP also broadcasts rank 0's)
    layers: list[Any] = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU()]
    model = DistributedDataParallel(torch.nn.Sequential(*layers[:-1]).to(device), device_ids=[rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    generator = torch.Generator(device=device).manual_seed(1 + rank)  # each rank its own data
    x = torch.randn(BATCH, HIDDEN, device=device, generator=generator)
    target = torch.randn(BATCH, HIDDEN, device=device, generator=generator)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()

    steps, samples = (5, 2) if quick else (DDP_STEPS, DDP_SAMPLES)
    for _ in range(DDP_WARM):
        step()
    torch.cuda.synchronize()
    rates: list[float] = []
    for _ in range(samples):
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        rates.append(steps / (time.perf_counter() - t0))
    with torch.no_grad():
        checksum = torch.stack([p.double().sum() for p in model.parameters()]).sum().reshape(1)
        gathered = [torch.zeros_like(checksum) for _ in range(WORLD)]
        dist.all_gather(gathered, checksum)
        sums = [float(t.item()) for t in gathered]
    failed: list[str] = []
    if len(set(sums)) != 1:
        failed.append(f"the ranks' parameters differ after the run (checksums {sums})")
    if any(p.data_ptr() == 0 for p in model.parameters()):
        failed.append("a parameter has no memory (data_ptr 0: an allocation the hook refused)")
    result: dict[str, Any] = {
        "allocator": "aml_cuda.use_with_torch(aml_core.pool(aml_cuda.create(rank)))"
        if allocator == "aml"
        else "PyTorch's caching allocator",
        "versions": torch_versions(torch),
        "steps": steps,
        "samples": samples,
        "steps_per_s": statistics.median(rates),
        "rates": rates,
        "checksum": sums[rank],
        "ranks_in_sync": len(set(sums)) == 1,
    }
    if hook is not None:
        errors = list(getattr(hook, "errors", []))
        if errors:
            failed.append(f"the aml hook refused {len(errors)} allocation(s): {errors[0]!r}")
        states = getattr(hook, "states", {})
        served = "; ".join(
            f"device {d}: {st.fast_allocs} allocations and {st.fast_frees} frees served in C without the GIL"
            for d, st in states.items()
        )
        kernel = pool._kernel
        result["hook"] = (
            f"{hook!r}; pool: {pool.pool_stats}; {served}; kernel slow-path frees {kernel.slow_munmaps}, "
            f"stream-held blocks {sum(len(v) for v in kernel.stream_cached().values())}"
        )
    result["failed_checks"] = failed
    dist.destroy_process_group()
    return result


if __name__ == "__main__":
    sys.exit(main())
