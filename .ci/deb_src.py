#!/usr/bin/env python3
"""Print the apt source (deb822) that lets ``apt-get source`` fetch from this machine's own mirror.

run-tests needs Debian's ``level-zero`` source package (for Level Zero's null driver), so
a ``deb-src`` entry for the release. Rather than naming a mirror, it copies the machine's
configured ``deb`` entries of the release's suite (``VERSION_CODENAME`` of os-release):
the same URIs, suite, components and Signed-By, with ``Types: deb-src``. It reads the
deb822 ``*.sources`` files and the one-line ``sources.list`` / ``*.list`` entries under
the apt directory; disabled entries (``Enabled: no``) are skipped.

Prints nothing when a ``deb-src`` entry for the suite is configured already. Exits 1,
saying why, when no ``deb`` entry of the suite is configured.

Usage: deb_src.py [--apt-dir /etc/apt] [--suite CODENAME] > /etc/apt/sources.list.d/aml-deb-src.sources
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Entry:
    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str | None


def _deb822_paragraphs(text: str) -> Iterator[dict[str, str]]:
    fields: dict[str, str] = {}
    key = None
    for line in [*text.splitlines(), ""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if fields:
                yield fields
            fields, key = {}, None
        elif line[0] in " \t" and key is not None:  # a continuation line (a key block in Signed-By)
            fields[key] += "\n" + line
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()


def parse_sources(text: str) -> Iterator[Entry]:
    """The entries of a deb822 ``.sources`` file."""
    for fields in _deb822_paragraphs(text):
        if fields.get("enabled", "yes").strip().lower() == "no":
            continue
        yield Entry(
            types=tuple(fields.get("types", "").split()),
            uris=tuple(fields.get("uris", "").split()),
            suites=tuple(fields.get("suites", "").split()),
            components=tuple(fields.get("components", "").split()),
            signed_by=fields.get("signed-by"),
        )


def parse_list(text: str) -> Iterator[Entry]:
    """The entries of a one-line ``sources.list`` file: ``deb [options] uri suite components...``."""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kind, _, rest = line.partition(" ")
        options: dict[str, str] = {}
        rest = rest.strip()
        if rest.startswith("["):
            inside, _, rest = rest[1:].partition("]")
            for option in inside.split():
                name, _, value = option.partition("=")
                options[name.lower()] = value
        words = rest.split()
        if kind not in ("deb", "deb-src") or len(words) < 2:
            continue
        yield Entry((kind,), (words[0],), (words[1],), tuple(words[2:]), options.get("signed-by"))


def configured(apt_dir: Path) -> Iterator[Entry]:
    """Every entry apt reads: sources.list, then sources.list.d's ``*.list`` and ``*.sources``."""
    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*"))]
    for path in files:
        if not path.is_file():
            continue
        if path.suffix == ".sources":
            yield from parse_sources(path.read_text(encoding="utf-8"))
        elif path.suffix == ".list" or path.name == "sources.list":
            yield from parse_list(path.read_text(encoding="utf-8"))


def deb_src(entries: list[Entry], suite: str) -> str | None:
    """The deb822 text of the deb-src entries to add for ``suite``: "" when one is configured
    already, None when no deb entry of the suite is configured."""
    if any("deb-src" in e.types and suite in e.suites for e in entries):
        return ""
    stanzas: list[str] = []
    for e in entries:
        if "deb" not in e.types or suite not in e.suites or not e.uris:
            continue
        lines = ["Types: deb-src", f"URIs: {' '.join(e.uris)}", f"Suites: {suite}"]
        if e.components:
            lines.append(f"Components: {' '.join(e.components)}")
        if e.signed_by:  # a keyring's path, or a key block on continuation lines
            separator = "" if e.signed_by.startswith("\n") else " "
            lines.append(f"Signed-By:{separator}{e.signed_by}")
        stanza = "\n".join(lines) + "\n"
        if stanza not in stanzas:
            stanzas.append(stanza)
    return "\n".join(stanzas) if stanzas else None


def codename(os_release: Path = Path("/etc/os-release")) -> str | None:
    for line in os_release.read_text(encoding="utf-8").splitlines():
        key, _, value = line.partition("=")
        if key == "VERSION_CODENAME":
            return value.strip().strip("\"'") or None
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apt-dir", type=Path, default=Path("/etc/apt"))
    parser.add_argument("--suite", help="the release's suite (default: VERSION_CODENAME of /etc/os-release)")
    args = parser.parse_args(argv)
    suite = args.suite or codename()
    if not suite:
        print("deb_src.py: no VERSION_CODENAME in /etc/os-release: give --suite", file=sys.stderr)
        return 1
    text = deb_src(list(configured(args.apt_dir)), suite)
    if text is None:
        print(f"deb_src.py: no deb entry for suite {suite} under {args.apt_dir}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
