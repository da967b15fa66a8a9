"""Fuzzing in CI (issue 32, item 9), bounded in time: the targets of
:mod:`tests.fuzz.targets` (snapshot files, IPC handles, the ``aml info --json`` codec, the
CLI's arguments) may refuse an input with an AML error and nothing else.

* every input of the corpus in the repository (tests/fuzz/corpus/<target>) replays;
* hypothesis feeds each target bytes of its own (``AML_FUZZ_EXAMPLES``, default 200);
* with atheris installed (the tox ``core`` env installs it), coverage-guided fuzzing of
  each target for ``AML_FUZZ_SECONDS`` seconds (default 5; 0 skips), in its own process,
  reading the corpus and writing new inputs and crashes to a temporary directory: a
  crash or a non-AML exception fails the run, its input in the report.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import targets

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("AML_FUZZ_EXAMPLES", "200"))
SECONDS = int(os.environ.get("AML_FUZZ_SECONDS", "5"))
NAMES = sorted(targets.TARGETS)


def _corpus(name: str) -> list[Path]:
    return sorted((Path(targets.CORPUS) / name).iterdir())


@pytest.mark.parametrize("name", NAMES)
def test_the_corpus_replays(name: str) -> None:
    seeds = _corpus(name)
    assert seeds, f"the corpus of {name} is empty"
    for path in seeds:
        targets.run(name, path.read_bytes())


@pytest.mark.parametrize("name", NAMES)
def test_hypothesis_fuzz(name: str) -> None:
    seeds = [p.read_bytes() for p in _corpus(name)]

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        st.one_of(
            st.binary(max_size=2048),
            st.sampled_from(seeds).flatmap(
                lambda s: st.tuples(st.integers(0, max(len(s) - 1, 0)), st.binary(max_size=16)).map(
                    lambda cut: s[: cut[0]] + cut[1] + s[cut[0] + len(cut[1]) :]
                )
            ),
        )
    )
    def fuzz(data: bytes) -> None:
        targets.run(name, data)

    fuzz()


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed")
@pytest.mark.skipif(SECONDS <= 0, reason="AML_FUZZ_SECONDS=0")
@pytest.mark.parametrize("name", NAMES)
def test_atheris(name: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.atheris_run", name, str(SECONDS), str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=SECONDS + 120,
        check=False,
    )
    crashes = [p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-"))]
    assert not crashes, f"{crashes}\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, proc.stderr[-4000:]
    runs = re.search(r"stat::number_of_executed_units:\s*(\d+)", proc.stderr)
    assert runs is not None, proc.stderr[-2000:]
    print(f"{name}: {runs.group(1)} executions in {SECONDS} s")
