"""What ``aml info`` costs against an in-process ``aml_core.backends()`` (issue 29, item 5:
target at most 1.5x).

Each measurement is a fresh interpreter timed from outside (start-up included, as a user
waits for it): ``python -m aml_core info --json`` against
``python -c "import aml_core; aml_core.backends()"``, interleaved (ABAB.., then BABA..)
so that a busy moment of a shared machine falls on both. Medians over ``--repeat``
pairs; the one-minute load average before and after is recorded, since on a loaded
machine both figures grow.

``--baseline DIR`` measures a checkout of older code (built in place) in the same run,
interleaved with this one (its ``aml_core`` first on PYTHONPATH): the before and after
(with ``--plugin``, for both setups).

``--plugin`` adds a third-party backend (a temporary ``.dist-info`` on PYTHONPATH whose
probe returns at once, as an installed plugin's would): ``aml info`` then runs its probe
in its own interpreter (the isolation it keeps), while ``backends()`` runs it in-process
once it was seen to finish (a warm probe cache). That row shows what one isolated
probe costs; the host backend alone never pays it. Whether bytecode caches were used is
recorded: with ``PYTHONDONTWRITEBYTECODE`` set, every interpreter (a fresh probe
interpreter too) compiles aml-core's sources again.

    python benchmarks/info_startup.py --out evidence/<date>-<machine>-info-startup --name <machine>
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BACKENDS = "import aml_core; aml_core.backends()"
INFO = ["-m", "aml_core", "info", "--json"]
TARGET = 1.5

PLUGIN = """
from aml_core import BackendDescriptor, Kind, ProbeResult, hookimpl

def probe():
    return ProbeResult(available=True, detail="bench")

def create(kind, device=None, **options):
    raise NotImplementedError

@hookimpl
def aml_backends():
    return [BackendDescriptor(name="benchplug", priority=1, kinds={Kind.DEVICE}, probe=probe,
                              create_area=create)]
"""


def _site(root: Path) -> None:
    (root / "bench_plugin_mod.py").write_text(PLUGIN)
    info = root / "bench_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bench-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[aml.backends]\nbenchplug = bench_plugin_mod\n")


def _run(args: list[str], env: dict[str, str]) -> float:
    """One fresh interpreter, from a neutral directory (``-m`` and ``-c`` put the current
    directory first on the import path, where a checkout would shadow the aml_core under test)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *args], env=env, cwd=env["XDG_CACHE_HOME"], capture_output=True, check=False
    )
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{args} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
    return took


def measure(repeat: int, envs: dict[str, dict[str, str]]) -> dict[str, dict[str, float | int]]:
    """For each named environment, ``aml info`` and ``backends()``, all interleaved: every
    repetition runs each environment's pair, in an order that alternates."""
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in envs}
    for env in envs.values():
        _run(INFO, env)  # warm the page cache (and the probe cache) once
        _run(["-c", BACKENDS], env)
    for i in range(repeat):
        names = list(envs) if i % 2 == 0 else list(envs)[::-1]
        for name in names:
            info, backends = times[name]
            pair = ((INFO, info), (["-c", BACKENDS], backends))
            for args, sink in pair if i % 2 == 0 else pair[::-1]:
                sink.append(_run(args, envs[name]))
    return {name: _figures(repeat, *times[name]) for name in envs}


def _figures(repeat: int, info: list[float], backends: list[float]) -> dict[str, float | int]:
    mi, mb = statistics.median(info), statistics.median(backends)
    return {
        "repeat": repeat,
        "info_median_s": mi,
        "backends_median_s": mb,
        "ratio": mi / mb,
        "info_min_s": min(info),
        "backends_min_s": min(backends),
        "info_p90_s": statistics.quantiles(info, n=10)[-1] if len(info) >= 2 else mi,
        "backends_p90_s": statistics.quantiles(backends, n=10)[-1] if len(backends) >= 2 else mb,
    }


def _commit(tree: Path) -> str:
    proc = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return proc.stdout.strip() or str(tree)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=41)
    parser.add_argument("--plugin", action="store_true", help="also measure with one third-party plugin")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a checkout of older code, built in place, measured in the same run (PYTHONPATH)",
    )
    parser.add_argument("--out", type=Path, default=None, help="directory for the JSON and markdown results")
    parser.add_argument("--name", default=platform.node(), help="machine name used in the result file names")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        base = {k: v for k, v in os.environ.items() if not k.startswith("AML_")}
        base["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        Path(base["XDG_CACHE_HOME"]).mkdir()
        envs = {"host only": base}
        old_path = [] if args.baseline is None else [str(args.baseline.resolve())]
        if old_path:
            envs[f"host only, baseline {_commit(args.baseline)}"] = dict(base, PYTHONPATH=old_path[0])
        if args.plugin:
            site = Path(tmp) / "site"
            site.mkdir()
            _site(site)
            plugin_path = [str(site), *sys.path[1:]]
            envs["host + one third-party plugin"] = dict(base, PYTHONPATH=os.pathsep.join(plugin_path))
            if old_path:
                envs[f"host + one third-party plugin, baseline {_commit(args.baseline)}"] = dict(
                    base, PYTHONPATH=os.pathsep.join([str(site), *old_path, *sys.path[1:]])
                )
        rows = measure(args.repeat, envs)
    load_after = os.getloadavg()
    report = {
        "machine": args.name,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        # Without bytecode caches every interpreter compiles aml-core's sources again (tox
        # and this machine's shell set PYTHONDONTWRITEBYTECODE; an installed wheel has them).
        "bytecode_caches": not os.environ.get("PYTHONDONTWRITEBYTECODE"),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "target_ratio": TARGET,
        "rows": rows,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = args.out / f"info_startup_{args.name}"
        stem.with_suffix(".json").write_text(text + "\n")
        lines = [
            f"| {name} | {r['info_median_s'] * 1e3:.0f} | {r['backends_median_s'] * 1e3:.0f} | "
            f"{r['ratio']:.2f} | {r['info_min_s'] * 1e3:.0f} / {r['backends_min_s'] * 1e3:.0f} |"
            for name, r in rows.items()
        ]
        stem.with_suffix(".md").write_text(
            f"# aml info against backends() on {args.name}\n\n"
            f"Python {report['python']}, {report['platform']}, {report['cpus']} CPUs; medians of "
            f"{args.repeat} interleaved pairs of fresh interpreters, bytecode caches "
            f"{'used' if report['bytecode_caches'] else 'off (PYTHONDONTWRITEBYTECODE)'}; "
            "one-minute load average "
            f"{load_before[0]:.1f} before, {load_after[0]:.1f} after (target: at most {TARGET}x).\n\n"
            "| installed | aml info ms | backends() ms | ratio | min ms (info / backends) |\n"
            "|---|---|---|---|---|\n" + "\n".join(lines) + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
