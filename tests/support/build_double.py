"""Build a backend's driver double from the command line, as the tests build it:
``python -m tests.support.build_double hip OUTPUT`` compiles
``backends/hip/tests/native/hip_double.py``'s double (host mode) into OUTPUT's folder and
checks that OUTPUT is the file it made (the name the library's major gives:
``libamdhip64.so.6``), so that an environment can name it in advance (tox.ini's numa env:
``AML_HIP_LIBRARY={envtmpdir}/hipdouble/libamdhip64.so.6``). ``ze`` and ``hsa`` name the
other doubles. :func:`double_module` is the build helper itself, for code that also drives
the double's control API (tests/numa).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType

from .double_fixtures import load_module

ROOT = Path(__file__).resolve().parents[2]
#: The backends whose tests have a driver double: ``backends/<name>/tests/native/<name>_double.py``.
DOUBLES = ("hip", "ze", "hsa")


def double_module(backend: str) -> ModuleType:
    """The build helper of ``backend``'s double (build_double, DoubleControl), loaded from its file."""
    if backend not in DOUBLES:
        raise ValueError(f"no driver double for {backend!r}; the doubles are {', '.join(DOUBLES)}")
    path = ROOT / "backends" / backend / "tests" / "native" / f"{backend}_double.py"
    return load_module(path, f"aml_{backend}_double_build")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.build_double", description=__doc__)
    parser.add_argument("backend", choices=DOUBLES)
    parser.add_argument("output", type=Path, help="the library file to make (its folder is made)")
    parser.add_argument("--mode", choices=("host", "forward"), default="host")
    args = parser.parse_args(argv)
    output = args.output.absolute()
    built = double_module(args.backend).build_double(args.mode, outdir=output.parent)
    if Path(built) != output:
        print(f"built {built}, not {output}: name the file the double's build makes", file=sys.stderr)
        return 1
    print(built)
    return 0


if __name__ == "__main__":
    sys.exit(main())
