"""The registry's environment: ``AML_BACKEND``, ``AML_DISABLE_BACKENDS`` and
``AML_PROBE_TIMEOUT``, parsed once per load. Bad values never raise: they give an
:class:`AMLConfigWarning` and the default."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterable

import attrs

__all__ = [
    "CORE_DISTRIBUTION",
    "DEFAULT_PROBE_TIMEOUT",
    "ENTRY_POINT_GROUP",
    "ISOLATED_STARTUP_LIMIT",
    "MAX_PROBE_TIMEOUT",
    "AMLConfigWarning",
    "Settings",
    "settings",
    "warn",
]

ENTRY_POINT_GROUP = "aml.backends"
CORE_DISTRIBUTION = "aml-core"
DEFAULT_PROBE_TIMEOUT = 5.0
#: The largest AML_PROBE_TIMEOUT accepted; larger values are lowered to it.
MAX_PROBE_TIMEOUT = 3600.0
#: How long an isolated probe's interpreter may take to start and load its plugin.
ISOLATED_STARTUP_LIMIT = 30.0


class AMLConfigWarning(UserWarning):
    """An ``AML_*`` environment variable has a value aml cannot use (the default is
    used instead, or the value is ignored)."""


@attrs.frozen
class Settings:
    """The registry's environment, parsed. Bad values never raise: they give a warning
    (``warnings``) and the default."""

    forced: str | None
    disabled: frozenset[str]
    timeout: float
    warnings: tuple[str, ...] = ()


def settings() -> Settings:
    """Read ``AML_BACKEND``, ``AML_DISABLE_BACKENDS`` and ``AML_PROBE_TIMEOUT``."""
    notes: list[str] = []
    raw = os.environ.get("AML_PROBE_TIMEOUT", "").strip()
    timeout = DEFAULT_PROBE_TIMEOUT
    if raw:
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            notes.append(
                f"AML_PROBE_TIMEOUT={raw!r} is not a positive, finite number of seconds; "
                f"using {DEFAULT_PROBE_TIMEOUT:g} s"
            )
        elif value > MAX_PROBE_TIMEOUT:
            notes.append(
                f"AML_PROBE_TIMEOUT={raw!r} is above {MAX_PROBE_TIMEOUT:g} s; using {MAX_PROBE_TIMEOUT:g} s"
            )
            timeout = MAX_PROBE_TIMEOUT
        else:
            timeout = value
    disabled = frozenset(
        p.strip() for p in os.environ.get("AML_DISABLE_BACKENDS", "").replace(",", " ").split() if p.strip()
    )
    forced = os.environ.get("AML_BACKEND", "").strip() or None
    return Settings(forced=forced, disabled=disabled, timeout=timeout, warnings=tuple(notes))


_warned: set[str] = set()


def warn(notes: Iterable[str]) -> None:
    """Each note once per process, as an :class:`AMLConfigWarning`."""
    for note in notes:
        if note not in _warned:
            _warned.add(note)
            warnings.warn(note, AMLConfigWarning, stacklevel=4)
