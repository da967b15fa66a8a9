"""What machine a benchmark ran on (CPU model, cores, kernel, Python, host name): the
fields every result file names, read once here for all the benchmark scripts."""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["machine"]


def machine() -> dict[str, str]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "hostname": platform.node(),
    }
