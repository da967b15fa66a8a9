"""Soak aml's pools on one GPU (issue 12, "Nothing leaks"): 10**5 mixed pool operations,
then, after ``trim()`` and ``close()``, device memory must be back to its baseline.

The pools, all over one device's areas: a plain device pool (also used in stream order on
two streams, with blocks freed on the other stream), a pool with a 32 MiB ``limit``, one
with a 4 MiB ``release_threshold``, pools over managed and pinned host areas, and an
expandable pool over the virtual-memory area. The operations, drawn from a seeded
generator: mmap of 256 B .. 12 MiB from a random pool (ENOMEM past the limited pool's
limit is expected and counted), munmap (``munmap(..., stream=)`` another stream for stream blocks),
``trim()``, a write and read back through the pool, IPC export of a pooled block opened and
closed by a long-lived child (the block's offset in its slab must survive), and the
issue's bad input, which must raise AML errors: a pool over a closed area, a limit below
one block, freeing on a destroyed stream, a garbage stream, double munmap, and a block of
one pool given to another.

The baseline is read before any area, pool, stream or child of the run exists (after a
priming pass that made and closed one of each: the context's own first-use memory is in
it, nothing that ``close()`` frees is). After every block was freed and every pool trimmed
(the pools and the child still open), ``bytes_reserved`` must be 0 and free memory not
below the warm-up's reading; after every pool and area was closed and the child exited,
free memory must be within ``--slack`` (2 MiB) of the baseline on *both* sides
(``memory_check.py``: memory above the baseline means the baseline held something, and a
leak that small could hide). ``--leak N`` leaks N bytes on purpose: the run must fail. Free memory is
``cudaMemGetInfo`` (aml-cuda) or ``hipMemGetInfo`` (aml-hip, ``--backend hip``: through
the HIP double on a CPU machine, which checks this script, or its CUDA-forwarding mode).

Usage::

    python benchmarks/soak_pool.py --out "$OUT"                 # 10**5 operations on the GPU
    python benchmarks/soak_pool.py --backend hip --ops 3000 --live 48 --out /tmp/soak   # HIP double

It writes ``soak_pool_<backend>.json`` and ``.log`` under ``--out`` (default $OUT, else
``evidence/<date>-<machine>-soak-pool/``) and exits 1 when memory
did not come back or a bad input was not refused.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import random
import sys
import time
from typing import Any, TextIO

import memory_check
from machine_info import out_dir
from soak_child import Importer

MiB = 1 << 20
SIZES = (256, 4096, 65536, MiB, 4 * MiB, 12 * MiB)


class PoolSoak:
    def __init__(self, backend_name: str, ops: int, seed: int, max_live: int, log: TextIO) -> None:
        import aml_core
        from aml_core.gpu import GpuFlags

        self.aml_core = aml_core
        self.name = backend_name
        self.backend: Any = importlib.import_module(f"aml_{backend_name}")
        self.ops = ops
        self.max_live = max_live
        self.rng = random.Random(seed)
        self.log = log
        self.rt = self.backend.get_runtime()
        self.rt.set_device(0)
        create = self.backend.create
        self.areas = {
            "device": create(0, GpuFlags.DEFAULT),
            "managed": create(0, GpuFlags.ALLOC_UNIFIED),
            "host": create(0, GpuFlags.ALLOC_HOST),
            "vm": self.backend.BACKEND.virtual_memory(0),
        }
        pool = aml_core.pool
        dev = self.areas["device"]
        self.pools: dict[str, Any] = {
            "device": pool(dev),
            "limited": pool(dev, limit=32 * MiB),
            "threshold": pool(dev, release_threshold=4 * MiB),
            "managed": pool(self.areas["managed"]),
            "host": pool(self.areas["host"]),
            "expandable": pool(self.areas["vm"], expandable=True, capacity=1 << 30),
        }
        self.streams = [self.backend.BACKEND.stream(non_blocking=True) for _ in range(2)]
        self.stream_ordered = self._has_stream_order()
        # (pool name, buffer, stream index or None, first bytes written or None)
        self.live: list[tuple[str, Any, int | None, bytes | None]] = []
        self.counts: dict[str, int] = {}
        self.refused = 0
        self.expected_enomem = 0
        self.problems: list[str] = []
        self.child = Importer(f"aml_{backend_name}")

    def _has_stream_order(self) -> bool:
        from aml_core.errors import AMLNotSupported

        try:
            buf = self.pools["device"].mmap(4096, stream=self.streams[0])
        except AMLNotSupported as exc:
            self.say(f"no stream-ordered pools on {self.name}: {exc}")
            return False
        self.pools["device"].munmap(buf)
        return True

    def say(self, text: str) -> None:
        print(text, file=self.log, flush=True)
        print(text, flush=True)

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def free_memory(self) -> int:
        for s in self.streams:
            if not s.closed:
                s.synchronize()
        self.rt.synchronize()
        if hasattr(self.rt, "memory_info"):
            return int(self.rt.memory_info()[0])  # cudaMemGetInfo
        free = self.rt.free_memory(0)  # hipMemGetInfo
        if free is None:
            raise RuntimeError(f"{self.name} cannot read free device memory")
        return int(free)

    def refuse(self, what: str, fn: Any) -> None:
        from aml_core.errors import AMLError

        try:
            fn()
        except AMLError:
            self.refused += 1
        except BaseException as exc:
            self.problems.append(f"{what}: a bare {type(exc).__name__}: {exc}")
        else:
            self.problems.append(f"{what}: not refused")

    # -- steps -------------------------------------------------------------------------------
    def step(self) -> None:
        r = self.rng.random()
        if (r < 0.5 or not self.live) and len(self.live) < self.max_live:
            self.allocate()
        elif r < 0.88:  # (also an allocation when max_live blocks are held)
            self.free(self.rng.randrange(len(self.live)))
        elif r < 0.91:
            name = self.rng.choice(list(self.pools))
            self.pools[name].trim()
            self.count("trim")
        elif r < 0.95:
            self.check_contents()
        elif r < 0.97:
            self.ipc()
        else:
            self.hostile()

    def allocate(self) -> None:
        from aml_core.errors import AMLMemoryError

        name = self.rng.choice(list(self.pools))
        pool = self.pools[name]
        size = self.rng.choice(SIZES)
        stream = None
        if name == "device" and self.stream_ordered and self.rng.random() < 0.3:
            stream = self.rng.randrange(2)
        try:
            buf = pool.mmap(size, stream=None if stream is None else self.streams[stream])
        except AMLMemoryError:
            if name != "limited":
                raise
            self.expected_enomem += 1  # past the 32 MiB limit, after the pool released its cache
            return
        head = None
        if self.rng.random() < 0.2:
            if stream is not None:
                self.streams[stream].synchronize()
            head = self.rng.randbytes(16)
            pool.write(buf, head)
        self.live.append((name, buf, stream, head))
        self.count(f"mmap {name}" + (" on a stream" if stream is not None else ""))

    def free(self, index: int) -> None:
        name, buf, stream, _ = self.live.pop(index)
        pool = self.pools[name]
        if stream is not None and self.rng.random() < 0.5:
            pool.munmap(buf, stream=self.streams[1 - stream])  # freed in the other stream's order
            self.count("munmap_on another stream")
        else:
            pool.munmap(buf)
            self.count("munmap")

    def check_contents(self) -> None:
        written = [i for i, entry in enumerate(self.live) if entry[3] is not None]
        if not written:
            return
        name, buf, stream, head = self.live[self.rng.choice(written)]
        if stream is not None:
            self.streams[stream].synchronize()
        got = self.pools[name].read(buf, 16)
        if got != head:
            self.problems.append(f"{name} block {buf!r} reads {got.hex()}, wrote {head!r}")
        self.count("read back")

    def ipc(self) -> None:
        pool = self.pools["device"]
        buf = pool.mmap(self.rng.choice((4096, 65536, MiB)))
        head = self.rng.randbytes(16)
        pool.write(buf, head)
        handle = pool.ipc_export(buf).handle
        reply = self.child.open(handle)
        if reply.get("size") != buf.size or not reply.get("closed") or reply.get("head") != head.hex():
            self.problems.append(f"IPC open of a pooled block: {reply}, wrote {head.hex()}")
        pool.munmap(buf)
        self.count("ipc")

    def hostile(self) -> None:
        from aml_core.gpu import GpuFlags

        pool, other = self.pools["device"], self.pools["managed"]
        closed = self.backend.create(0, GpuFlags.DEFAULT)
        closed.close()
        self.refuse("pool over a closed area", lambda: self.aml_core.pool(closed))
        self.refuse("limit below one block", lambda: self.aml_core.pool(self.areas["device"], limit=100))
        buf = pool.mmap(4096)
        self.refuse("block of another pool", lambda: other.munmap(buf))
        self.refuse("garbage stream", lambda: pool.munmap(buf, stream=object()))
        if self.stream_ordered:
            dead = self.backend.BACKEND.stream(non_blocking=True)
            dead.close()
            self.refuse("free on a destroyed stream", lambda: pool.munmap(buf, stream=dead))
            self.refuse("mmap on a destroyed stream", lambda: pool.mmap(4096, stream=dead))
        if buf.freed:
            self.problems.append("a refused munmap freed the block")
        pool.munmap(buf)
        self.refuse("double munmap", lambda: pool.munmap(buf))
        self.count("hostile")

    # -- the end -----------------------------------------------------------------------------
    def free_everything(self) -> None:
        while self.live:
            self.free(len(self.live) - 1)
        for pool in self.pools.values():
            pool.trim()

    def reserved(self) -> dict[str, int]:
        return {name: pool.pool_stats.bytes_reserved for name, pool in self.pools.items()}

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        for s in self.streams:
            s.close()
        for area in self.areas.values():
            area.close()
        self.child.close()


def prime(backend_name: str, free: Any, log: TextIO) -> dict[str, int]:
    """Make and close one of everything the soak uses, step by step (each pool kind with a
    write and a read back, blocks on two streams freed on the other, a limited pool driven
    to ENOMEM, an IPC export opened by a child, the bad input), so that the context's own
    first-use memory is in the baseline read after it, while nothing that ``close()``
    frees is. Returns the free memory each step left taken (``free()`` before minus after),
    written to the log: where the context grew."""
    import aml_core
    from aml_core.errors import AMLError
    from aml_core.gpu import GpuFlags

    backend: Any = importlib.import_module(f"aml_{backend_name}")

    def pool_step(flags: Any = GpuFlags.DEFAULT, **kw: Any) -> None:
        area = backend.create(0, flags)
        try:
            with aml_core.pool(area, **kw) as p:
                buf = p.mmap(4096)
                p.write(buf, b"0123456789abcdef")
                p.read(buf, 16)
                p.munmap(buf)
        finally:
            area.close()

    def expandable() -> None:
        vm = backend.BACKEND.virtual_memory(0)
        try:
            with aml_core.pool(vm, expandable=True, capacity=1 << 30) as p:
                p.munmap(p.mmap(4096))
        finally:
            vm.close()

    def streams() -> None:
        area = backend.create(0, GpuFlags.DEFAULT)
        ss = [backend.BACKEND.stream(non_blocking=True) for _ in range(2)]
        try:
            with aml_core.pool(area) as p, contextlib.suppress(aml_core.AMLNotSupported):  # no stream order
                buf = p.mmap(4096, stream=ss[0])
                p.munmap(buf, stream=ss[1])
                p.munmap(p.mmap(4096, stream=ss[1]))
                p.trim()
        finally:
            for st in ss:
                st.close()
            area.close()

    def limited() -> None:
        area = backend.create(0, GpuFlags.DEFAULT)
        try:
            with aml_core.pool(area, limit=32 * MiB) as p:
                held = []
                with contextlib.suppress(AMLError):
                    for _ in range(8):
                        held.append(p.mmap(12 * MiB))
                for buf in held:
                    p.munmap(buf)
        finally:
            area.close()

    def ipc() -> None:
        area = backend.create(0, GpuFlags.DEFAULT)
        child = Importer(f"aml_{backend_name}")
        try:
            with aml_core.pool(area) as p:
                buf = p.mmap(MiB)
                p.write(buf, b"0123456789abcdef")
                child.open(p.ipc_export(buf).handle)
                p.munmap(buf)
        finally:
            child.close()
            area.close()

    steps = {
        "device pool, write and read": pool_step,
        "managed pool": lambda: pool_step(GpuFlags.ALLOC_UNIFIED),
        "pinned host pool": lambda: pool_step(GpuFlags.ALLOC_HOST),
        "release-threshold pool": lambda: pool_step(release_threshold=4 * MiB),
        "expandable pool": expandable,
        "two streams": streams,
        "limited pool to ENOMEM": limited,
        "IPC through a child": ipc,
    }
    taken: dict[str, int] = {}
    for name, step in steps.items():
        before = free()
        step()
        taken[name] = before - free()
        print(f"prime: {name}: {taken[name]} bytes left taken", file=log, flush=True)
    return taken


def leak(backend_name: str, nbytes: int) -> int:
    """Allocate ``nbytes`` of device memory with the runtime's own malloc and never free it:
    ``--leak``, the check's own test (a soak that passes with it has a blind check)."""
    from aml_core.gpu.groups import Group

    backend: Any = importlib.import_module(f"aml_{backend_name}")
    return int(backend.get_runtime().require(Group.ALLOCATION).malloc(nbytes))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("cuda", "hip"), default="cuda")
    parser.add_argument("--out", help="default: $OUT, else evidence/<date>-<machine>-soak-pool/")
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--budget", type=float, default=240.0, help="stop the loop after this many seconds")
    parser.add_argument("--live", type=int, default=256, help="most blocks held at once (about 3 MiB each)")
    memory_check.add_arguments(parser)
    args = parser.parse_args(argv)
    args.out = str(out_dir(args.out, "soak-pool"))
    os.makedirs(args.out, exist_ok=True)
    started = time.monotonic()
    stem = os.path.join(args.out, f"soak_pool_{args.backend}")
    with open(stem + ".log", "w") as log:
        backend: Any = importlib.import_module(f"aml_{args.backend}")
        rt = backend.get_runtime()
        rt.set_device(0)

        def clean_free() -> int:
            rt.synchronize()
            if hasattr(rt, "memory_info"):
                return int(rt.memory_info()[0])
            return int(rt.free_memory(0))

        primed = prime(args.backend, clean_free, log)

        baseline = clean_free()
        print(
            f"baseline free {baseline} bytes (before any area, pool, stream or child)", file=log, flush=True
        )
        soak = PoolSoak(args.backend, args.ops, args.seed, args.live, log)
        for _ in range(200):  # warm-up: slabs of every pool, the IPC child's first open
            soak.step()
        soak.free_everything()
        warm = soak.free_memory()
        soak.say(f"free {warm} bytes after the warm-up, every pool trimmed (the pools and the child open)")
        done = 0
        for done in range(1, args.ops + 1):
            soak.step()
            if done % 10_000 == 0:
                held = sum(soak.reserved().values())
                soak.say(
                    f"{done} ops: free {soak.free_memory()} bytes, {len(soak.live)} live, {held} reserved"
                )
            if time.monotonic() - started > args.budget:
                soak.say(f"time budget reached after {done} ops")
                break
        peak = {name: pool.pool_stats.peak_bytes_reserved for name, pool in soak.pools.items()}
        soak.free_everything()
        if args.leak:
            soak.say(f"leaking {args.leak} bytes on purpose (--leak)")
            leak(args.backend, args.leak)
        reserved_after_trim = soak.reserved()
        after_trim = soak.free_memory()
        soak.close()
        # what the backend still holds with every pool, area and stream closed (the
        # verdict is read after BACKEND.reset(), as soak_cuda.py's is; both are written)
        before_reset, _ = memory_check.settle(clean_free, baseline, args.slack)
        held_until_reset = memory_check.verdict(baseline, before_reset, args.slack)
        soak.say(f"free {before_reset} bytes with everything closed, before BACKEND.reset()")
        backend.BACKEND.reset()
        final, reads = memory_check.settle(clean_free, baseline, args.slack)
        closed = memory_check.verdict(baseline, final, args.slack)
        # After trim the pools and the child are still open: their memory is measured
        # against the warm-up's reading, and only for memory not given back (the child's
        # context is in it); the two-sided check is the one after close.
        trim_leak = warm - after_trim
        ok = (
            closed["ok"]
            and trim_leak <= args.slack
            and not any(reserved_after_trim.values())
            and not soak.problems
        )
        result = {
            "backend": args.backend,
            "ops": done,
            "ops_requested": args.ops,
            "seed": args.seed,
            "stream_ordered": soak.stream_ordered,
            "counts": dict(sorted(soak.counts.items())),
            "limit_enomem": soak.expected_enomem,
            "peak_reserved": peak,
            "baseline_free": baseline,
            "baseline": "read before any area, pool, stream or child existed (after a priming pass)",
            "prime_left_taken": primed,
            "free_after_warmup": warm,
            "free_after_trim": after_trim,
            "reserved_after_trim": reserved_after_trim,
            "free_after_close_before_reset": before_reset,
            "before_reset": held_until_reset,
            "free_after_close": final,
            "readings_after_close": reads,
            "leaked_after_trim": trim_leak,
            "leaked_after_close": closed["leaked_bytes"],
            "after_close": closed,
            "slack": args.slack,
            "leaked_on_purpose": args.leak,
            "bad_input_refused": soak.refused,
            "problems": soak.problems[:50],
            "seconds": round(time.monotonic() - started, 1),
            "ok": ok,
        }
        soak.say(json.dumps(result))
    with open(stem + ".json", "w") as f:
        json.dump(result, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
