"""The benchmark scripts of ``benchmarks/`` as modules, for the tests of their logic."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

#: The folder of the benchmark scripts.
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module, imported as its script imports its neighbours
    (by bare name, with ``benchmarks/`` on the path only for the import)."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))
