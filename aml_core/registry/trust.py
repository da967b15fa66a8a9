"""Which entry-point probes have been seen to run safely, remembered across processes.

A probe of an entry-point plugin that has never been seen to finish (return or raise,
not crash or hang) in this Python runs first in its own interpreter
(:mod:`.isolation`), so that a probe that segfaults cannot kill an in-process
``aml_core.backends()`` or ``aml_core.area()``. Once it finished there, the verdict is
remembered per distribution version in ``$XDG_CACHE_HOME/aml/probes.json``
(``~/.cache/aml/probes.json``) and later processes probe it in-process at once. A probe
that crashed, hung or never started is not remembered (:meth:`ProbeTrust.record` is the
one place that decides): each process checks it in isolation again (the cause may be
the environment, ``AML_HIP_LIBRARY`` say) and does not run it in-process. An unreadable
or unwritable cache only costs the isolated check again.

**Trust rules** (docs/reliability.md, "Trust rules"; as ssh treats ``~/.ssh``): an entry
in the cache lets a probe skip its crash isolation, so the cache is believed only when
it is the user's own.

* The directory ``aml/`` and the file ``probes.json`` must be owned by the effective
  user and writable by no one else (no group or world write bit). The directory is
  opened without following a symbolic link, and the file is looked up in it without
  following one either (``O_NOFOLLOW``, relative to the opened directory).
* The file must be a regular file of at most :data:`MAX_CACHE_BYTES`, JSON nested at
  most :data:`MAX_DEPTH` deep, of the expected shape. A FIFO, a device, a directory, a
  symbolic link or a huge file is never opened for reading (so it cannot block).
* Anything else is ignored, with one note per reason (:attr:`ProbeTrust.notes`, shown
  by ``aml info --verbose``): the probes are checked in isolation again.
* Writes go to a new private file (mode 0600, ``O_EXCL``) in the same directory, renamed
  over ``probes.json``: a reader sees the old cache or the new one, never half of one.
  The directory is created with mode 0700; one that fails the rules is never written.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import sys
import threading
from pathlib import Path

from .manager import Plugin
from .probes import Outcome

__all__ = ["MAX_CACHE_BYTES", "MAX_DEPTH", "ProbeTrust", "cache_file"]

_VERSION = 1
#: The largest probe cache read (bytes); a larger file is ignored.
MAX_CACHE_BYTES = 1 << 20
#: The deepest JSON nesting read (the cache's own shape is 2 deep).
MAX_DEPTH = 4
_FILE = "probes.json"
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
}


def cache_file() -> Path | None:
    """``$XDG_CACHE_HOME/aml/probes.json``, ``~/.cache`` when XDG_CACHE_HOME is unset or
    not absolute (the XDG rule); None when there is no absolute home either (nothing is
    remembered then, and never in the current directory)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "aml" / _FILE if os.path.isabs(base) else None


def _key(plugin: Plugin, backend: str) -> str:
    assert plugin.entry_point is not None
    group, name = plugin.entry_point
    return f"{sys.executable} {plugin.distribution}=={plugin.version} {group}:{name} {backend}"


class _Untrusted(Exception):
    """The cache (or its directory) fails a trust rule: the message says which."""


