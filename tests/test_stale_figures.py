"""benchmarks/stale_figures.py: the commits after a run's that touched its measured paths,
from git log on a throwaway repository, and the table it writes into evidence/README.md."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.benchmark_scripts import load_benchmark

stale = load_benchmark("stale_figures")


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    import os

    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env={**os.environ, **env}
    ).stdout.strip()


def _commit(repo: Path, path: str, text: str, message: str) -> str:
    f = repo / path
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    _git(repo, "add", path)
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "--short", "HEAD")


def test_later_commits_on_the_measured_paths_only(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    measured = _commit(tmp_path, "aml_core/pool.py", "a\n", "the measured code")
    _commit(tmp_path, "docs/guide.md", "doc\n", "docs only")
    touched = _commit(tmp_path, "aml_core/pool.py", "b\n", "pool: a faster path")
    _commit(tmp_path, "benchmarks/x.py", "x\n", "a benchmark")
    backend = _commit(tmp_path, "backends/cuda/aml_cuda/api.py", "c\n", "aml-cuda: a fix")
    later = stale.later_commits(tmp_path, measured)
    assert [h for h, _ in later] == [touched, backend]
    assert later[0][1] == "pool: a faster path"
    assert stale.later_commits(tmp_path, backend) == []
    assert [h for h, _ in stale.later_commits(tmp_path, measured, ("backends/cuda/aml_cuda",))] == [backend]

    readme = (
        "| date | machine | commit | what | files |\n|---|---|---|---|---|\n"
        f"| 2026-11-26 | H200 | {measured} (the kernel) | x | y |\n"
        f"| 2026-11-27 | H200, driver 1 | the tree of {backend} | x | y |\n"
        "| 2026-11-28 | H100 | deadbee | x | y |\n"
        "| not a run | - | - | - |\n"
    )
    assert [r[2] for r in stale.runs(readme, tmp_path)] == [measured, backend, "deadbee"]
    table = stale.section(tmp_path, readme)
    assert f"| 2026-11-26 | H200 | {measured} | 2: {touched}, {backend} |" in table
    assert f"| 2026-11-27 | H200 | {backend} | none |" in table
    assert "| 2026-11-28 | H100 | deadbee | not in this history |" in table
    written = stale.rewrite(readme, table)
    assert stale.runs(written, tmp_path) == stale.runs(readme, tmp_path)  # its own table is not read
    again = stale.rewrite(written, stale.section(tmp_path, written))
    assert again.count(stale.BEGIN) == 1
    assert again.startswith(readme.rstrip("\n"))


def test_a_commit_that_says_it_changed_no_measured_behaviour_is_left_out(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    measured = _commit(tmp_path, "aml_core/_kernel.pyx", "a\nb\n", "the measured code")
    moved = _commit(
        tmp_path,
        "aml_core/_kernel.pyx",
        "a\n",
        "kernel: b moved to its own file\n\nMeasured-unchanged: evidence/2026-12-02-x-kernel-split",
    )
    touched = _commit(tmp_path, "aml_core/_kernel.pyx", "c\n", "kernel: a faster path")
    assert stale.later_commits(tmp_path, measured) == [(touched, "kernel: a faster path")]
    assert stale.later_commits(tmp_path, measured, unchanged=True) == [
        (moved, "kernel: b moved to its own file")
    ]
    table = stale.section(tmp_path, f"| 2026-12-02 | epyc | {measured} | x | y |\n")
    assert (
        f"| 2026-12-02 | epyc | {measured} | 1: {touched} (1 with `Measured-unchanged:` left out) |" in table
    )
