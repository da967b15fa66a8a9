"""What machine a benchmark ran on (CPU model, cores, kernel, Python, host name): the
fields every result file names, read once here for all the benchmark scripts; and where
a run's results go by default: ``evidence/<date>-<machine>-<what>/`` at the repository's
root (see evidence/README.md).

``python benchmarks/machine_info.py --evidence-dir WHAT`` prints that folder, so that the
GPU run scripts (``backends/cuda/tests/run_on_gpu.sh``, ``backends/forward-prelude.sh``)
name their runs the same way.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["evidence_dir", "gpu", "machine", "machine_slug", "out_dir"]

#: the repository's folder of run results and logs, one subfolder per run
EVIDENCE = Path(__file__).resolve().parent.parent / "evidence"
#: CPU families named in a machine's slug (the first one found in the model name)
CPU_FAMILIES = ("xeon", "epyc", "ryzen", "threadripper", "core", "neoverse")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def machine() -> dict[str, str]:
    return {
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count()),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "hostname": platform.node(),
    }


def gpu() -> dict[str, str]:
    """The first NVIDIA GPU as nvidia-smi names it: ``gpu`` (its name), ``driver`` and
    ``gpu_memory``; empty without nvidia-smi or a GPU."""
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return {}
    return dict(zip(("gpu", "driver", "gpu_memory"), (p.strip() for p in lines[0].split(",")), strict=False))


def _gpu_name() -> str | None:
    """The first NVIDIA GPU's name, or None without nvidia-smi or a GPU."""
    return gpu().get("gpu")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def machine_slug() -> str:
    """The machine as a run folder names it: $AML_MACHINE if set, else the GPU's model
    ("h100" for "NVIDIA H100 80GB HBM3"), else "<os><version>-<cpu family>-<n>core"
    ("debian12-xeon-2core")."""
    given = os.environ.get("AML_MACHINE", "").strip()
    if given:
        return _slug(given)
    gpu = _gpu_name()
    if gpu:
        words = [w for w in _slug(gpu).split("-") if w not in ("nvidia", "amd", "intel", "tesla")]
        if words:
            return words[0]
    try:
        release = platform.freedesktop_os_release()
        system = _slug(release.get("ID", "") + release.get("VERSION_ID", "").split(".")[0])
    except OSError:
        system = _slug(platform.system())
    model = _cpu_model().lower()
    family = next((f for f in CPU_FAMILIES if f in model), "cpu")
    return "-".join(part for part in (system, family, f"{os.cpu_count()}core") if part)


def evidence_dir(what: str) -> Path:
    """``evidence/<UTC date>-<machine>-<what>`` at the repository's root."""
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    return EVIDENCE / f"{date}-{machine_slug()}-{_slug(what)}"


def out_dir(given: str | os.PathLike[str] | None, what: str) -> Path:
    """Where a benchmark writes: --out if given, else $OUT if set, else evidence_dir(what)."""
    if given:
        return Path(given)
    env = os.environ.get("OUT")
    return Path(env) if env else evidence_dir(what)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evidence-dir", metavar="WHAT", required=True, help="print evidence_dir(WHAT)")
    print(evidence_dir(parser.parse_args().evidence_dir))
