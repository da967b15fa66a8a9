"""Why did a touched DEFAULT 4 MiB buffer show NOT_TOUCHED pages (CI, tiered, Linux 6.1)?
Loops the body of test_a_thread_runs_on_each_node_and_its_local_memory_is_there under
NUMA balancing on/off, khugepaged fast/slow, compaction running, and reads the raw
move_pages statuses and /proc/vmstat deltas around the query."""
import collections, json, os, sys, threading, time
sys.path.insert(0, os.getcwd())
from pathlib import Path
from aml_core import _os
from aml_core.host import HostArea, run_on_node
from tests.numa.support import anon_huge_kib

PAGE = _os.PAGE_SIZE
MiB = 1 << 20
KEYS = ["numa_pte_updates", "numa_huge_pte_updates", "numa_hint_faults", "numa_pages_migrated",
        "pgmigrate_success", "compact_isolated", "thp_collapse_alloc", "thp_fault_alloc", "thp_fault_fallback"]
NB = Path("/proc/sys/kernel/numa_balancing")
KH = Path("/sys/kernel/mm/transparent_hugepage/khugepaged/scan_sleep_millisecs")
DBG = Path("/sys/kernel/debug/sched/numa_balancing")

def vmstat():
    out = {}
    for line in open("/proc/vmstat"):
        k, v = line.split()
        if k in KEYS:
            out[k] = int(v)
    return out

def once(node, spin):
    with run_on_node(node), HostArea() as area:
        buf = area.mmap(4 * MiB)
        _os.touch(buf.ptr, buf.size, PAGE, 1)
        huge = anon_huge_kib(buf.ptr)
        v0 = vmstat()
        t = time.monotonic()
        while time.monotonic() - t < spin:
            pass
        raw = _os.page_nodes(buf.ptr, buf.size)
        v1 = vmstat()
        counts = dict(sorted(collections.Counter(raw).items()))
        bad = [i for i, s in enumerate(raw) if s < 0]
        buf.free()
    return {"counts": counts, "huge_kib": huge, "bad_first": bad[:3], "bad_last": bad[-1:],
            "delta": {k: v1[k] - v0[k] for k in KEYS if v1.get(k, 0) - v0.get(k, 0)},
            "ptr_mod_2m": buf.ptr % (2 * MiB) if False else None}

def run(label, n, spin, compact=False):
    stop = threading.Event()
    def compactor():
        while not stop.is_set():
            Path("/proc/sys/vm/compact_memory").write_text("1")
    th = threading.Thread(target=compactor, daemon=True) if compact else None
    if th: th.start()
    fails, results = 0, []
    t0 = time.monotonic()
    for i in range(n):
        r = once(i % 2, spin)
        if any(k < 0 for k in r["counts"]):
            fails += 1
            print(json.dumps({"label": label, "iter": i, **r}), flush=True)
        results.append(r)
    stop.set()
    if th: th.join()
    upd = sum(r["delta"].get("numa_pte_updates", 0) + r["delta"].get("numa_huge_pte_updates", 0) for r in results)
    print(json.dumps({"summary": label, "iterations": n, "spin_s": spin, "failed": fails,
                      "numa_balancing": NB.read_text().strip(), "khugepaged_sleep_ms": KH.read_text().strip(),
                      "compacting": compact, "pte_updates_during_queries": upd,
                      "huge_kib_seen": sorted({r["huge_kib"] for r in results}),
                      "seconds": round(time.monotonic() - t0, 1)}), flush=True)

print(os.uname().release, "numa_balancing", NB.read_text().strip(), "khugepaged", KH.read_text().strip(), flush=True)
os.system("mount -t debugfs none /sys/kernel/debug 2>/dev/null")
if DBG.is_dir():
    for name in ("scan_delay_ms", "scan_period_min_ms", "scan_period_max_ms", "scan_size_mb"):
        print(name, (DBG / name).read_text().strip(), flush=True)
khdef = KH.read_text().strip()
N = int(sys.argv[1]) if len(sys.argv) > 1 else 60
if N == 0:  # quick: the eager scanner only, on and off
    if DBG.is_dir():
        (DBG / "scan_delay_ms").write_text("0"); (DBG / "scan_period_min_ms").write_text("100"); (DBG / "scan_period_max_ms").write_text("200")
    NB.write_text("1"); run("nb1-spin", 4, 1.5); NB.write_text("0"); run("nb0-spin", 4, 1.5); NB.write_text("1")
    sys.exit(0)
# 1. as in CI: balancing on, khugepaged default, no wait
NB.write_text("1"); run("nb1-plain", N, 0)
# 2. balancing on, the scanner made eager, the thread spinning past a scan before the query
if DBG.is_dir():
    (DBG / "scan_delay_ms").write_text("0"); (DBG / "scan_period_min_ms").write_text("100"); (DBG / "scan_period_max_ms").write_text("200")
run("nb1-spin", 6, 1.5)
run("nb1-eager-plain", N, 0)
# 3. balancing off, same
NB.write_text("0"); run("nb0-spin", 6, 1.5); run("nb0-plain", N, 0)
# 4. khugepaged eager, balancing off
KH.write_text("10"); run("nb0-khugepaged10ms-spin", 6, 1.5); KH.write_text(khdef)
# 5. compaction in a loop, balancing off
run("nb0-compacting", max(N // 2, 10), 0, compact=True)
NB.write_text("1")
