"""Soak aml-cuda on one GPU (issue 9): 10**5 mixed operations, then device memory must be
back to its ``cudaMemGetInfo`` baseline.

The operations, drawn from a seeded generator: device, managed and pinned host mmap/munmap
of 256 B .. 4 MiB; virtual-memory one-step mmap/munmap and growable buffers that grow;
stream create/synchronize/close; IPC export of a device buffer opened and closed by a
long-lived child process (the importer side, with its own aml import area); and hostile
input (double munmap, foreign pointers, bad sizes, tampered IPC handles sent to the child)
that must raise AML errors. Every 10**4 operations the free device memory is logged.

The baseline is read before any area, stream or child of the run exists (after a priming
pass that made and closed one of each: the context's own first-use memory is in it,
nothing that ``close()`` frees is), and the final reading after everything was closed and
the child exited; the run passes when free memory is within ``--slack`` bytes (default
2 MiB: the driver's own bookkeeping pages) of the baseline on *both* sides
(``memory_check.py``) and every hostile input raised an AML error. ``--leak N`` leaks N
bytes on purpose: the run must fail.

Usage on the GPU machine::

    python benchmarks/soak_cuda.py --out "$OUT"            # 10**5 operations, < 4 minutes
    python benchmarks/soak_cuda.py --out /tmp/soak --ops 20000

It writes ``soak_cuda.json`` (the figures and the verdict) and ``soak_cuda.log`` under
``--out`` (default $OUT, else ``evidence/<date>-<machine>-soak-cuda/``) and exits 1 when
device memory did not come back or an input was not refused.
"""

from __future__ import annotations

import argparse
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


class Soak:
    def __init__(self, ops: int, seed: int, budget: float, log: TextIO) -> None:
        import aml_cuda
        from aml_cuda import CudaFlags

        self.aml_cuda = aml_cuda
        self.ops = ops
        self.rng = random.Random(seed)
        self.budget = budget
        self.log = log
        self.rt = aml_cuda.get_runtime()
        self.rt.set_device(0)
        self.device = aml_cuda.create(0, CudaFlags.DEFAULT)
        self.managed = aml_cuda.create(0, CudaFlags.ALLOC_UNIFIED)
        self.host = aml_cuda.create(0, CudaFlags.ALLOC_HOST)
        self.vm = aml_cuda.BACKEND.virtual_memory(0)
        self.g = self.vm.granularity()
        self.live: list[tuple[Any, Any]] = []  # (area, buffer)
        self.counts: dict[str, int] = {}
        self.refused = 0
        self.not_refused: list[str] = []
        self.child = Importer("aml_cuda")

    def say(self, text: str) -> None:
        print(text, file=self.log, flush=True)
        print(text, flush=True)

    def free_memory(self) -> int:
        self.rt.synchronize()
        return self.rt.memory_info()[0]

    def hostile(self, what: str, fn: Any) -> None:
        from aml_core.errors import AMLError

        try:
            fn()
        except AMLError:
            self.refused += 1
        else:
            self.not_refused.append(what)

    def step(self) -> None:
        from aml_core.errors import AMLError

        r = self.rng.random()
        if r < 0.55 or not self.live:
            kind = self.rng.choice(("device", "device", "managed", "host", "vm", "growable"))
            size = self.rng.choice((256, 4096, 65536, MiB, 4 * MiB))
            if kind == "vm":
                self.live.append((self.vm, self.vm.mmap(self.g)))
            elif kind == "growable":
                buf = self.vm.growable(4 * self.g)
                buf.grow(self.rng.choice((self.g, 2 * self.g, 4 * self.g)))
                self.live.append((self.vm, buf))
            else:
                area = getattr(self, kind)
                self.live.append((area, area.mmap(size)))
            self.counts[kind] = self.counts.get(kind, 0) + 1
        elif r < 0.93:
            area, buf = self.live.pop(self.rng.randrange(len(self.live)))
            area.munmap(buf)
            self.counts["munmap"] = self.counts.get("munmap", 0) + 1
        elif r < 0.95:
            with self.aml_cuda.BACKEND.stream(non_blocking=True) as stream:
                stream.synchronize()
            self.counts["stream"] = self.counts.get("stream", 0) + 1
        elif r < 0.97:
            buf = self.device.mmap(self.rng.choice((4096, MiB)))
            handle = self.device.ipc_export(buf).handle
            reply = self.child.open(handle)
            if reply.get("size") != buf.size or not reply.get("closed"):
                self.not_refused.append(f"IPC open of a valid handle: {reply}")
            if self.rng.random() < 0.3:  # a tampered copy: the importer must refuse it
                field, value = self.rng.choice(
                    (("device", -5), ("device", 2**40), ("device", 977), ("size", buf.size + (1 << 30)))
                )
                object.__setattr__(handle, field, value)
                reply = self.child.open(handle)
                if "error" in reply:
                    self.refused += 1
                else:
                    self.not_refused.append(f"tampered IPC handle: {reply}")
            self.device.munmap(buf)
            self.counts["ipc"] = self.counts.get("ipc", 0) + 1
        else:
            buf = self.device.mmap(4096)
            self.device.munmap(buf)
            self.hostile("double munmap", lambda: self.device.munmap(buf))
            self.hostile("foreign pointer", lambda: self.device.munmap(0x1000))
            self.hostile("size 0", lambda: self.device.mmap(0))
            self.hostile("size 2**64", lambda: self.device.mmap(2**64))
            self.hostile("vm size 2**63-1", lambda: self.vm.mmap(2**63 - 1))
            try:
                huge = self.managed.mmap(1 << 50)  # far past host + device memory: ENOMEM
            except AMLError:
                self.refused += 1
            else:
                self.managed.munmap(huge)
                self.not_refused.append("managed mmap of 2**50 bytes")
            self.counts["hostile"] = self.counts.get("hostile", 0) + 1

    def close(self) -> None:
        for area, buf in self.live:
            area.munmap(buf)
        self.live.clear()
        for area in (self.device, self.managed, self.host, self.vm):
            area.close()
        self.child.close()


