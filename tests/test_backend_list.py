"""The list of backends lives in one place (``aml_core/backend_list.py``, issue 31 item 4):
the folders under ``backends/`` match it, tox.ini (which cannot import Python) agrees
with it line by line, and no reader of it writes the list again."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest

from aml_core.backend_list import BACKENDS, by_name

ROOT = Path(__file__).resolve().parent.parent
NAMES = [b.name for b in BACKENDS]
#: The files that used to write the list by hand, and now read it.
READERS = [
    "tests/test_signatures.py",
    "tests/test_exports.py",
    "tests/test_packaging.py",
    "install_tests/test_install.py",
    "benchmarks/plugin_import.py",
    "aml_core/gpu/hooks.py",
]


def _tox() -> configparser.ConfigParser:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    return tox


def _words(text: str) -> list[str]:
    return text.replace(",", " ").split()


def test_the_folders_under_backends_are_the_list() -> None:
    folders = sorted(p.parent.name for p in (ROOT / "backends").glob("*/pyproject.toml"))
    assert folders == sorted(NAMES)
    for b in BACKENDS:
        assert (ROOT / b.folder / b.package / "__init__.py").is_file(), b
        assert by_name(b.name) is b
    assert by_name("host") is None  # built into aml-core, not a backend of backends/


def test_tox_has_an_environment_per_backend() -> None:
    tox = _tox()
    envlist = _words(tox["tox"]["envlist"])
    for b in BACKENDS:
        assert b.name in envlist, f"tox.ini's envlist lacks {b.name}"
        env = tox[f"testenv:{b.name}"]
        assert f"./{b.folder}" in env["commands_pre"], f"[testenv:{b.name}] does not install {b.folder}"
        assert f"pytest {b.folder}/tests" in env["commands"], f"[testenv:{b.name}] does not run its tests"


def test_tox_type_and_asan_environments_name_every_backend() -> None:
    tox = _tox()
    type_env = tox["testenv:type"]
    installed = re.findall(r"\./backends/(\w+)", type_env["commands_pre"])
    assert installed == NAMES, "tox -e type installs another list than aml_core/backend_list.py"
    assert re.findall(r"backends/(\w+)/aml_\w+", type_env["commands"]) == NAMES
    asan = tox["testenv:asan"]
    assert re.findall(r"\./backends/(\w+)", asan["commands_pre"]) == [b.name for b in BACKENDS if b.double]


@pytest.mark.parametrize("path", READERS)
def test_no_reader_writes_the_list_again(path: str) -> None:
    text = (ROOT / path).read_text()
    assert "backend_list" in text, f"{path} does not read aml_core/backend_list.py"
    names = "|".join(NAMES)
    literal = re.compile(
        rf"""\(\s*["'](?:aml_)?(?:{names})["'](?:\s*,\s*["'](?:aml_)?(?:{names})["']){{2,}}"""
    )
    assert not literal.search(text), f"{path} writes the list of backends by hand"
