"""What to do when aml_core's compiled modules (:data:`COMPILED`) cannot be imported.

They are built from Cython sources (``aml_core/*.pyx``) by ``pip install .`` or, for a
source tree, ``python setup.py build_ext --inplace``. ``aml_core/__init__.py`` imports
this module first, and it imports the compiled ones. When they are missing:

- In an unbuilt source tree (the clone's root is the current directory, so
  ``python -c "import aml_core"`` finds the clone's ``aml_core/`` first) with an installed
  aml-core of the same version elsewhere on ``sys.path`` (the README's ``pip install .``):
  the source tree hands over to the installed package, silently. :func:`hand_over` runs
  the installed package and puts it in ``sys.modules["aml_core"]``; the import system
  returns what is there when the source tree's ``__init__`` ends, and that ``__init__``'s
  relative imports, after this module, find the installed submodules already imported.
- Otherwise the newcomer gets an explanation (:func:`not_built`) instead of a bare
  ModuleNotFoundError: how to build in place, or how to install.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from importlib import metadata
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path

# setup.py builds the same (its COMPILED); _buffer first: it imports the fast paths.
COMPILED = (
    "aml_core._buffer",
    "aml_core._fastpath",
    "aml_core._allocator",
    "aml_core._kernel",
    "aml_core._hooks",
    "aml_core._os",
)
PACKAGE = Path(__file__).resolve().parent


def source_root(package: Path = PACKAGE) -> Path | None:
    """The repository's root if ``package`` is aml_core's source tree (its Cython sources
    and the root's ``setup.py``), else None (an installed package)."""
    if (package / "_buffer.pyx").exists() and (package.parent / "setup.py").exists():
        return package.parent
    return None


def source_version(root: Path) -> str | None:
    """The version written in the source tree's ``VERSION`` (one source for every distribution)."""
    try:
        return (root / "VERSION").read_text(encoding="ascii").strip() or None
    except (OSError, ValueError):
        return None


def _resolved(entry: str) -> Path | None:
    try:
        return Path(entry or os.getcwd()).resolve()
    except (OSError, RuntimeError):
        return None


def installed_elsewhere(root: Path) -> ModuleSpec | None:
    """The spec of an installed aml_core found on ``sys.path`` without the source tree's
    folder: built (its compiled modules are there) and of the source tree's version
    (its distribution's metadata says so). None when there is no such package."""
    version = source_version(root)
    others = [entry for entry in sys.path if _resolved(entry) != root]
    spec = PathFinder.find_spec("aml_core", others)
    if version is None or spec is None or spec.origin is None or not spec.submodule_search_locations:
        return None
    locations = list(spec.submodule_search_locations)
    if any(_resolved(location) == root / "aml_core" for location in locations):
        return None
    if any(PathFinder.find_spec(name, locations) is None for name in COMPILED):
        return None
    site = str(Path(spec.origin).parent.parent)
    if version not in {dist.version for dist in metadata.distributions(name="aml-core", path=[site])}:
        return None
    return spec


def hand_over(spec: ModuleSpec) -> None:
    """Run the installed aml_core of ``spec`` in place of this source tree's: it becomes
    ``sys.modules["aml_core"]``, with its own ``_compiled`` and every submodule."""
    assert spec.loader is not None  # a package found by PathFinder has one
    module = importlib.util.module_from_spec(spec)
    sys.modules.pop(__name__, None)  # the installed package imports its own _compiled
    sys.modules["aml_core"] = module
    spec.loader.exec_module(module)


def is_missing_build(exc: ImportError) -> bool:
    """True if ``exc`` says a compiled module is absent or cannot be loaded (not some other
    import failure inside it)."""
    if exc.name in COMPILED:
        return True
    path = getattr(exc, "path", None) or ""
    return Path(path).name.startswith(tuple(name.split(".")[1] + "." for name in COMPILED))


def not_built(exc: ImportError) -> ImportError:
    """The ImportError to raise instead of ``exc``: what happened and the two fixes."""
    module = exc.name if exc.name in COMPILED else "aml_core's compiled modules"
    root = source_root()
    if root is not None:
        version = source_version(root)
        which = f"aml-core {version}" if version else "aml-core"
        return ImportError(
            f"{module} is not built: you are importing aml_core from its source tree at {PACKAGE}, "
            f"whose Cython modules have not been compiled for this Python. Either install {which} "
            "(`pip install .` in the repository; this source tree then hands over to it), or build "
            "the modules in place: `python setup.py build_ext --inplace` in the repository (this "
            "needs Cython, a C compiler such as gcc and the Python headers, e.g. Debian's python3-dev)."
        )
    why = "" if isinstance(exc, ModuleNotFoundError) else f" ({exc})"
    return ImportError(
        f"{module} cannot be loaded from {PACKAGE}{why}: this installation of aml-core is "
        "incomplete or was built for another Python; reinstall it (`pip install --force-reinstall "
        "aml-core`, or `pip install .` from a source tree)."
    )


def import_compiled() -> None:
    """Import the compiled modules; in an unbuilt source tree, hand over to the installed
    aml-core of the same version if there is one; else raise the ImportError of :func:`not_built`."""
    for name in COMPILED:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            if not is_missing_build(exc):
                raise
            root = source_root()
            spec = installed_elsewhere(root) if root is not None else None
            if spec is None:
                raise not_built(exc) from None
            hand_over(spec)
            return


import_compiled()
