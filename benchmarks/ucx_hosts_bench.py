"""aml buffers through UCX between the two emulated hosts, against NumPy arrays: the echo of
``ucx_bench.py`` (one endpoint for the run, the kinds taking turns size by size, the order
rotating each round) with its peer on host ``b`` (:mod:`tests.hosts.ucx_peer`). Runs on host
``a`` of ``python -m tests.support.two_hosts`` (the guests' virtual network, TCG: emulated,
relative figures only)::

    python -m tests.support.two_hosts --lock /work/coord/qemu.lock -- \\
        python benchmarks/ucx_hosts_bench.py --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import ucx_bench  # noqa: E402

from tests.hosts import agent  # noqa: E402
from tests.hosts.ucx_peer import RemotePeer  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="folder for ucx_hosts_bench.json and .md")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--count", type=int, default=None, help="round trips per measurement")
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 65536, 1 << 20])
    parser.add_argument("--stop-agent", action="store_true", help="end host b's agent afterwards")
    args = parser.parse_args(argv)
    if os.environ.get("AML_TWO_HOSTS") != "a":
        print("ucx_hosts_bench: runs on host a of python -m tests.support.two_hosts; nothing measured")
        return 77
    ucxx = ucx_bench.load_ucxx()

    agent.connect()
    kinds = ucx_bench.HOST_KINDS
    count = args.count
    try:
        got = asyncio.run(ucx_bench.run(kinds, args.sizes, args.rounds, count, start=RemotePeer))
    finally:
        if args.stop_agent:
            agent.stop()
    rows = []
    for size in args.sizes:
        base = statistics.median(got[size][kinds[0]])
        for kind in kinds:
            samples = got[size][kind]
            spread = [t / b for t, b in zip(samples, got[size][kinds[0]], strict=True)]
            us = statistics.median(samples)
            rows.append(
                {
                    "size": size,
                    "kind": kind,
                    "us": us,
                    "ratio": us / base,
                    "round_ratios": spread,
                    "samples": samples,
                }
            )
    lines = [
        "# aml buffers through UCX between two emulated hosts "
        "(QEMU TCG guests, virtio-net over unix datagram sockets)",
        "",
        f"ucxx {ucxx.__version__} on UCX {ucxx.__ucx_version__} "
        f"({os.environ.get(ucx_bench.UCX_LIBDIR_ENV) or 'the libucx wheel'}); "
        f"UCX_TLS={os.environ.get('UCX_TLS', '(UCX default)')}, "
        f"UCX_NET_DEVICES={os.environ.get('UCX_NET_DEVICES', '(UCX default)')}. Echo round trip, "
        f"host a to host b and back, median of {count or 'ucx_bench.round_trips(size)'} round trips per "
        f"measurement, median of {args.rounds} interleaved rounds. "
        "Emulated: compare the ratios, not the times.",
        "",
        f"| size | kind | µs per round trip | x {kinds[0]} | rounds' spread |",
        "|---:|---|---:|---:|---|",
        *(
            f"| {r['size']} | {r['kind']} | {r['us']:.1f} | {r['ratio']:.3f} | "
            f"{min(r['round_ratios']):.3f} to {max(r['round_ratios']):.3f} |"
            for r in rows
        ),
    ]
    print("\n".join(lines), flush=True)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "ucx_hosts_bench.json").write_text(
            json.dumps(
                {
                    "rows": rows,
                    "ucxx": ucxx.__version__,
                    "ucx": ucxx.__ucx_version__,
                    "ucx_libdir": os.environ.get(ucx_bench.UCX_LIBDIR_ENV),
                    "ucx_tls": os.environ.get("UCX_TLS"),
                    "ucx_net_devices": os.environ.get("UCX_NET_DEVICES"),
                },
                indent=1,
            )
        )
        (out / "ucx_hosts_bench.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
