"""One definition of each statistic.

A statistics record (:class:`~aml_core.specs.AreaStats`,
:class:`~aml_core.pool.PoolStats`) declares each field once, with :func:`stat`: its
meaning, how the record's one-line summary says it, and for a pool the field of the
kernel's ``Counters`` struct (aml_core/_kernel.pxd) it is read from.
:func:`record_summary` and :func:`counters_of` derive from those declarations, so a field
added to a record is summarized and read without another list to edit.

The reports' figures (:func:`aml_core.memory.memory_stats`'s keys and
:func:`~aml_core.memory.memory_summary`'s rows) are declared the same way, with
:func:`figure`, in ``aml_core.memory``: each names the record fields it is read from.
tests/test_statistics.py checks that the records, the kernel's counters and the figures
agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

import attrs

if TYPE_CHECKING:
    from attrs import AttrsInstance

__all__ = [
    "Figure",
    "Stat",
    "counters_of",
    "figure",
    "figure_of",
    "format_size",
    "format_value",
    "record_summary",
    "stat",
    "stat_of",
]

#: How a value is written for people: bytes in binary units, a count, a ratio in percent.
Unit = Literal["bytes", "count", "ratio"]

#: Where a field goes in a summary: a lead phrase (after ", "), an aside in parentheses
#: after the lead before it, or the second of a pair ("2 hits / 1 misses").
Part = Literal["lead", "aside", "pair"]


@attrs.frozen
class Stat:
    """One field of a statistics record (the metadata :func:`stat` attaches)."""

    #: What the field counts.
    meaning: str
    #: How the record's summary says it: ``{}`` is the value written for people.
    phrase: str
    unit: Unit
    part: Part
    #: The kernel's ``Counters`` field it is read from (pools' records); None: computed
    #: from the others where the record is made (``derived``) or kept by the area.
    counter: str | None
    #: Computed from the record's other fields (no report reads it on its own).
    derived: bool


def stat(
    meaning: str,
    phrase: str,
    *,
    unit: Unit = "bytes",
    part: Part = "lead",
    counter: str | None = None,
    derived: bool = False,
) -> dict[str, Stat]:
    """The metadata of a record's field: ``attrs.field(metadata=stat(...))``."""
    return {"stat": Stat(meaning, phrase, unit, part, counter, derived)}


def stat_of(field: attrs.Attribute[object]) -> Stat:
    """The :class:`Stat` a record's field was declared with."""
    found = field.metadata.get("stat")
    if not isinstance(found, Stat):
        raise TypeError(f"the statistics field {field.name} is not declared with stat()")
    return found


def format_size(n: int, *, exact: bool = False) -> str:
    """A byte count for people: ``"64.0 MiB"``, ``"4.0 KiB"``, ``"512 B"`` (binary
    units, one decimal). Exact values stay in the fields that hold them; with ``exact``
    (error messages, where the caller may need the very number) the count follows:
    ``"8.0 GiB (8589934592 bytes)"``, ``"512 bytes"``."""
    for unit, shift in (("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if abs(n) >= 1 << shift:
            text = f"{n / (1 << shift):.1f} {unit}"
            return f"{text} ({n} bytes)" if exact else text
    return f"{n} bytes" if exact else f"{n} B"


def format_value(unit: Unit, value: float) -> str:
    """``value`` for people: bytes by :func:`format_size`, a ratio in percent, a count."""
    if unit == "bytes":
        return format_size(int(value))
    if unit == "ratio":
        return f"{value:.1%}"
    return str(value)


def record_summary(record: AttrsInstance) -> str:
    """A statistics record in one line, its fields in their declared order, each as its
    :class:`Stat` says: ``"64.0 MiB in use (peak 128.0 MiB), 2 live mappings, 5 maps,
    3 unmaps"``."""
    text, aside = "", False
    for field in attrs.fields(type(record)):
        s = stat_of(field)
        said = s.phrase.format(format_value(s.unit, getattr(record, field.name)))
        if s.part == "aside":
            text += (", " if aside else " (") + said
            aside = True
            continue
        if aside:
            text += ")"
            aside = False
        text += (" / " if s.part == "pair" else ", " if text else "") + said
    return text + (")" if aside else "")


def counters_of(record_type: type[AttrsInstance]) -> Mapping[str, str]:
    """``{record field: kernel Counters field}`` for the fields read from the kernel."""
    fields = ((f.name, stat_of(f).counter) for f in attrs.fields(record_type))
    return {name: counter for name, counter in fields if counter is not None}


#: Where a report's figure comes from, for one pool and for one area that is not a
#: pool: ``"pool_stats.<field>"`` (a pool's :class:`~aml_core.pool.PoolStats`),
#: ``"stats.<field>"`` (the :class:`~aml_core.specs.AreaStats` of the pool or area), an
#: int (the same for every such holder), or None (computed from the other figures).
Source = str | int | None


@attrs.frozen
class Figure:
    """One figure of the memory reports (the metadata :func:`figure` attaches)."""

    #: The key in :func:`~aml_core.memory.memory_stats` (``"requested_bytes.current"``).
    key: str
    meaning: str
    unit: Unit
    #: Its row in :func:`~aml_core.memory.memory_summary`'s tables and the column
    #: (``current``, or ``total`` for peaks and totals); None: no row. Figures of one
    #: row and column are written ``a / b``.
    row: str | None
    column: Literal["current", "total"]
    of_pool: Source
    of_area: Source
    #: How holders add up over the process: a sum, or the largest.
    add: Literal["sum", "max"]


def figure(
    key: str,
    meaning: str,
    *,
    pool: Source,
    area: Source,
    row: str | None = None,
    column: Literal["current", "total"] = "current",
    unit: Unit = "bytes",
    add: Literal["sum", "max"] = "sum",
) -> dict[str, Figure]:
    """The metadata of a report's figure: ``attrs.field(metadata=figure(...))``."""
    return {"figure": Figure(key, meaning, unit, row, column, pool, area, add)}


def figure_of(field: attrs.Attribute[object]) -> Figure:
    """The :class:`Figure` a report's field was declared with."""
    found = field.metadata.get("figure")
    if not isinstance(found, Figure):
        raise TypeError(f"the report's field {field.name} is not declared with figure()")
    return found
