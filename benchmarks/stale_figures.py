"""Which later commits touched the code a run measured: a figure measured on commit C is
"not re-run since" every commit after C that changed its measured paths.

    python benchmarks/stale_figures.py 1850041                # the commits after it on the library
    python benchmarks/stale_figures.py 1850041 -- aml_core/pool
    python benchmarks/stale_figures.py --evidence --write     # evidence/README.md's table of runs

``--evidence`` reads ``evidence/README.md``'s table of runs (the first commit named in each
row's "commit" column) and writes, between its ``<!-- stale:begin -->`` and
``<!-- stale:end -->`` markers, each run's commit and the later commits that touched the
measured paths (``--write``; without it the section is printed). The measured paths are
the library's code, :data:`MEASURED` (aml_core and every backend's package), unless given
after ``--``.

A commit that moves code without changing what it compiles to or runs (a file split by
concern, a rename) says so with a ``Measured-unchanged:`` trailer naming the evidence (its
benchmark against its parent, its generated-code comparison): it is not counted against
any figure, so a pure move does not mark every run stale. The table says how many it left
out.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the code the GPU runs measure: the core and the backends' packages
MEASURED = (
    "aml_core",
    "backends/cuda/aml_cuda",
    "backends/hip/aml_hip",
    "backends/ze/aml_ze",
    "backends/hsa/aml_hsa",
)
BEGIN, END = "<!-- stale:begin -->", "<!-- stale:end -->"
#: the trailer of a commit that changed no measured behaviour (its value: the evidence)
UNCHANGED = "Measured-unchanged"
#: a commit as the table writes it: 7 to 40 hex digits (the first that names a commit counts)
COMMIT = re.compile(r"\b[0-9a-f]{7,40}\b")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def is_commit(repo: Path, name: str) -> bool:
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode == 0


def later_commits(
    repo: Path, commit: str, paths: tuple[str, ...] = MEASURED, until: str = "HEAD", unchanged: bool = False
) -> list[tuple[str, str]]:
    """(short hash, subject) of each commit after ``commit`` up to ``until`` that changed
    ``paths``, oldest first: those without a ``Measured-unchanged:`` trailer, or
    (``unchanged``) only those with one."""
    fmt = f"%h%x1f%s%x1f%(trailers:key={UNCHANGED},valueonly,separator=%x2C)%x1e"
    out = git(repo, "log", "--reverse", f"--format={fmt}", f"{commit}..{until}", "--", *paths)
    found = []
    for record in out.split("\x1e"):
        fields = record.strip("\n").split("\x1f")
        if len(fields) == 3 and bool(fields[2].strip()) == unchanged:
            found.append((fields[0], fields[1]))
    return found


def runs(readme: str, repo: Path = REPO) -> list[tuple[str, str, str]]:
    """(date, machine, first commit named) of each row of the table of runs (the first
    hex word of the commit column that names a commit of ``repo``, else the first hex
    word)."""
    if BEGIN in readme and END in readme:  # not the table this script wrote
        head, rest = readme.split(BEGIN, 1)
        readme = head + rest.split(END, 1)[1]
    found = []
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", cells[0]):
            continue
        words = COMMIT.findall(cells[2])
        if words:
            found.append((cells[0], cells[1], next((w for w in words if is_commit(repo, w)), words[0])))
    return found


def section(repo: Path, readme: str, paths: tuple[str, ...] = MEASURED) -> str:
    """The markdown between the markers: one row per run."""
    lines = [
        BEGIN,
        "",
        "Written by `python benchmarks/stale_figures.py --evidence --write` from `git log` on the "
        f"measured paths ({', '.join(f'`{p}`' for p in paths)}): a run's figures are not re-run since "
        "each of these commits.",
        "",
        "| date | machine | commit | later commits that touched the measured paths |",
        "|---|---|---|---|",
    ]
    for date, machine, commit in runs(readme, repo):
        short = machine.split(",")[0].split("(")[0].strip()
        if not is_commit(repo, commit):
            lines.append(f"| {date} | {short} | {commit} | not in this history |")
            continue
        later = later_commits(repo, commit, paths)
        if not later:
            text = "none"
        else:
            names = ", ".join(h for h, _ in later[:8]) + (", ..." if len(later) > 8 else "")
            text = f"{len(later)}: {names}"
        moves = later_commits(repo, commit, paths, unchanged=True)
        if moves:
            text += f" ({len(moves)} with `{UNCHANGED}:` left out)"
        lines.append(f"| {date} | {short} | {commit} | {text} |")
    lines += ["", END]
    return "\n".join(lines)


def rewrite(readme: str, new: str) -> str:
    """``readme`` with its marked section replaced by ``new`` (appended where it has none)."""
    if BEGIN in readme and END in readme:
        head, rest = readme.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        return head + new + tail
    return readme.rstrip("\n") + "\n\n" + new + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("commit", nargs="?", help="the commit a figure was measured on")
    parser.add_argument("--evidence", action="store_true", help="every run of evidence/README.md")
    parser.add_argument("--write", action="store_true", help="with --evidence: rewrite its section")
    parser.add_argument("--repo", type=Path, default=REPO)
    parser.add_argument("paths", nargs="*", help="the measured paths (default: the library's code)")
    args = parser.parse_args(argv)
    paths = tuple(args.paths) or MEASURED
    if args.evidence:
        path = args.repo / "evidence" / "README.md"
        text = section(args.repo, path.read_text(), paths)
        if args.write:
            path.write_text(rewrite(path.read_text(), text))
        else:
            print(text)
        return 0
    if not args.commit:
        parser.error("give a commit, or --evidence")
    for h, subject in later_commits(args.repo, args.commit, paths):
        print(f"{h} {subject}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
