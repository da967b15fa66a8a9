"""aml-cuda on two GPUs against the raw cuda-bindings calls, in one run (issue 13, item 7).

Measures, each aml figure next to its raw reference taken in the same run (interleaved
repetition by repetition, medians after warm-up):

1. peer copy bandwidth, GPU 0 -> GPU 1 and back, 1 MiB .. 1 GiB: ``aml_cuda.copy_peer``
   between two aml device buffers against ``cudaMemcpyPeer`` (+ the same
   ``cudaStreamSynchronize(0)`` aml waits with) on the same buffers, with peer access
   disabled and then enabled (``enable_peer_access`` both ways); then, at 1 MiB, the time
   of each layer of ``copy_peer``: the raw calls (twice, a control), aml's runtime call,
   ``copy_peer``, and its checks alone;
2. IPC open across devices, in child processes: a handle exported on GPU 0 opened by a
   process whose current device is GPU 1 (and, for reference, GPU 0): aml's first open
   of a handle (cold) and the re-open (cached) against ``cudaIpcOpenMemHandle`` with the
   lazy peer flag;
3. managed prefetch between the GPUs, 1 GiB: ``area.prefetch`` against
   ``cudaMemPrefetchAsync`` (GPU 0 -> GPU 1, GPU 1 -> GPU 0, and host -> GPU 1).

Usage on a machine with two GPUs (writes gpu2_bench.json, gpu2_bench.md and
gpu2_bench_*.png to --out, default $OUT, else ``evidence/<date>-<machine>-gpu2-bench/``;
prints the summary last)::

    PYTHONUNBUFFERED=1 python benchmarks/gpu2_bench.py --out $OUT

With fewer than two GPUs it measures nothing, writes nothing and exits with status 77
and the reason. ``--smoke-one-gpu`` runs every step on one GPU with device 0 standing in
for device 1 (no peer access: a device is not its own peer), to check the script where
two GPUs are not to be had; its files are named ``gpu2_bench_SMOKE_one_gpu*`` and say so
on their first line: they are no two-GPU result. ``--quick`` runs fewer repetitions.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from machine_info import machine, out_dir
from timing import ck, human, paired

MiB = 1 << 20
GiB = 1 << 30
COPY_SIZES = (MiB, 64 * MiB, GiB)
#: Exit status when there are not two GPUs (nothing measured, nothing written).
NOT_TWO_GPUS = 77


def gbps(n: int, us: float) -> float:
    return n / (us * 1e-6) / 1e9


def topology() -> str:
    """``nvidia-smi topo -m`` (how the GPUs are linked: NVLink, PCIe), or why not."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "topo", "-m"], check=False, capture_output=True, text=True, timeout=30
        )
    except Exception as exc:
        return f"unavailable ({type(exc).__name__}: {exc})"
    return out.stdout.strip() if out.returncode == 0 else f"unavailable: {out.stderr.strip()}"


