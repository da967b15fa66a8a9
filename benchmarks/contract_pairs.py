"""The allocation contract's hot pairs (issue 31, item 8), old and new commits in one run.

Usage:
  python benchmarks/contract_pairs.py --compare OLD_ROOT NEW_ROOT [--rounds 5] [--out DIR]
  python benchmarks/contract_pairs.py --one            (the aml_core on sys.path; prints JSON)

Each case is the best of 7 loops of 200,000 pairs (``--loops``, ``--n``), in ns per pair:
  host_pool_pair   a host pool's cached mmap(4096) + munmap(buf), Buffer included
  numpy_pair       np.empty(4096, np.uint8) + del, in the same process (the target:
                   host_pool_pair <= 1.0x numpy_pair)
  hip_stream_pair  a pool over a HIP device area on the driver double (emulated: no GPU),
                   mmap(4096) on a stream (an aml Stream) + munmap: the block reused at
                   once on the stream (``stream=s`` where the tree has it, else the old
                   ``{"stream": s}``: the same case, each tree's spelling)
  hip_handle_pair  the same with the stream's int handle

``--clock thread`` times with the thread's CPU time (CLOCK_THREAD_CPUTIME_ID) instead of
the wall clock: on a machine shared with other work, the time this thread was not running
is left out (the caches it shares are not).

``--compare`` runs ``--one`` in a child process per tree (PYTHONPATH: the tree and its
backends/hip), alternating old and new ``--rounds`` times, and writes the best per case
and tree, and the new/old ratios, to ``DIR/contract_pairs.json``. The HIP double is the
one the HIP tests build (backends/hip/tests/native/hip_double.py); its path is passed as
AML_HIP_LIBRARY.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


#: The clock of ``_best`` (``--clock``): the wall clock, or this thread's CPU time.
CLOCKS = {"wall": time.perf_counter_ns, "thread": time.thread_time_ns}
_clock = CLOCKS["wall"]


def _best(body: Any, n: int, loops: int) -> float:
    best = float("inf")
    for _ in range(loops):
        start = _clock()
        body(n)
        best = min(best, (_clock() - start) / n)
    return best


def one(n: int, loops: int) -> dict[str, Any]:
    import numpy as np

    import aml_core
    from aml_core.host import HostArea

    out: dict[str, Any] = {"aml_core": str(Path(aml_core.__file__).parent)}
    host = HostArea()
    pool = aml_core.pool(host)
    pool.munmap(pool.mmap(4096))  # the block cached
    mmap, munmap = pool.mmap, pool.munmap

    def host_pair(k: int) -> None:
        for _ in range(k):
            munmap(mmap(4096))

    empty, u8 = np.empty, np.uint8

    def numpy_pair(k: int) -> None:
        for _ in range(k):
            a = empty(4096, u8)
            del a

    out["host_pool_pair"] = _best(host_pair, n, loops)
    out["numpy_pair"] = _best(numpy_pair, n, loops)
    out["host_pool_pair"] = min(out["host_pool_pair"], _best(host_pair, n, loops))  # interleaved twice
    out["numpy_pair"] = min(out["numpy_pair"], _best(numpy_pair, n, loops))
    pool.close()
    host.close()
    if os.environ.get("AML_HIP_LIBRARY"):
        import aml_hip

        s = aml_hip.stream(non_blocking=True)
        area = aml_hip.create(0, 0)
        p = aml_core.pool(area)
        try:
            p.munmap(p.mmap(4096, stream=s))
            new_api = True
        except TypeError:
            new_api = False
        pm, pu = p.mmap, p.munmap
        h = s.handle
        if new_api:

            def stream_pair(k: int) -> None:
                for _ in range(k):
                    pu(pm(4096, stream=s))

            def handle_pair(k: int) -> None:
                for _ in range(k):
                    pu(pm(4096, stream=h))

        else:
            by_stream, by_handle = {"stream": s}, {"stream": h}
            pm(4096, by_stream).free()

            def stream_pair(k: int) -> None:
                for _ in range(k):
                    pu(pm(4096, by_stream))

            def handle_pair(k: int) -> None:
                for _ in range(k):
                    pu(pm(4096, by_handle))

        out["hip_stream_pair"] = _best(stream_pair, n, loops)
        out["hip_handle_pair"] = _best(handle_pair, n, loops)
        out["hip_stream_pair"] = min(out["hip_stream_pair"], _best(stream_pair, n, loops))
        out["hip_handle_pair"] = min(out["hip_handle_pair"], _best(handle_pair, n, loops))
        out["hip_api"] = "mmap(n, stream=s)" if new_api else "mmap(n, {'stream': s})"
        p.close()
        area.close()
        s.close()
    return out


def _hip_double() -> str:
    sys.path.insert(0, str(HERE.parent / "backends" / "hip" / "tests" / "native"))
    sys.path.insert(0, str(HERE.parent))
    from hip_double import build_double  # type: ignore[import-not-found]

    return str(build_double("host"))


def compare(
    old: Path, new: Path, rounds: int, n: int, loops: int, out_dir: Path, clock: str = "wall"
) -> dict[str, Any]:
    library = _hip_double()
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    for _ in range(rounds):
        for label, root in (("old", old), ("new", new)):
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join([str(root), str(root / "backends" / "hip")])
            env["AML_HIP_LIBRARY"] = library
            proc = subprocess.run(
                [
                    sys.executable,
                    str(HERE / "contract_pairs.py"),
                    "--one",
                    "--n",
                    str(n),
                    "--loops",
                    str(loops),
                    "--clock",
                    clock,
                ],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                cwd=str(root),
            )
            runs[label].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    cases = ("host_pool_pair", "numpy_pair", "hip_stream_pair", "hip_handle_pair")
    best = {label: {c: min(r[c] for r in rs) for c in cases} for label, rs in runs.items()}
    sys.path.insert(0, str(HERE))
    from paired_stats import describe, summarize, verdict

    # Paired figures: each round's old and new children side by side, and within each
    # child its host pair against its own numpy pair.
    paired = {
        f"{c} new/old": summarize([b[c] / a[c] for a, b in zip(runs["old"], runs["new"], strict=True)])
        for c in cases
    }
    for label, rs in runs.items():
        paired[f"host_pool_pair/numpy_pair {label}"] = summarize(
            [r["host_pool_pair"] / r["numpy_pair"] for r in rs]
        )
    verdicts = {
        "host pool pair new <= old": verdict(paired["host_pool_pair new/old"], at_most=1.0),
        "HIP stream pair new <= old": verdict(paired["hip_stream_pair new/old"], at_most=1.0),
        "host pool pair <= numpy pair (new)": verdict(paired["host_pool_pair/numpy_pair new"], at_most=1.0),
    }
    result = {
        "what": "best ns per pair over rounds x (best of loops of n), old and new trees in one run",
        "clock": clock,
        "paired": {k: describe(v) for k, v in paired.items()},
        "paired_stats": paired,
        "verdicts": verdicts,
        "old": str(old),
        "new": str(new),
        "rounds": rounds,
        "n": n,
        "loops": loops,
        "hip_double": library,
        "best_ns": best,
        "new_over_old": {c: best["new"][c] / best["old"][c] for c in cases},
        "host_pool_over_numpy": {
            label: best[label]["host_pool_pair"] / best[label]["numpy_pair"] for label in best
        },
        "runs": runs,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "contract_pairs.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--one", action="store_true")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD_ROOT", "NEW_ROOT"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--loops", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    args = parser.parse_args()
    global _clock
    _clock = CLOCKS[args.clock]
    if args.one:
        print(json.dumps(one(args.n, args.loops)))
        return
    if args.compare is None:
        parser.error("--one or --compare OLD_ROOT NEW_ROOT")
    result = compare(args.compare[0], args.compare[1], args.rounds, args.n, args.loops, args.out, args.clock)
    keys = ("best_ns", "new_over_old", "host_pool_over_numpy", "paired", "verdicts")
    print(json.dumps({k: result[k] for k in keys}, indent=2))


if __name__ == "__main__":
    main()
