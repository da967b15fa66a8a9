"""The mutation check's CI subset (tests/mutation/mutants.py, ``--subset``; about 45 s):
each quick mutant, one deliberate bug in a module behind issue 32's behaviours, must be
caught by its tests. ``AML_MUTATION=0`` skips it; the whole set runs with
``python -m tests.mutation.mutants``."""

from __future__ import annotations

import os

import pytest

from tests.mutation.mutants import MUTANTS, run


@pytest.mark.skipif(os.environ.get("AML_MUTATION") == "0", reason="AML_MUTATION=0")
def test_every_quick_mutant_is_killed() -> None:
    quick = tuple(m for m in MUTANTS if m.quick)
    assert len(quick) >= 10
    survivors = [m.name for m, killed, _ in run(quick, verbose=False) if not killed]
    assert not survivors, f"mutants no test caught: {survivors}"
