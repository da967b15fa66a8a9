"""The build metadata of a backend that follows aml-core's: its version and its aml-core bound.

Every backend's ``setup.py`` is a link to this file, and its ``pyproject.toml`` declares
``dynamic = ["version", "dependencies"]``. One source of the version: ``VERSION`` at the
repository's root, which aml-core reads too (``[tool.setuptools.dynamic]``). A backend uses
aml-core's internals (``aml_core.gpu``), so it runs on the aml-core of its own minor
version: version 0.3.0 requires ``aml-core>=0.3.0,<0.4``. Its other requirements are
``[tool.aml] dependencies`` in its ``pyproject.toml``.

Run from the backend's folder (as every build front end does). In a backend's sdist there
is no ``../../VERSION``: its ``PKG-INFO``, written from ``VERSION`` when the sdist was
made, gives the version instead, so a wheel built from the sdist is the same.
"""

from __future__ import annotations

import email.parser
import tomllib
from pathlib import Path

from setuptools import setup


def version(here: Path) -> str:
    """The backend's version: PKG-INFO's in an sdist, else the repository's VERSION."""
    pkg_info = here / "PKG-INFO"
    if pkg_info.is_file():
        found = email.parser.Parser().parsestr(pkg_info.read_text(encoding="utf-8"))["Version"]
        if not found:
            raise SystemExit(f"{pkg_info} has no Version")
        return str(found)
    return (here.parent.parent / "VERSION").read_text(encoding="ascii").strip()


def aml_core_requirement(version: str) -> str:
    """aml-core of the same minor version, this one or later."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return f"aml-core>={version},<{major}.{minor + 1}"


def requirements(here: Path, version: str) -> list[str]:
    with open(here / "pyproject.toml", "rb") as f:
        extra = tomllib.load(f).get("tool", {}).get("aml", {}).get("dependencies", [])
    return [aml_core_requirement(version), *extra]


if __name__ == "__main__":
    here = Path.cwd()
    v = version(here)
    setup(version=v, install_requires=requirements(here, v))