def prime() -> None:
    """Make and close one of everything the soak uses (each area, a virtual-memory
    mapping and a growable buffer, a stream, an IPC export), so that the context's own
    first-use memory is in the baseline read after it, while nothing ``close()`` frees is."""
    import aml_cuda
    from aml_cuda import CudaFlags

    areas = [
        aml_cuda.create(0, flags)
        for flags in (CudaFlags.DEFAULT, CudaFlags.ALLOC_UNIFIED, CudaFlags.ALLOC_HOST)
    ]
    vm = aml_cuda.BACKEND.virtual_memory(0)
    try:
        for area in areas:
            area.munmap(area.mmap(4096))
        g = vm.granularity()
        vm.munmap(vm.mmap(g))
        buf = vm.growable(4 * g)
        buf.grow(g)
        vm.munmap(buf)
        with aml_cuda.BACKEND.stream(non_blocking=True) as stream:
            stream.synchronize()
        dev = areas[0].mmap(4096)
        areas[0].ipc_export(dev)
        areas[0].munmap(dev)
    finally:
        for area in (*areas, vm):
            area.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="default: $OUT, else evidence/<date>-<machine>-soak-cuda/")
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--budget", type=float, default=200.0, help="stop the loop after this many seconds")
    memory_check.add_arguments(parser)
    args = parser.parse_args(argv)
    args.out = str(out_dir(args.out, "soak-cuda"))
    os.makedirs(args.out, exist_ok=True)
    started = time.monotonic()
    with open(os.path.join(args.out, "soak_cuda.log"), "w") as log:
        import aml_cuda

        from aml_core.gpu.groups import Group

        rt = aml_cuda.get_runtime()
        rt.set_device(0)
        prime()

        def clean_free() -> int:
            rt.synchronize()
            return int(rt.memory_info()[0])

        baseline = clean_free()
        print(f"baseline free {baseline} bytes (before any area, stream or child)", file=log, flush=True)
        soak = Soak(args.ops, args.seed, args.budget, log)
        for _ in range(50):  # warm-up: every kind once, so the pools and the context exist
            soak.step()
        for area, buf in soak.live:
            area.munmap(buf)
        soak.live.clear()
        warm = soak.free_memory()
        soak.say(f"free {warm} bytes after the warm-up (the areas and the child open)")
        done = 0
        for done in range(1, args.ops + 1):
            soak.step()
            if done % 10_000 == 0:
                soak.say(f"{done} ops: free {soak.free_memory()} bytes, {len(soak.live)} live")
            if time.monotonic() - started > args.budget:
                soak.say(f"time budget reached after {done} ops")
                break
        if args.leak:
            soak.say(f"leaking {args.leak} bytes on purpose (--leak)")
            rt.require(Group.ALLOCATION).malloc(args.leak)
        soak.close()
        aml_cuda.BACKEND.reset()
        final, reads = memory_check.settle(clean_free, baseline, args.slack)
        check = memory_check.verdict(baseline, final, args.slack)
        ok = check["ok"] and not soak.not_refused
        result = {
            "ops": done,
            "ops_requested": args.ops,
            "seed": args.seed,
            "counts": soak.counts,
            "baseline_free": baseline,
            "baseline": "read before any area, stream or child existed (after a priming pass)",
            "free_after_warmup": warm,
            "final_free": final,
            "readings_after_close": reads,
            "leaked_bytes": check["leaked_bytes"],
            "after_close": check,
            "slack": args.slack,
            "leaked_on_purpose": args.leak,
            "hostile_refused": soak.refused,
            "not_refused": soak.not_refused,
            "seconds": round(time.monotonic() - started, 1),
            "ok": ok,
        }
        soak.say(json.dumps(result))
    with open(os.path.join(args.out, "soak_cuda.json"), "w") as f:
        json.dump(result, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
