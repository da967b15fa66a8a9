"""Which entry-point probes have been seen to run safely, remembered across processes.

A probe of an entry-point plugin that has never been seen to finish (return or raise,
not crash or hang) in this Python runs first in its own interpreter
(:mod:`.isolation`), so that a probe that segfaults cannot kill an in-process
``aml_core.backends()`` or ``aml_core.area()``. Once it finished there, the verdict is
remembered per distribution version in ``$XDG_CACHE_HOME/aml/probes.json``
(``~/.cache/aml/probes.json``) and later processes probe it in-process at once. A probe
that crashed or hung is not remembered: each process checks it in isolation again (the
cause may be the environment, ``AML_HIP_LIBRARY`` say) and does not run it in-process.
An unreadable or unwritable cache only costs the isolated check again.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
from pathlib import Path

from .manager import Plugin

__all__ = ["ProbeTrust", "cache_file"]

_VERSION = 1


def cache_file() -> Path | None:
    """``$XDG_CACHE_HOME/aml/probes.json``, ``~/.cache`` when XDG_CACHE_HOME is unset or
    not absolute (the XDG rule); None when there is no absolute home either (nothing is
    remembered then, and never in the current directory)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "aml" / "probes.json" if os.path.isabs(base) else None


def _key(plugin: Plugin, backend: str) -> str:
    assert plugin.entry_point is not None
    group, name = plugin.entry_point
    return f"{sys.executable} {plugin.distribution}=={plugin.version} {group}:{name} {backend}"


class ProbeTrust:
    """The remembered verdicts (read from the cache file when first needed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def trusted(self, plugin: Plugin, backend: str) -> bool:
        with self._lock:
            return _key(plugin, backend) in self._read(cache_file())

    def remember(self, plugin: Plugin, backend: str) -> None:
        """Record that this probe finished; best effort (never raises)."""
        path = cache_file()
        if path is None:
            return
        with self._lock:
            seen = self._read(path)
            key = _key(plugin, backend)
            if key in seen:
                return
            seen.add(key)
            with contextlib.suppress(OSError):
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".probes-", suffix=".json")
                try:
                    with os.fdopen(fd, "w") as f:
                        json.dump({"version": _VERSION, "finished": sorted(seen)}, f, indent=1)
                    os.replace(tmp, path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise

    @staticmethod
    def _read(path: Path | None) -> set[str]:
        if path is None:
            return set()
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return set()
        if not isinstance(data, dict) or data.get("version") != _VERSION:
            return set()
        found = data.get("finished")
        return {k for k in found if isinstance(k, str)} if isinstance(found, list) else set()