def _owned_and_private(st: os.stat_result, what: str) -> None:
    """The trust rule on ownership and write bits (``what`` names the path)."""
    me = os.geteuid()
    if st.st_uid != me:
        raise _Untrusted(f"{what} is owned by uid {st.st_uid}, not by this user (uid {me})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.S_IMODE(st.st_mode)
        raise _Untrusted(f"{what} is writable by others (mode {mode:04o}; chmod go-w it)")


def _kind(st: os.stat_result) -> str:
    return _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")


def _open_dir(path: Path, *, create: bool) -> int:
    """The cache directory, opened without following a symbolic link and checked."""
    if create:
        os.makedirs(path.parent, mode=0o700, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if os.path.islink(path):
            raise _Untrusted(f"{path} is a symbolic link") from exc
        raise
    try:
        _owned_and_private(os.fstat(fd), str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _depth(text: str) -> int:
    """How deep the JSON arrays and objects of ``text`` nest (strings skipped)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def _read_file(dfd: int, where: Path) -> set[str]:
    """The remembered keys, from ``probes.json`` in the opened directory ``dfd``."""
    try:
        st = os.stat(_FILE, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return set()
    if not stat.S_ISREG(st.st_mode):
        raise _Untrusted(f"{where} is {_kind(st)}")
    _owned_and_private(st, str(where))
    if st.st_size > MAX_CACHE_BYTES:
        raise _Untrusted(f"{where} is larger than {MAX_CACHE_BYTES} bytes ({st.st_size})")
    # O_NONBLOCK: should the entry have become a FIFO since the check, the open does not wait.
    fd = os.open(_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    with os.fdopen(fd, "rb") as f:
        now = os.fstat(f.fileno())
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
            raise _Untrusted(f"{where} changed while it was read")
        raw = f.read(MAX_CACHE_BYTES + 1)
    if len(raw) > MAX_CACHE_BYTES:
        raise _Untrusted(f"{where} is larger than {MAX_CACHE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return set()  # corrupt: rewritten by the next remember()
    if _depth(text) > MAX_DEPTH:
        raise _Untrusted(f"{where} is JSON nested deeper than {MAX_DEPTH} levels")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return set()
    if not isinstance(data, dict) or data.get("version") != _VERSION:
        return set()
    found = data.get("finished")
    return {k for k in found if isinstance(k, str)} if isinstance(found, list) else set()


class ProbeTrust:
    """The remembered verdicts (read from the cache file when needed), under the trust
    rules of this module's docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notes: dict[str, None] = {}

    @property
    def notes(self) -> tuple[str, ...]:
        """Why the cache was ignored (or could not be written), one line per reason."""
        with self._lock:
            return tuple(self._notes)

    def _note(self, text: str) -> None:
        self._notes.setdefault(f"probe cache ignored: {text}", None)

    def trusted(self, plugin: Plugin, backend: str) -> bool:
        with self._lock:
            return _key(plugin, backend) in self._read(cache_file())

    def check(self) -> tuple[str, ...]:
        """Read the cache once (for ``aml info --verbose``) and return the notes."""
        with self._lock:
            self._read(cache_file())
        return self.notes

    def record(self, plugin: Plugin, backend: str, outcome: Outcome) -> None:
        """The one place that decides what is remembered: a probe that finished (returned
        or raised) in its own interpreter. One that crashed, hung, was stopped or never
        started (``finished`` false) is never remembered as safe."""
        if outcome.finished:
            self.remember(plugin, backend)

    def remember(self, plugin: Plugin, backend: str) -> None:
        """Record that this probe finished; best effort (never raises)."""
        path = cache_file()
        if path is None:
            return
        with self._lock:
            try:
                dfd = _open_dir(path.parent, create=True)
            except _Untrusted as exc:
                self._note(str(exc))
                return
            except OSError:
                return
            try:
                seen = self._read_in(dfd, path)
                key = _key(plugin, backend)
                if key not in seen:
                    seen.add(key)
                    _write(dfd, {"version": _VERSION, "finished": sorted(seen)})
            except OSError:
                pass
            finally:
                os.close(dfd)

    def _read(self, path: Path | None) -> set[str]:
        if path is None:
            return set()
        try:
            dfd = _open_dir(path.parent, create=False)
        except _Untrusted as exc:
            self._note(str(exc))
            return set()
        except OSError:
            return set()
        try:
            return self._read_in(dfd, path)
        finally:
            os.close(dfd)

    def _read_in(self, dfd: int, path: Path) -> set[str]:
        try:
            return _read_file(dfd, path)
        except _Untrusted as exc:
            self._note(str(exc))
        except OSError:
            pass  # unreadable: only costs the isolated check again
        return set()


def _write(dfd: int, data: dict[str, object]) -> None:
    """Write ``data`` as the cache: a new private file in the directory ``dfd``, renamed
    over ``probes.json`` (atomic; the temporary file is removed on any failure)."""
    tmp = f".probes-{secrets.token_hex(8)}.json"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, _FILE, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
