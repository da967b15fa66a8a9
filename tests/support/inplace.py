"""Build aml_core's compiled modules in the source tree, unless they are already built from it.

Every tox environment runs its tests from the repository root, where the source tree shadows
the installed aml-core, so the tree needs its extensions built in place (tox.ini says why).
``python setup.py build_ext --inplace`` alone rebuilt all of them in every environment:
cythonize counts Cython's own ``.pxd`` files (``libc/string.pxd``...) among a module's
dependencies, and each environment's freshly installed Cython is newer than the C files the
environment before generated, so each one cythonized and compiled the six modules again
(about 40 s on CI's two cores) into the same files.

``python -m tests.support.inplace`` runs that build only when it can change something:
a module of setup.py's ``COMPILED`` has no extension for this interpreter in ``aml_core/``,
or one older than setup.py or any ``aml_core/*.pyx``, ``*.pxd`` (a module cimports the
others' declarations), ``*.pxi`` (the parts that ``_kernel.pyx`` and ``_buffer.pyx`` include), or
one built with AddressSanitizer (the asan environment builds its own sanitized copy
elsewhere; an older tox.ini built it in place). Otherwise it says so and
exits. Changing only the Cython version does not trigger a rebuild; ``python setup.py
build_ext --inplace --force`` does. The check and the build hold an flock on ``aml_core/``,
so that environments started together (``tox run-parallel``) build once, and none loads an
extension while another is writing it.

``python tests/support/inplace.py --copy-to DIR`` copies the source tree into DIR without
what builds and test runs leave in it (the extensions and the C files cythonize generates,
``build/``, ``.tox/``, caches), for a build of its own there (the asan environment's).
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What a copy of the tree leaves out, anywhere in it (build products, environments, caches).
NOT_COPIED = (
    ".git",
    ".tox",
    ".venv*",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
)
#: And in aml_core/: the extensions and cythonize's output.
NOT_COPIED_IN_PACKAGE = ("*.so", "*.c", "*.cpp", "*.html")


def compiled_modules(setup_py: Path = ROOT / "setup.py") -> tuple[str, ...]:
    """setup.py's ``COMPILED`` (the module names under ``aml_core``), read from its text, so
    that the list stays written once (importing setup.py would run ``setup()``)."""
    for node in ast.parse(setup_py.read_text()).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "COMPILED" for t in targets):
                assert node.value is not None
                names = ast.literal_eval(node.value)
                assert isinstance(names, tuple), names
                return tuple(str(n) for n in names)
    raise LookupError(f"{setup_py} has no COMPILED")


def stale(root: Path = ROOT) -> list[str]:
    """Why the in-place extensions must be built (empty: they are up to date)."""
    package = root / "aml_core"
    inputs = [root / "setup.py", *(p for ext in ("pyx", "pxd", "pxi") for p in package.glob(f"*.{ext}"))]
    newest = max(p.stat().st_mtime for p in inputs)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    reasons = []
    for name in compiled_modules(root / "setup.py"):
        built = package / f"{name}{suffix}"
        if not built.exists():
            reasons.append(f"{built.name} is not built")
        elif built.stat().st_mtime < newest:
            reasons.append(f"{built.name} is older than its sources")
        elif b"libasan.so" in built.read_bytes():
            reasons.append(f"{built.name} is built with AddressSanitizer")
    return reasons


def build(root: Path = ROOT) -> int:
    """Build the extensions in place if :func:`stale` gives a reason; the exit status."""
    lock = os.open(root / "aml_core", os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the descriptor closes
        reasons = stale(root)
        if not reasons:
            print("aml_core's extensions in the source tree are up to date (tests/support/inplace.py)")
            return 0
        print("building aml_core's extensions in place: " + "; ".join(reasons), flush=True)
        force = ["--force"] if any("AddressSanitizer" in r for r in reasons) else []
        command = [sys.executable, "setup.py", "-q", "build_ext", "--inplace", *force]
        return subprocess.run(command, cwd=root, check=False).returncode
    finally:
        os.close(lock)


def copy_tree(dest: Path, root: Path = ROOT) -> None:
    """Copy the source tree into ``dest`` (made if missing) without :data:`NOT_COPIED`."""
    anywhere = shutil.ignore_patterns(*NOT_COPIED)
    in_package = shutil.ignore_patterns(*NOT_COPIED, *NOT_COPIED_IN_PACKAGE)
    package = root / "aml_core"

    def ignore(folder: str, names: list[str]) -> set[str]:
        return (in_package if Path(folder) == package else anywhere)(folder, names)

    shutil.copytree(root, dest, symlinks=True, ignore=ignore, dirs_exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="build aml_core's extensions in place, when they are stale")
    parser.add_argument("--copy-to", type=Path, help="copy the source tree there instead of building")
    args = parser.parse_args(argv)
    if args.copy_to is not None:
        copy_tree(args.copy_to.resolve())
        return 0
    return build()


if __name__ == "__main__":
    sys.exit(main())
