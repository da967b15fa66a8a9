"""Where the alternating pool's time goes (issue 31 item 8's "alternating within 1.2x of
the plain figure"): a pool over ``aml_cuda.create(0)``, each size timed as plain
``mmap``+``munmap`` pairs, as pairs on a stream, and as the alternation alloc_bench times
(a stream pair, then a plain pair: the plain request finds the block on the stream's list
and takes it back to host order after an event query), with the pool's counters over each
loop; beside them the event record and query the kernel makes for that, called through
cuda-bindings (less the cost of two cuda-bindings calls that do nothing, ``cudaGetDevice``),
and the same alternation on a pool whose slabs hold more than one block of the size.

Usage on the GPU machine: ``python benchmarks/alternate_cost.py [--out FILE]`` (JSON to
stdout and FILE; about 10 s).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from timing import batch_median_us, ck

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SIZES = (64 * KiB, MiB, 64 * MiB, GiB)


def per_call_us(fn: Callable[[], object], reps: int, rounds: int = 7) -> float:
    """The median over ``rounds`` of the mean µs of ``reps`` calls of ``fn`` (after one
    warm-up round)."""
    return batch_median_us(fn, reps, rounds=rounds, warm=reps)


def counters(pool: Any) -> dict[str, int]:
    s = pool.pool_stats
    return {"hits": s.pool_hits, "misses": s.pool_misses, "slabs": s.slabs, "native": s.native_allocations}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in before}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import aml_cuda
    from cuda.bindings import runtime as rt

    import aml_core

    result: dict[str, Any] = {"sizes": {}}
    stream = aml_cuda.stream(non_blocking=True)
    for n in SIZES:
        reps = 2000 if n < GiB else 500
        row: dict[str, Any] = {}
        area = aml_cuda.create(0)
        with aml_core.pool(area) as pool:

            def plain(pool: Any = pool, n: int = n) -> None:
                pool.munmap(pool.mmap(n))

            def on_stream(pool: Any = pool, n: int = n) -> None:
                pool.munmap(pool.mmap(n, stream=stream))

            def alternate(pool: Any = pool, n: int = n) -> None:
                pool.munmap(pool.mmap(n, stream=stream))
                pool.munmap(pool.mmap(n))

            for name, fn, calls in (
                ("plain", plain, 1),
                ("stream", on_stream, 1),
                ("alternate", alternate, 2),
            ):
                before = counters(pool)
                row[f"{name}_us_per_pair"] = per_call_us(fn, reps) / calls
                row[f"{name}_counters"] = delta(before, counters(pool))
            row["event_made"] = pool._kernel.event is not None
            stream.synchronize()
        area.close()
        if n <= MiB:  # the same alternation where a slab holds one block: always a hand-back
            area = aml_cuda.create(0)
            with aml_core.pool(area, small_slab=n, small_max=n) as one:

                def alternate_one(pool: Any = one, n: int = n) -> None:
                    pool.munmap(pool.mmap(n, stream=stream))
                    pool.munmap(pool.mmap(n))

                before = counters(one)
                row["alternate_one_block_a_slab_us_per_pair"] = per_call_us(alternate_one, reps) / 2
                row["alternate_one_block_a_slab_counters"] = delta(before, counters(one))
                stream.synchronize()
            area.close()
        result["sizes"][str(n)] = row
        print(json.dumps({"size": n, **row}), flush=True)

    flags = rt.cudaEventDisableTiming
    event = ck(rt.cudaEventCreateWithFlags(flags))
    handle = rt.cudaStream_t(stream.handle)

    def record_query() -> None:
        rt.cudaEventRecord(event, handle)
        rt.cudaEventQuery(event)

    def two_calls() -> None:
        rt.cudaGetDevice()
        rt.cudaGetDevice()

    raw = per_call_us(record_query, 5000)
    base = per_call_us(two_calls, 5000)
    result["cuda_bindings"] = {
        "event_record_query_us": raw,
        "two_noop_calls_us": base,
        "record_query_less_python_us": raw - base,
    }
    ck(rt.cudaEventDestroy(event))
    stream.close()
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
