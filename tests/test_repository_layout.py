"""The repository keeps run results out of its sources and its docs' links true.

Results and logs of real runs live in ``evidence/<date>-<machine>-<what>/``, each folder a
row of evidence/README.md's index; nothing under aml_core/, the backends' packages and
tests, or benchmarks/ is a result file. Every relative link of the README, docs/*.md,
the backends' READMEs and evidence/ names a file that exists (and a heading that exists,
where it names one)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = ROOT / "evidence"

#: what a run leaves behind: logs, JSON results, junit XML, plots, captured output
RESULT_SUFFIXES = (".log", ".json", ".xml", ".png", ".svg", ".csv", ".txt")
#: source files with those suffixes that are not results (fixtures read by tests), by
#: path from the repository's root; none today
SOURCE_FIXTURES: frozenset[str] = frozenset()
#: folders that hold build output or caches, not sources (git-ignored)
NOT_SOURCES = {"__pycache__", "build", "dist", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
#: history words a run folder must not be named by (it is named by what it verified)
HISTORY = re.compile(r"(^|-)(final\d*|run\d+[a-z]?|before|after|issue\d+|new|old|tmp)(-|$)")
RUN_FOLDER = re.compile(r"^(\d{4}-\d{2}-\d{2})-([a-z0-9]+(?:-[a-z0-9]+)*)$")


def is_build_output(folder: Path) -> bool:
    return folder.name in NOT_SOURCES or folder.name.startswith(".") or folder.name.endswith(".egg-info")


def source_folders() -> list[Path]:
    folders = [ROOT / "aml_core", ROOT / "benchmarks"]
    for backend in sorted((ROOT / "backends").iterdir()):
        if backend.is_dir():
            folders += [*sorted(backend.glob("aml_*")), backend / "tests"]
    return [f for f in folders if f.is_dir() and not is_build_output(f)]


def walk(folder: Path) -> Iterator[Path]:
    for entry in sorted(folder.iterdir()):
        if entry.is_dir():
            if not is_build_output(entry):
                yield entry
                yield from walk(entry)
        else:
            yield entry


def test_the_source_folders_are_found() -> None:
    names = {f.relative_to(ROOT).as_posix() for f in source_folders()}
    assert {"aml_core", "benchmarks", "backends/cuda/aml_cuda", "backends/cuda/tests"} <= names


def test_no_result_file_lives_among_the_sources() -> None:
    found = []
    for folder in source_folders():
        for path in walk(folder):
            rel = path.relative_to(ROOT).as_posix()
            if path.is_dir() and path.name in ("logs", "results"):
                found.append(rel + "/")
            elif path.is_file() and path.name.endswith(RESULT_SUFFIXES) and rel not in SOURCE_FIXTURES:
                found.append(rel)
    assert not found, f"run results belong in evidence/<date>-<machine>-<what>/ (evidence/README.md): {found}"


def test_the_allowed_fixtures_exist() -> None:
    missing = [p for p in SOURCE_FIXTURES if not (ROOT / p).is_file()]
    assert not missing, f"SOURCE_FIXTURES names files that are gone: {missing}"


def run_folders() -> list[Path]:
    return sorted(p for p in EVIDENCE.iterdir() if p.is_dir())


def test_every_run_folder_is_named_by_date_machine_and_what_it_verified() -> None:
    folders = run_folders()
    assert folders, "evidence/ holds no run"
    for folder in folders:
        match = RUN_FOLDER.match(folder.name)
        assert match, f"{folder.name}: expected <yyyy-mm-dd>-<machine>-<what>, lower case"
        assert "-" in match.group(2), f"{folder.name}: names no machine or no purpose"
        assert not HISTORY.search(match.group(2)), f"{folder.name}: named by history, not by what it verified"
        assert any(p.is_file() for p in folder.rglob("*")), f"{folder.name} is empty"


def test_every_run_folder_is_in_the_index() -> None:
    index = (EVIDENCE / "README.md").read_text()
    missing = [f.name for f in run_folders() if f"]({f.name}/" not in index]
    assert not missing, f"evidence/README.md has no row linking {missing}"


# --- links -------------------------------------------------------------------------------

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def documents() -> list[Path]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    docs += sorted((ROOT / "backends").glob("*/README.md"))
    docs += sorted(EVIDENCE.glob("*.md")) + sorted(EVIDENCE.glob("*/**/*.md"))
    return [d for d in docs if d.is_file()]


def prose(text: str) -> str:
    """The text without fenced code blocks and code spans (their brackets are not links)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    return LINK.findall(prose(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the text lower-cased, markup and punctuation other
    than hyphens and underscores dropped, spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"[`*]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_links_and_slugs_are_read_as_github_does() -> None:
    text = 'See [a](x.md), ![p](img/p.png "t") and `[not](a-link.md)`.\n```\n[no](n.md)\n```\n'
    assert links(text) == ["x.md", "img/p.png"]
    assert slug("1. Layout: one template for every backend") == "1-layout-one-template-for-every-backend"
    assert slug("HSA, as `aml-hsa` binds it") == "hsa-as-aml-hsa-binds-it"


@pytest.mark.parametrize("doc", documents(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for target in links(doc.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif not dest.resolve().is_relative_to(ROOT):
            broken.append(f"{target}: outside the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: {broken}"
