"""What to say when aml_core's compiled modules (``_buffer``, ``_os``) cannot be imported.

They are built from Cython sources (``aml_core/*.pyx``) by ``pip install .`` or, for a
source tree, ``python setup.py build_ext --inplace``. A newcomer who runs Python in the
repository without building gets this explanation instead of a bare ModuleNotFoundError:
``aml_core/__init__.py`` imports this module first, and it imports the compiled ones.
"""

from __future__ import annotations

import importlib
from pathlib import Path

COMPILED = ("aml_core._buffer", "aml_core._os")


def is_missing_build(exc: ImportError) -> bool:
    """True if ``exc`` says a compiled module is absent or cannot be loaded (not some other
    import failure inside it)."""
    if exc.name in COMPILED:
        return True
    path = getattr(exc, "path", None) or ""
    return Path(path).name.startswith(tuple(name.split(".")[1] + "." for name in COMPILED))


def not_built(exc: ImportError) -> ImportError:
    """The ImportError to raise instead of ``exc``: what happened and the two fixes."""
    package = Path(__file__).resolve().parent
    module = exc.name if exc.name in COMPILED else "aml_core's compiled modules"
    if (package / "_buffer.pyx").exists() and (package.parent / "setup.py").exists():
        return ImportError(
            f"{module} is not built: you are importing aml_core from its source tree at {package}, "
            "whose Cython modules have not been compiled for this Python. Either install aml-core "
            "(`pip install .` in the repository) and run Python from another directory, or build "
            "the modules in place: `python setup.py build_ext --inplace` in the repository (this "
            "needs Cython, a C compiler such as gcc and the Python headers, e.g. Debian's python3-dev)."
        )
    why = "" if isinstance(exc, ModuleNotFoundError) else f" ({exc})"
    return ImportError(
        f"{module} cannot be loaded from {package}{why}: this installation of aml-core is "
        "incomplete or was built for another Python; reinstall it (`pip install --force-reinstall "
        "aml-core`, or `pip install .` from a source tree)."
    )


def import_compiled() -> None:
    """Import the compiled modules, or raise the ImportError of :func:`not_built`."""
    for name in COMPILED:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            if not is_missing_build(exc):
                raise
            raise not_built(exc) from None


import_compiled()
