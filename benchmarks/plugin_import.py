"""The cost of importing each backend's plugin module on top of ``import aml_core``, and
proof that it loads no native library.

Each measurement is a fresh interpreter (``python -c``), timed from inside: the clock
starts after ``import aml_core`` and stops after ``import aml_<name>.plugin`` (and its
hook call), so interpreter start-up is not counted. The child also lists the shared
libraries mapped into it (``/proc/self/maps``) before and after, to show that no vendor
library was loaded. Medians over ``--repeat`` runs; results as JSON (and a short
markdown table) under ``--out``.

    python benchmarks/plugin_import.py --out evidence/<date>-<machine>-plugin-import --name <machine>

(without ``--out`` it only prints; evidence/README.md says how runs are named and indexed).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from aml_core.backend_list import BACKENDS

CHILD = r"""
import json, sys, time

def libs():
    with open("/proc/self/maps") as f:
        return {line.split()[-1] for line in f if ".so" in line}

import aml_core
before = libs()
t0 = time.perf_counter()
module = __import__(sys.argv[1], fromlist=["aml_backends"])
t1 = time.perf_counter()
descriptors = module.aml_backends()
t2 = time.perf_counter()
new = sorted(p for p in libs() - before)
print(json.dumps({"seconds": t1 - t0, "hook_seconds": t2 - t1, "new_libraries": new,
                  "descriptors": [d.name for d in descriptors]}))
"""

PLUGINS = {"host": "aml_core.host.plugin", **{b.name: f"{b.package}.plugin" for b in BACKENDS}}


def _vendor(paths: list[str]) -> list[str]:
    """The loaded libraries that are not Python's own extension modules (a vendor driver
    or runtime would show here: libcuda, libamdhip64, libze_loader, libhsa-runtime64)."""
    return [p for p in paths if "lib-dynload" not in p and "cpython-" not in p and "libffi" not in p]


def measure(module: str, repeat: int) -> dict[str, object]:
    times: list[float] = []
    hooks: list[float] = []
    libraries: set[str] = set()
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, module], capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            return {"module": module, "error": out.stderr.strip().splitlines()[-1:]}
        data = json.loads(out.stdout)
        times.append(float(data["seconds"]))
        hooks.append(float(data["hook_seconds"]))
        libraries.update(data["new_libraries"])
    return {
        "module": module,
        "median_ms": statistics.median(times) * 1e3,
        "min_ms": min(times) * 1e3,
        "max_ms": max(times) * 1e3,
        "hook_median_ms": statistics.median(hooks) * 1e3,
        "repeat": repeat,
        "new_libraries": sorted(libraries),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None, help="directory for the JSON and markdown results")
    parser.add_argument("--name", default=platform.node(), help="machine name used in the result file names")
    args = parser.parse_args()
    results = {name: measure(module, args.repeat) for name, module in PLUGINS.items()}
    report = {
        "machine": args.name,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "target_ms": 5.0,
        "plugins": results,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = args.out / f"plugin_import_{args.name}"
        stem.with_suffix(".json").write_text(text + "\n")
        rows = []
        for name, r in results.items():
            if "median_ms" not in r:
                rows.append(f"| {name} | `{r['module']}` | not installed | | | |")
                continue
            vendor = ", ".join(_vendor(list(r["new_libraries"]))) or "none"  # type: ignore[call-overload]
            rows.append(
                f"| {name} | `{r['module']}` | {r['median_ms']:.2f} | {r['min_ms']:.2f} | "
                f"{r['hook_median_ms']:.2f} | {vendor} |"
            )
        stem.with_suffix(".md").write_text(
            f"# Plugin import cost on {args.name}\n\n"
            f"Python {report['python']}, {report['platform']}; median of {args.repeat} fresh "
            "interpreters, measured after `import aml_core` (target: under 5 ms).\n\n"
            "| backend | module | import median ms | import min ms | hook ms | vendor libraries loaded |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
