"""The registry's environment: ``AML_BACKEND``, ``AML_DISABLE_BACKENDS``,
``AML_PROBE_TIMEOUT`` and ``AML_INFO_TIMEOUT``, parsed once per load. Bad values never raise: they give an
:class:`AMLConfigWarning` and the default."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterable

import attrs

__all__ = [
    "CORE_DISTRIBUTION",
    "DEFAULT_INFO_TIMEOUT",
    "DEFAULT_PROBE_TIMEOUT",
    "ENTRY_POINT_GROUP",
    "ISOLATED_STARTUP_LIMIT",
    "MAX_PROBE_TIMEOUT",
    "STARTUP_SCALE_MAX",
    "AMLConfigWarning",
    "Settings",
    "settings",
    "isolated_parallelism",
    "startup_limit",
    "warn",
]

ENTRY_POINT_GROUP = "aml.backends"
CORE_DISTRIBUTION = "aml-core"
DEFAULT_PROBE_TIMEOUT = 5.0
#: The largest AML_PROBE_TIMEOUT accepted; larger values are lowered to it.
MAX_PROBE_TIMEOUT = 3600.0
#: How long an isolated probe's interpreter may take to start and load its plugin on an
#: idle machine; :func:`startup_limit` scales it with the load.
ISOLATED_STARTUP_LIMIT = 30.0
#: The most :func:`startup_limit` scales ISOLATED_STARTUP_LIMIT by.
STARTUP_SCALE_MAX = 8.0
#: How long ``aml info`` (``statuses(isolated=True)``) may probe, all backends together.
DEFAULT_INFO_TIMEOUT = 60.0


def isolated_parallelism() -> int:
    """How many isolated probes run at once: the CPUs this process may use, at least 8
    (a probe mostly waits on a driver) and at most 32 (each is an interpreter)."""
    return min(32, max(8, _cpus()))


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def startup_limit() -> float:
    """How long an isolated probe's interpreter may take to start and load its plugin:
    ISOLATED_STARTUP_LIMIT on an idle machine, scaled by how many runnable processes
    there are per CPU (the one-minute load average) on a busy one, at most
    STARTUP_SCALE_MAX times. A child not started by then is "slow", never "broken"."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    scale = load / _cpus() if math.isfinite(load) else 1.0
    return ISOLATED_STARTUP_LIMIT * min(STARTUP_SCALE_MAX, max(1.0, scale))


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
    #: ``AML_INFO_TIMEOUT``: the time ``aml info`` gives all its probes together.
    info_timeout: float = DEFAULT_INFO_TIMEOUT
    #: Whether the user set ``AML_INFO_TIMEOUT`` (to a usable value): then a probe's
    #: interpreter may take all of it to start, whatever :func:`startup_limit` says.
    info_timeout_given: bool = False


def settings() -> Settings:
    """Read ``AML_BACKEND``, ``AML_DISABLE_BACKENDS``, ``AML_PROBE_TIMEOUT`` and
    ``AML_INFO_TIMEOUT``."""
    notes: list[str] = []
    timeout = _seconds("AML_PROBE_TIMEOUT", DEFAULT_PROBE_TIMEOUT, notes)
    given_info = _user_seconds("AML_INFO_TIMEOUT", DEFAULT_INFO_TIMEOUT, notes)
    disabled = frozenset(
        p.strip() for p in os.environ.get("AML_DISABLE_BACKENDS", "").replace(",", " ").split() if p.strip()
    )
    forced = os.environ.get("AML_BACKEND", "").strip() or None
    return Settings(
        forced=forced,
        disabled=disabled,
        timeout=timeout,
        warnings=tuple(notes),
        info_timeout=DEFAULT_INFO_TIMEOUT if given_info is None else given_info,
        info_timeout_given=given_info is not None,
    )


def _seconds(name: str, default: float, notes: list[str]) -> float:
    """A positive, finite number of seconds from the environment variable ``name``, at
    most MAX_PROBE_TIMEOUT; a bad value adds a note and gives ``default``."""
    value = _user_seconds(name, default, notes)
    return default if value is None else value


def _user_seconds(name: str, default: float, notes: list[str]) -> float | None:
    """:func:`_seconds`' value where the user's setting is used (lowered to
    MAX_PROBE_TIMEOUT, perhaps); None where ``name`` is unset or bad (a note says the
    ``default`` is used)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        notes.append(f"{name}={raw!r} is not a positive, finite number of seconds; using {default:g} s")
        return None
    if value > MAX_PROBE_TIMEOUT:
        notes.append(f"{name}={raw!r} is above {MAX_PROBE_TIMEOUT:g} s; using {MAX_PROBE_TIMEOUT:g} s")
        return MAX_PROBE_TIMEOUT
    return value


_warned: set[str] = set()


def warn(notes: Iterable[str]) -> None:
    """Each note once per process, as an :class:`AMLConfigWarning`."""
    for note in notes:
        if note not in _warned:
            _warned.add(note)
            warnings.warn(note, AMLConfigWarning, stacklevel=4)
