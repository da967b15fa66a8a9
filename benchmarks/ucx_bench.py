"""aml buffers through UCX (``ucxx``) between two processes on the host, against NumPy
arrays of the same size: an echo (send, receive back) of aml host buffers, pooled aml
buffers and NumPy arrays, interleaved, median round trip per size.

    python benchmarks/ucx_bench.py --out DIR        # JSON and markdown; about a minute
    python benchmarks/ucx_bench.py --peer KIND SIZE COUNT   # the other process (the tests use it)

The peer listens, prints its port (one JSON line), then for each of COUNT messages
receives SIZE bytes into a buffer of KIND (``aml``, ``aml-pool``, ``numpy``) and sends them
back; after the last it waits for a one-byte "done" (closing earlier would reset a send
still in flight) and exits. Needs ucxx (``pip install ucxx-cu13``: it runs without a GPU).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import aml_core
from aml_core.host import HostArea

KINDS = ("numpy", "aml", "aml-pool")
SIZES = (4096, 64 << 10, 1 << 20, 16 << 20, 64 << 20)


def make(kind: str, size: int) -> tuple[Any, list[Any]]:
    """A buffer of ``kind`` and what to close after it (nothing for NumPy)."""
    if kind == "numpy":
        return np.zeros(size, dtype=np.uint8), []
    area = HostArea()
    if kind == "aml-pool":
        pool = aml_core.pool(area)
        return pool.mmap(size), [pool, area]
    if kind == "aml":
        return area.mmap(size), [area]
    raise SystemExit(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")


async def serve(kind: str, size: int, count: int) -> None:
    import ucxx

    done = asyncio.Event()

    async def handler(ep: Any) -> None:
        buf, owners = make(kind, size)
        for _ in range(count):
            await ep.recv(buf)
            await ep.send(buf)
        await ep.recv(np.empty(1, dtype=np.uint8))  # the other side has all it asked for
        del buf
        for owner in owners:
            owner.close()
        await ep.close()
        done.set()

    listener = ucxx.create_listener(handler)
    print(json.dumps({"port": listener.port}), flush=True)
    await done.wait()
    listener.close()


def start_peer(kind: str, size: int, count: int) -> tuple[subprocess.Popen[str], int]:
    """The other process (this script with ``--peer``) and the port it listens on."""
    env = {**os.environ, "UCX_WARN_UNUSED_ENV_VARS": "n"}
    peer = subprocess.Popen(
        [sys.executable, __file__, "--peer", kind, str(size), str(count)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert peer.stdout is not None
    line = peer.stdout.readline()
    if not line:
        err = peer.stderr.read() if peer.stderr else ""
        raise RuntimeError(f"the peer printed no port: {err[-2000:]}")
    return peer, int(json.loads(line)["port"])


async def echo(port: int, send: Any, receive: Any, count: int, times: list[float] | None = None) -> None:
    """``count`` round trips of ``send`` (received back into ``receive``), then "done"."""
    import ucxx

    ep = await ucxx.create_endpoint(ucxx.get_address(), port)
    for _ in range(count):
        t = time.perf_counter()
        await ep.send(send)
        await ep.recv(receive)
        if times is not None:
            times.append(time.perf_counter() - t)
    await ep.send(np.zeros(1, dtype=np.uint8))  # done: the peer may close
    await ep.close()


def measure(kind: str, size: int, count: int) -> float:
    """The median round trip (µs) of ``count`` echoes of a ``kind`` buffer of ``size`` bytes,
    both processes using that kind, after the first (warm-up) round trip."""
    send, owners = make(kind, size)
    receive, more = make(kind, size)
    np.frombuffer(send, dtype=np.uint8)[:] = 7
    peer, port = start_peer(kind, size, count + 1)
    times: list[float] = []
    try:
        asyncio.run(echo(port, send, receive, count + 1, times))
    finally:
        peer.communicate(timeout=120)
    if not np.array_equal(np.frombuffer(receive, dtype=np.uint8), np.frombuffer(send, dtype=np.uint8)):
        raise RuntimeError(f"{kind} {size}: the bytes came back changed")
    del send, receive
    for owner in owners + more:
        owner.close()
    return statistics.median(times[1:]) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="folder for ucx_bench.json and ucx_bench.md (default: print only)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per size (default 3)")
    parser.add_argument("--count", type=int, default=50, help="round trips per measurement (default 50)")
    parser.add_argument("--peer", nargs=3, metavar=("KIND", "SIZE", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.peer:
        asyncio.run(serve(args.peer[0], int(args.peer[1]), int(args.peer[2])))
        return 0
    import ucxx

    rows = []
    for size in SIZES:
        got: dict[str, list[float]] = {k: [] for k in KINDS}
        for r in range(args.rounds):
            for kind in KINDS[r % 3 :] + KINDS[: r % 3]:  # the order rotates each round
                got[kind].append(measure(kind, size, args.count))
        base = statistics.median(got["numpy"])
        for kind in KINDS:
            us = statistics.median(got[kind])
            rows.append({"size": size, "kind": kind, "us": us, "ratio": us / base, "samples": got[kind]})
            print(f"{size:>10} {kind:>9} {us:10.1f} µs  x{us / base:.3f}", flush=True)
    lines = [
        f"# aml buffers through UCX between two processes on the host ({datetime.date.today()})",
        "",
        f"ucxx {ucxx.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs. Echo round trip "
        f"(send, receive back), median of {args.count} per measurement, median of {args.rounds} "
        "interleaved rounds; both processes use the same kind. Ratio: time over NumPy's (target: "
        "within 5%).",
        "",
        "| size | kind | µs per round trip | x NumPy |",
        "|---:|---|---:|---:|",
        *(f"| {r['size']} | {r['kind']} | {r['us']:.1f} | {r['ratio']:.3f} |" for r in rows),
    ]
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "ucx_bench.json").write_text(json.dumps({"rows": rows, "ucxx": ucxx.__version__}, indent=1))
        (out / "ucx_bench.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
