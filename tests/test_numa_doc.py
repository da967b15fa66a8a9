"""The examples of docs/numa.md's sections on placement, moving memory and threads run as
written, on this machine's nodes (they adapt to one node or several)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "numa.md"
SECTIONS = ("Placement", "Moving memory and rebinding an area", "Running a thread on a node")


def _examples() -> list[tuple[str, int, str]]:
    text = DOC.read_text()
    out: list[tuple[str, int, str]] = []
    for title in SECTIONS:
        start = text.index(f"\n## {title}\n")
        end = text.find("\n## ", start + 1)
        body = text[start : end if end > 0 else len(text)]
        for match in re.finditer(r"```python\n(.*?)```", body, re.S):
            line = text[: start + match.start()].count("\n") + 2
            out.append((title, line, match.group(1)))
    return out


EXAMPLES = _examples()


def test_each_section_has_an_example() -> None:
    assert {title for title, _, _ in EXAMPLES} == set(SECTIONS)


@pytest.mark.parametrize(("title", "line", "code"), EXAMPLES, ids=[f"numa.md:{e[1]}" for e in EXAMPLES])
def test_example_runs(title: str, line: int, code: str) -> None:
    exec(compile(code, f"docs/numa.md:{line}", "exec"), {"__name__": "numa_doc"})
