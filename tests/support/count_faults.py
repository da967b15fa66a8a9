"""Count what the generated fault tables try (docs/reliability.md, "What the suites try"):
``python -m tests.support.count_faults`` from the repository root runs every operation of
the HIP, Level Zero and HSA tables on their doubles, as the fault tests do, and prints per
backend the operations, the single and double faults run, and the crashes, leaks and wrong
errors found (each should be 0), as JSON."""

from __future__ import annotations

import collections
import importlib
import json
import sys

import pytest

from .faults import FaultSuite

#: backend -> (its tests' helper module, its DriverDouble class)
BACKENDS = {
    "hip": ("hip_helpers", "HipDouble"),
    "ze": ("ze_helpers", "ZeDouble"),
    "hsa": ("hsa_helpers", "HsaDouble"),
}


def count(name: str) -> dict[str, int]:
    """Run backend ``name``'s table; the counts."""
    helpers, cls = BACKENDS[name]
    sys.path.insert(0, f"backends/{name}/tests")
    try:
        module = importlib.import_module(helpers)
        double = getattr(module, cls)(module.build_double())
        table = importlib.import_module(f"{name}_faults")
        patch = pytest.MonkeyPatch()
        double.enter(patch)
        suite = FaultSuite(table.TABLE, str(table.__file__))
        found: collections.Counter[str] = collections.Counter(crashes=0, leaks=0, wrong_errors=0)
        for operation in table.OPERATIONS:
            try:
                result = suite.run(operation, double.env())
            except AssertionError as exc:  # the operation's process died
                found["crashes"] += 1
                print(name, operation, exc, file=sys.stderr)
                continue
            found["operations"] += 1
            for run in result["runs"]:
                found["double_faults" if "give_back" in run else "single_faults"] += 1
            for problem in suite.problems(result):
                leak = any(word in problem for word in ("leaked", "still tracked", "untracked"))
                found["leaks" if leak else "wrong_errors"] += 1
                print(name, operation, problem, file=sys.stderr)
        double.leave()
        patch.undo()
        return dict(found)
    finally:
        sys.path.pop(0)


if __name__ == "__main__":
    print(json.dumps({name: count(name) for name in BACKENDS}))