# -- 1b. where copy_peer's time goes ---------------------------------------------------------------
def copy_layers(
    aml_cuda: Any, rt: Any, dst: Any, dst_device: int, src: Any, src_device: int, reps: int
) -> dict[str, float]:
    """Median µs of a 1 MiB copy from ``src`` to ``dst`` at each layer:
    the raw calls, twice (an A/A control: their difference is the method's noise), aml's
    runtime call (``_memcpy_peer``: the calls and their error checks), ``copy_peer``
    (the buffers' checks on top), and the checks alone (the native call replaced by a
    no-op). The kinds take turns repetition by repetition, the order rotating."""
    ops = aml_cuda.copy_peer.__self__._peer_ops()
    native = ops._memcpy_peer

    def raw() -> None:
        (err,) = rt.cudaMemcpyPeer(dst.ptr, dst_device, src.ptr, src_device, MiB)
        (sync,) = rt.cudaStreamSynchronize(0)
        if err or sync:
            raise RuntimeError(f"cudaMemcpyPeer: {err!r}, cudaStreamSynchronize: {sync!r}")

    def checks_only() -> None:
        ops._memcpy_peer = lambda *args: None
        try:
            aml_cuda.copy_peer(dst, src, MiB)
        finally:
            del ops._memcpy_peer  # the class's method again

    kinds: dict[str, Callable[[], None]] = {
        "raw": raw,
        "raw again": raw,
        "runtime call": lambda: native(dst.ptr, dst_device, src.ptr, src_device, MiB),
        "copy_peer": lambda: aml_cuda.copy_peer(dst, src, MiB),
        "checks alone": checks_only,
    }
    names = list(kinds)
    times: dict[str, list[float]] = {k: [] for k in names}
    clock = time.perf_counter_ns
    for i in range(reps + 5):
        for k in names[i % len(names) :] + names[: i % len(names)]:
            t0 = clock()
            kinds[k]()
            if i >= 5:  # the first rounds warm up
                times[k].append((clock() - t0) / 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


# -- 2. the IPC child ------------------------------------------------------------------------------
#: A child opens two handles exported on GPU 0, current on the device named by argv[3]:
#: A is the process's first open (aml also builds its import area), B a cold open of another
#: handle in a process already set up, then A again (cached). The raw child opens A and B
#: with cudaIpcOpenMemHandle. gc.collect() first, so that no collection falls in a timing.
CHILD = r"""
import ctypes, gc, json, pickle, sys, time
import aml_cuda
from cuda.bindings import runtime as rt_
a, b = (pickle.loads(bytes.fromhex(x)) for x in sys.argv[1:3])
device, mode = int(sys.argv[3]), sys.argv[4]
r = aml_cuda.get_runtime(); r.set_device(device); r.synchronize()
clock = time.perf_counter_ns
if mode == "raw":
    out, opened = {}, []
    for name, handle in (("a", a), ("b", b)):
        raw = ctypes.create_string_buffer(handle.data, 64)
        h = rt_.cudaIpcMemHandle_t(_ptr=ctypes.addressof(raw))
        gc.collect()
        t0 = clock(); err, p = rt_.cudaIpcOpenMemHandle(h, rt_.cudaIpcMemLazyEnablePeerAccess)
        dt = clock() - t0
        assert int(err) == 0, err
        out[name] = dt / 1e3
        opened.append(p)
    for p in opened:
        rt_.cudaIpcCloseMemHandle(p)
    print(json.dumps(out)); sys.exit()
gc.collect()
t0 = clock(); buf_a = aml_cuda.ipc_open(a); dt_a = clock() - t0
gc.collect()
t0 = clock(); buf_b = aml_cuda.ipc_open(b); dt_b = clock() - t0
cached = []
for _ in range(200):
    t0 = clock(); again = aml_cuda.ipc_open(a); cached.append(clock() - t0)
    assert again is buf_a
for _ in range(201):
    aml_cuda.ipc_close(buf_a)
aml_cuda.ipc_close(buf_b)
assert buf_a.freed and buf_b.freed
cached.sort()
print(json.dumps({"a": dt_a / 1e3, "b": dt_b / 1e3, "cached": cached[len(cached) // 2] / 1e3}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="default: $OUT, else evidence/<date>-<machine>-gpu2-bench/")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions: a smoke test")
    parser.add_argument(
        "--smoke-one-gpu",
        action="store_true",
        help="run every step on one GPU (device 0 stands in for device 1): checks the script, measures "
        "no two-GPU figure; files named gpu2_bench_SMOKE_one_gpu*",
    )
    args = parser.parse_args()
    quick, smoke = args.quick or args.smoke_one_gpu, args.smoke_one_gpu

    import aml_cuda
    import cuda.bindings
    from aml_cuda import CudaFlags
    from cuda.bindings import runtime as rt

    probe = aml_cuda.probe()
    if not probe.available:
        print(
            f"gpu2_bench: no usable CUDA GPU ({probe.reason}): nothing measured, nothing written",
            file=sys.stderr,
        )
        raise SystemExit(NOT_TWO_GPUS)
    count = len(probe.devices)
    if count < 2 and not smoke:
        print(
            f"gpu2_bench needs 2 GPUs, this machine has {count}: nothing measured, nothing written "
            "(--smoke-one-gpu checks the script on one)",
            file=sys.stderr,
        )
        raise SystemExit(NOT_TWO_GPUS)
    d0, d1 = (0, 0) if smoke else (0, 1)
    started = time.monotonic()
    meta: dict[str, Any] = {
        **machine(),
        "date": datetime.date.today().isoformat(),
        "gpus": [
            {
                "index": d.index,
                "name": d.name,
                "memory_bytes": d.total_memory,
                "pci_bus_id": d.details.get("pci_bus_id"),
                "compute_capability": d.details.get("compute_capability"),
            }
            for d in probe.devices
        ],
        "driver": probe.devices[0].details.get("driver_version"),
        "cuda_driver_api": probe.devices[0].details.get("cuda_driver_api"),
        "cuda_bindings": cuda.bindings.__version__,
        "aml_cuda": aml_cuda.__version__,
        "devices_measured": [d0, d1],
        "smoke_one_gpu": smoke,
        "topology": topology(),
    }
    print(json.dumps({k: v for k, v in meta.items() if k != "topology"}), flush=True)
    results: dict[str, Any] = {"meta": meta}
    rtm = aml_cuda.get_runtime()
    rtm.set_device(0)
    for d in {d0, d1}:
        rtm.set_device(d)
        rtm.synchronize()  # both contexts exist before any clock starts
    rtm.set_device(0)
    peer_possible = not smoke and aml_cuda.can_access_peer(d0, d1) and aml_cuda.can_access_peer(d1, d0)
    meta["peer_access_possible"] = peer_possible

    # -- 1. peer copy bandwidth -------------------------------------------------------------------------
    first, second = aml_cuda.create(d0), aml_cuda.create(d1)
    a, b = first.mmap(max(COPY_SIZES)), second.mmap(max(COPY_SIZES))
    ck(rt.cudaMemset(a.ptr, 1, max(COPY_SIZES)))
    rtm.set_device(d1)
    ck(rt.cudaMemset(b.ptr, 2, max(COPY_SIZES)))
    ck(rt.cudaDeviceSynchronize())
    rtm.set_device(0)
    ck(rt.cudaDeviceSynchronize())

    def raw_copy(dst: Any, dd: int, src: Any, sd: int, n: int) -> Callable[[], None]:
        def f() -> None:
            (err,) = rt.cudaMemcpyPeer(dst.ptr, dd, src.ptr, sd, n)
            if err:
                raise RuntimeError(err)
            (err,) = rt.cudaStreamSynchronize(0)
            if err:
                raise RuntimeError(err)

        return f

    def aml_copy(dst: Any, src: Any, n: int) -> Callable[[], None]:
        return lambda: aml_cuda.copy_peer(dst, src, n)

    def reps_for(n: int) -> int:
        if quick:
            return 5
        return {MiB: 400, 64 * MiB: 60, GiB: 15}[n]

    copy_rows: list[dict[str, Any]] = []
    states = ("peer access disabled", "peer access enabled") if peer_possible else ("no peer access",)
    enabled: list[tuple[int, int]] = []
    for state in states:
        if state == "peer access enabled":
            for device, peer in ((d0, d1), (d1, d0)):
                if aml_cuda.enable_peer_access(peer, device):
                    enabled.append((device, peer))
        elif peer_possible:
            for device, peer in ((d0, d1), (d1, d0)):
                aml_cuda.disable_peer_access(peer, device)
        for label, (dst, dd, src, sd) in {
            f"GPU {d0} -> GPU {d1}": (b, d1, a, d0),
            f"GPU {d1} -> GPU {d0}": (a, d0, b, d1),
        }.items():
            for n in COPY_SIZES:
                reps = reps_for(n)
                pairs: dict[str, Any] = {}
                raw_us, aml_us = paired(
                    raw_copy(dst, dd, src, sd, n), aml_copy(dst, src, n), reps, warm=3, stats=pairs
                )
                row = {
                    "state": state,
                    "direction": label,
                    "size": n,
                    "reps": reps,
                    "raw_us": raw_us,
                    "aml_us": aml_us,
                    "raw_GBps": gbps(n, raw_us),
                    "aml_GBps": gbps(n, aml_us),
                    "aml_over_raw_time": aml_us / raw_us,
                    "paired": pairs["paired"],
                }
                copy_rows.append(row)
                print(json.dumps(row), flush=True)
    results["peer_copy"] = copy_rows
    results["peer_copy_layers"] = {
        f"GPU {d0} -> GPU {d1}": copy_layers(aml_cuda, rt, b, d1, a, d0, 100 if quick else 2000),
        f"GPU {d1} -> GPU {d0}": copy_layers(aml_cuda, rt, a, d0, b, d1, 100 if quick else 2000),
    }
    first.munmap(a)
    second.munmap(b)

    # -- 2. IPC open across devices ------------------------------------------------------------------------
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    # The exported buffers and their exports stay referenced until every child has run: a buffer
    # nothing references is freed by the garbage collector (docs/user-guide.md#lifetime-munmap-
    # close-or-the-garbage-collector), and a handle of freed memory is what made every child's
    # cudaIpcOpenMemHandle fail with cudaErrorInvalidValue (issue 21).
    exported = [first.mmap(64 * MiB) for _ in range(2)]
    exports = [first.ipc_export(buf) for buf in exported]
    hexes = [pickle.dumps(export.handle).hex() for export in exports]
    ipc: dict[str, Any] = {}
    for importer in dict.fromkeys((d1, d0)):
        got: dict[str, list[dict[str, float]]] = {"aml": [], "raw": []}
        for _ in range(2 if quick else 8):
            for mode in ("aml", "raw"):
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, *hexes, str(importer), mode],
                    check=False,
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=120,
                )
                if out.returncode:
                    raise RuntimeError(out.stderr[-3000:])
                got[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))

        def med(rows: list[dict[str, float]], key: str) -> float:
            return statistics.median(row[key] for row in rows)

        row = {
            "exporter": d0,
            "importer": importer,
            "children": len(got["aml"]),
            "aml_first_open_us": med(got["aml"], "a"),
            "raw_first_open_us": med(got["raw"], "a"),
            "aml_cold_open_us": med(got["aml"], "b"),
            "raw_cold_open_us": med(got["raw"], "b"),
            "aml_cached_open_us": med(got["aml"], "cached"),
            "aml_cold_over_raw_cold": med(got["aml"], "b") / med(got["raw"], "b"),
            "cold_over_cached": med(got["aml"], "b") / med(got["aml"], "cached"),
        }
        ipc[f"importer on GPU {importer}"] = row
        print("ipc", json.dumps(row), flush=True)
    results["ipc_open"] = ipc
    for export, buf in zip(exports, exported, strict=True):
        export.close()
        first.munmap(buf)
    first.close()
    second.close()

    # -- 3. managed prefetch between the GPUs ---------------------------------------------------------------
    N = 256 * MiB if quick else GiB
    for d in {d0, d1}:
        rtm.set_device(d)
        free, _total = rtm.memory_info()
        if free < 4 * N:
            raise SystemExit(f"GPU {d} has {free} bytes free: not enough for the {human(N)} prefetch")
    rtm.set_device(0)
    managed = aml_cuda.create(d0, CudaFlags.ALLOC_UNIFIED | CudaFlags.ALLOC_GLOBAL)
    mbuf = managed.mmap(N)
    raw_m = ck(rt.cudaMallocManaged(N, rt.cudaMemAttachGlobal))
    ck(rt.cudaMemset(mbuf.ptr, 5, N))
    ck(rt.cudaMemset(raw_m, 5, N))
    ck(rt.cudaDeviceSynchronize())
    stream = aml_cuda.stream(non_blocking=True)
    s = stream.handle

    def location(where: int | str) -> Any:
        loc = rt.cudaMemLocation()
        if where == "host":
            loc.type = rt.cudaMemLocationType.cudaMemLocationTypeHost
            loc.id = 0
        else:
            loc.type = rt.cudaMemLocationType.cudaMemLocationTypeDevice
            loc.id = int(where)
        return loc

    def raw_pf(where: int | str) -> None:
        ck(rt.cudaMemPrefetchAsync(raw_m, N, location(where), 0, s))
        ck(rt.cudaStreamSynchronize(s))

    def aml_pf(where: int | str) -> None:
        managed.prefetch(mbuf, where, stream=stream)
        stream.synchronize()

    pf_reps = 3 if quick else 9
    prefetch: dict[str, Any] = {}
    for frm, to in ((d0, d1), (d1, d0), ("host", d1)):
        tr: list[float] = []
        ta: list[float] = []
        for i in range(pf_reps + 1):
            raw_pf(frm)
            aml_pf(frm)
            pair = [("raw", lambda to=to: raw_pf(to)), ("aml", lambda to=to: aml_pf(to))]
            if i % 2:
                pair.reverse()
            for who, fn in pair:
                t0 = time.perf_counter_ns()
                fn()
                dt = (time.perf_counter_ns() - t0) / 1e3
                if i:  # the first round is warm-up
                    (tr if who == "raw" else ta).append(dt)
        raw_us, aml_us = statistics.median(tr), statistics.median(ta)
        name = f"{'host' if frm == 'host' else f'GPU {frm}'} -> GPU {to}"
        prefetch[name] = {
            "size": N,
            "raw_GBps": gbps(N, raw_us),
            "aml_GBps": gbps(N, aml_us),
            "aml_over_raw_time": aml_us / raw_us,
        }
        print("prefetch", name, json.dumps(prefetch[name]), flush=True)
    results["managed_prefetch"] = prefetch
    ck(rt.cudaFree(raw_m))
    managed.close()
    stream.close()
    for device, peer in enabled:  # leave the process as it was
        aml_cuda.disable_peer_access(peer, device)
    results["seconds"] = time.monotonic() - started

    out = out_dir(args.out, "gpu2-bench")
    out.mkdir(parents=True, exist_ok=True)
    name = "gpu2_bench_SMOKE_one_gpu" if smoke else "gpu2_bench"
    results["plots"] = plots(results, out, name)
    md = render(results)
    (out / f"{name}.json").write_text(json.dumps(results, indent=1))
    (out / f"{name}.md").write_text(md)
    print()
    print(md, flush=True)


def plots(r: dict[str, Any], out: Path, name: str) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        print(f"no plots: matplotlib is not usable ({exc})", flush=True)
        return []
    smoke = " (SMOKE TEST ON ONE GPU)" if r["meta"]["smoke_one_gpu"] else ""
    files = []
    fig, ax = plt.subplots(figsize=(8, 5))
    series = dict.fromkeys((row["state"], row["direction"]) for row in r["peer_copy"])
    for state, direction in series:
        rows = [x for x in r["peer_copy"] if (x["state"], x["direction"]) == (state, direction)]
        xs = [x["size"] for x in rows]
        ax.plot(
            xs, [x["raw_GBps"] for x in rows], marker="o", linestyle="--", label=f"raw, {direction}, {state}"
        )
        ax.plot(xs, [x["aml_GBps"] for x in rows], marker="s", label=f"aml, {direction}, {state}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(COPY_SIZES), [human(n) for n in COPY_SIZES])
    ax.set_xlabel("bytes per copy")
    ax.set_ylabel("GB/s (median)")
    ax.set_title(f"copy_peer vs cudaMemcpyPeer{smoke}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / f"{name}_peer_copy.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    files.append(path.name)

    fig, ax = plt.subplots(figsize=(8, 4))
    names = list(r["managed_prefetch"])
    ys = range(len(names))
    ax.barh([y - 0.2 for y in ys], [r["managed_prefetch"][n]["raw_GBps"] for n in names], 0.4, label="raw")
    ax.barh([y + 0.2 for y in ys], [r["managed_prefetch"][n]["aml_GBps"] for n in names], 0.4, label="aml")
    ax.set_yticks(list(ys), names)
    ax.set_xlabel("GB/s (median)")
    ax.set_title(f"managed prefetch, {human(next(iter(r['managed_prefetch'].values()))['size'])}{smoke}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / f"{name}_prefetch.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    files.append(path.name)
    return files


def render(r: dict[str, Any]) -> str:
    m = r["meta"]
    gpus = "; ".join(
        f"GPU {g['index']}: {g['name']} ({human(g['memory_bytes'])}, sm {g['compute_capability']}, "
        f"{g['pci_bus_id']})"
        for g in m["gpus"]
    )
    lines = []
    if m["smoke_one_gpu"]:
        lines += [
            "**SMOKE TEST ON ONE GPU: device 0 stands in for device 1. These are no two-GPU "
            "figures; they only show that the script runs.**",
            "",
        ]
    lines += [
        f"# aml-cuda on two GPUs, {m['date']}",
        "",
        f"{gpus}. Driver {m['driver']} (CUDA driver API {m['cuda_driver_api']}), cuda-bindings "
        f"{m['cuda_bindings']}, aml-cuda {m['aml_cuda']}, Python {m['python']}; host {m['hostname']} "
        f"({m['cpu']}, {m['cores']} cores, Linux {m['kernel']}). Peer access possible between the "
        f"measured devices: {m['peer_access_possible']}. Run time {r['seconds']:.0f} s.",
        "",
        "Medians after warm-up; aml and raw interleaved repetition by repetition in the same run.",
        "",
        "GPU topology (`nvidia-smi topo -m`):",
        "",
        "```",
        m["topology"],
        "```",
        "",
        "## peer copy: `aml_cuda.copy_peer` vs `cudaMemcpyPeer` + `cudaStreamSynchronize(0)`",
        "",
        "| state | direction | size | raw GB/s | aml GB/s | aml / raw time | reps |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in r["peer_copy"]:
        lines.append(
            f"| {row['state']} | {row['direction']} | {human(row['size'])} | {row['raw_GBps']:.1f} | "
            f"{row['aml_GBps']:.1f} | {row['aml_over_raw_time']:.3f} | {row['reps']} |"
        )
    layers = r.get("peer_copy_layers")
    if layers:
        directions = list(layers)
        lines += [
            "",
            "Where `copy_peer`'s time goes at 1 MiB, the last state above (median µs, and over "
            "raw; the kinds take turns; `raw again` is the raw calls again, the method's noise):",
            "",
            "| layer | " + " | ".join(directions) + " |",
            "| --- |" + " ---: |" * len(directions),
        ]
        for k in layers[directions[0]]:
            cells = [f"{layers[d][k]:.2f} ({layers[d][k] / layers[d]['raw']:.3f})" for d in directions]
            lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## IPC open across devices (µs; a handle exported on GPU 0, opened in a child process)",
        "",
        "| importer | first open aml / raw | cold open aml / raw | aml / raw (cold) | cached aml "
        "| cold / cached |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, row in r["ipc_open"].items():
        lines.append(
            f"| {label} | {row['aml_first_open_us']:.1f} / {row['raw_first_open_us']:.1f} | "
            f"{row['aml_cold_open_us']:.1f} / {row['raw_cold_open_us']:.1f} | "
            f"{row['aml_cold_over_raw_cold']:.2f} | {row['aml_cached_open_us']:.2f} | "
            f"{row['cold_over_cached']:.0f}x |"
        )
    lines += [
        "",
        "## managed prefetch (GB/s): `area.prefetch` vs `cudaMemPrefetchAsync`",
        "",
        "| move | size | raw GB/s | aml GB/s | aml / raw time |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, row in r["managed_prefetch"].items():
        lines.append(
            f"| {name} | {human(row['size'])} | {row['raw_GBps']:.1f} | {row['aml_GBps']:.1f} | "
            f"{row['aml_over_raw_time']:.3f} |"
        )
    if r.get("plots"):
        lines += ["", "Plots: " + ", ".join(r["plots"]) + "."]
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
