"""run-tests' deb-src entry for Level Zero's source package (.ci/deb_src.py), derived from
the machine's own apt sources: sample deb822 and one-line files, and apt reading the result."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "deb_src.py"

DEBIAN_SOURCES = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Enabled: no
Types: deb
URIs: http://disabled.example/debian
Suites: bookworm
Components: main
"""

THIRD_PARTY = """\
Types: deb
URIs: https://vendor.example/node_20.x
Suites: nodistro
Components: main
Signed-By: /usr/share/keyrings/vendor.gpg
"""

INLINE_KEY = """\
Types: deb
URIs: http://mirror.example/debian
Suites: bookworm
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 mDMEZAAAABYJKwYBBAHaRw8BAQdA
 -----END PGP PUBLIC KEY BLOCK-----
"""


@pytest.fixture(scope="module")
def deb_src() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deb_src", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["deb_src"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _apt(tmp_path: Path, files: dict[str, str]) -> Path:
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    for name, text in files.items():
        (apt / name).write_text(text)
    return apt


def _run(apt: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(SCRIPT), "--apt-dir", str(apt), "--suite", "bookworm", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def test_deb822_sources_give_the_release_suite_of_the_same_mirror(tmp_path: Path) -> None:
    apt = _apt(
        tmp_path,
        {"sources.list.d/debian.sources": DEBIAN_SOURCES, "sources.list.d/node.sources": THIRD_PARTY},
    )
    out = _run(apt)
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout == (
        "Types: deb-src\n"
        "URIs: http://mirror.example/debian\n"
        "Suites: bookworm\n"
        "Components: main contrib\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )


def test_one_line_entries_keep_their_options(tmp_path: Path) -> None:
    sources_list = (
        "# the release\n"
        "deb [arch=amd64 signed-by=/etc/apt/keyrings/mirror.gpg] "
        "http://mirror.example/debian bookworm main non-free\n"
        "deb http://mirror.example/debian bookworm-updates main\n"
    )
    apt = _apt(
        tmp_path,
        {
            "sources.list": sources_list,
            "sources.list.d/extra.list": "deb http://other.example/debian bookworm main\n",
        },
    )
    out = _run(apt)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        "Types: deb-src\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main non-free\n"
        "Signed-By: /etc/apt/keyrings/mirror.gpg\n"
        "\n"
        "Types: deb-src\nURIs: http://other.example/debian\nSuites: bookworm\nComponents: main\n"
    )


def test_an_inline_key_is_copied_verbatim(deb_src: ModuleType) -> None:
    text = deb_src.deb_src(list(deb_src.parse_sources(INLINE_KEY)), "bookworm")
    assert text.endswith(
        "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mDMEZAAAABYJKwYBBAHaRw8BAQdA\n"
        " -----END PGP PUBLIC KEY BLOCK-----\n"
    )


def test_nothing_to_add_when_a_deb_src_entry_exists(tmp_path: Path) -> None:
    both = DEBIAN_SOURCES.replace("Types: deb\n# http", "Types: deb deb-src\n# http", 1)
    out = _run(_apt(tmp_path, {"sources.list.d/debian.sources": both}))
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")


def test_no_entry_of_the_suite_is_an_error_that_says_so(tmp_path: Path) -> None:
    apt = _apt(
        tmp_path,
        {"sources.list.d/node.sources": THIRD_PARTY, "sources.list": "deb-src http://x.example/d sid main\n"},
    )
    out = _run(apt)
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr == f"deb_src.py: no deb entry for suite bookworm under {apt}\n"


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="apt-get is not installed (not a Debian machine)")
def test_apt_reads_the_result_as_the_suite_s_source_index(tmp_path: Path) -> None:
    apt = _apt(tmp_path, {"sources.list.d/debian.sources": DEBIAN_SOURCES})
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / "aml-deb-src.sources").write_text(_run(apt).stdout)
    (tmp_path / "lists" / "partial").mkdir(parents=True)
    options = {
        "Dir::Etc::SourceList": "/dev/null",
        "Dir::Etc::SourceParts": str(parts),
        "Dir::State::Lists": str(tmp_path / "lists"),
        "Debug::NoLocking": "1",
    }
    cmd = ["apt-get", *(f"-o{k}={v}" for k, v in options.items()), "--print-uris", "update"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    uris = {line.split()[0].strip("'") for line in out.stdout.splitlines()}
    for component in ("main", "contrib"):
        assert f"http://mirror.example/debian/dists/bookworm/{component}/source/Sources.xz" in uris, (
            out.stdout
        )
    assert not any("binary-" in uri for uri in uris)  # sources only
