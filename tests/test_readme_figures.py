"""Every figure in README.md's table of backends appears in a file its row links to: each
ratio (a number before the multiplication sign, alone or as a range), each count of tests passed and each
"N of M" tally, written as the linked summary or log writes it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: a figure: a ratio or a range of ratios, a count of tests passed, or N of M
TIMES, DASH = "\u00d7", "\u2013"
FIGURE = re.compile(
    rf"(\d+(?:\.\d+)?(?:[{DASH}-]\d+(?:\.\d+)?)?{TIMES})|(\d[\d,]*) passed|(\d+) of (\d+)(?! ?[A-Za-z]*B\b)"
)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _rows() -> list[str]:
    text = (ROOT / "README.md").read_text()
    table = text.split("## Backends", 1)[1].split("\n## ", 1)[0]
    return [line for line in table.splitlines() if line.startswith("| `")]


def _numbers(match: re.Match[str]) -> list[str]:
    if match.group(1):
        return re.findall(r"\d+(?:\.\d+)?", match.group(1))
    if match.group(2):
        return [match.group(2).replace(",", "")]
    return [match.group(3), match.group(4)]


def test_every_figure_in_the_backend_table_is_in_a_file_its_row_links() -> None:
    missing = []
    rows = _rows()
    assert len(rows) == 5
    for row in rows:
        linked = [ROOT / target for target in LINK.findall(row) if not target.startswith("http")]
        texts = []
        for path in linked:
            if path.is_dir():
                texts += [p.read_text(errors="replace") for p in path.rglob("*.md")]
            elif path.exists():
                texts.append(path.read_text(errors="replace"))
        corpus = "\n".join(texts).replace(",", "")
        for match in FIGURE.finditer(row):
            for number in _numbers(match):
                if not re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", corpus):
                    missing.append(f"{row.split('|')[1].strip()}: {match.group(0)!r} ({number})")
    assert not missing, "figures in README.md's backend table that no linked file holds:\n" + "\n".join(
        missing
    )
