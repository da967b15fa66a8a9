"""The mutation check's CI subset (tests/mutation/mutants.py, ``--subset``; about 2.5 min
on the shared 2-core machine, 1 min of it the five compiled mutants' builds): each quick
mutant, one deliberate bug in a module behind issue 32's behaviours (13 Python ones, and
one of each compiled module: the kernel, the buffers' live table, the native allocator,
the hooks, the fast-path interface), must be caught by its tests, which first pass on
the unmutated code. ``AML_MUTATION=0`` skips it; the whole set runs with
``python -m tests.mutation.mutants`` (``--compiled`` for the Cython ones)."""

from __future__ import annotations

import os

import pytest

from tests.mutation.mutants import MUTANTS, run


@pytest.mark.skipif(os.environ.get("AML_MUTATION") == "0", reason="AML_MUTATION=0")
def test_every_quick_mutant_is_killed() -> None:
    quick = tuple(m for m in MUTANTS if m.quick)
    assert len(quick) >= 10
    compiled = {m.extension for m in quick if m.compiled}
    assert compiled == {"_kernel", "_buffer", "_allocator", "_hooks", "_fastpath"}
    survivors = [m.name for m, killed, _ in run(quick, verbose=False) if not killed]
    assert not survivors, f"mutants no test caught: {survivors}"
