"""A long-lived second process on the same driver double, for IPC tests that interleave
many opens and closes in another process with the test's own operations (issue 9).

Spawning a process per step is too slow for a state machine; an :class:`IpcPeer` is one
child Python, started once, that keeps its own state (the buffers it opened or exported)
and answers requests one JSON line at a time over its stdin/stdout:

* importer side: :meth:`IpcPeer.open` a handle exported by this process (the peer's
  backend ``ipc_open``), :meth:`~IpcPeer.read` and :meth:`~IpcPeer.write` through it,
  :meth:`~IpcPeer.close` one open;
* exporter side: :meth:`IpcPeer.export` maps a device buffer in the peer, fills it and
  exports it (for tests whose importer is this process), :meth:`~IpcPeer.free` it;
* the peer's double: :meth:`~IpcPeer.live` and :meth:`~IpcPeer.tracked` (its live
  counters, what its backend still tracks), :meth:`~IpcPeer.inject`,
  :meth:`~IpcPeer.forget` (close what it holds, drop its backend's runtime) and
  :meth:`~IpcPeer.reset` (start afresh, whatever state a failed test left).

An :class:`~aml_core.errors.AMLError` raised in the peer is raised again here, the same
class with the same code and native cause (AML errors pickle), with a note saying it came
from the peer; anything else the peer raises is a :class:`PeerCrash` with its traceback,
as is the peer dying.

The peer is ``python -m tests.support.ipc_peer MODULE:CLASS``: ``CLASS`` is the
backend's :class:`~tests.support.double_fixtures.DriverDouble` (its ``backend``,
``ctl``, ``live()``, ``tracked()``, ``forget()``, ``read_memory()`` and
``write_memory()``), built on the library its ``library_var`` names. Start it with the
double's child environment (``double.env()``), which puts the tests directory on the path.
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import json
import os
import pickle
import select
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from aml_core.errors import AMLError
from aml_core.ipc import IpcHandle

__all__ = ["IpcPeer", "PeerCrash", "serve"]

#: Seconds a request may take before the peer is taken for hung and killed.
TIMEOUT = 120.0


class PeerCrash(RuntimeError):
    """The peer raised something other than an AML error, or died, or hung."""


def _encode(obj: object) -> str:
    return base64.b64encode(pickle.dumps(obj)).decode()


def _decode(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))


class IpcPeer:
    """The parent's side: a started peer process (see the module doc); close it with
    :meth:`stop` or a ``with`` block."""

    def __init__(self, double: str, env: Mapping[str, str]) -> None:
        """``double``: ``"module:Class"`` of the backend's DriverDouble; ``env``: the
        double's child environment."""
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.ipc_peer", double],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=dict(env),
        )
        self.pid = self._proc.pid
        self.request("ping")

    # -- transport ------------------------------------------------------------------------
    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-3000:]

    def _fail(self, why: str) -> PeerCrash:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        return PeerCrash(f"the IPC peer {why} (rc {self._proc.returncode}):\n{self._stderr_tail()}")

    def request(self, op: str, **args: Any) -> Any:
        """Send one request and return its result (see the module doc for the errors)."""
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None
        assert stdout is not None
        if self._proc.poll() is not None:
            raise self._fail("is not running")
        try:
            stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
            stdin.flush()
        except BrokenPipeError:
            raise self._fail("died") from None
        ready, _, _ = select.select([stdout], [], [], TIMEOUT)
        if not ready:
            raise self._fail(f"did not answer {op!r} within {TIMEOUT:.0f} s")
        line = stdout.readline()
        if not line:
            raise self._fail(f"died during {op!r}")
        reply = json.loads(line)
        if "error" in reply:
            exc = _decode(reply["error"])
            assert isinstance(exc, AMLError)
            exc.add_note(f"raised in the IPC peer (pid {self.pid}) by {op!r}")
            raise exc
        if "crash" in reply:
            raise PeerCrash(f"the IPC peer raised during {op!r}:\n{reply['crash']}")
        return reply["ok"]

    # -- importer side --------------------------------------------------------------------
    def open(self, handle: IpcHandle) -> tuple[int, int]:
        """Open ``handle`` in the peer: (its reference there, the open count of the
        mapping; a second open of one handle is the same reference, counted twice)."""
        ref, opens = self.request("open", handle=_encode(handle))
        return int(ref), int(opens)

    def read(self, ref: int, size: int, offset: int = 0) -> bytes:
        """``size`` bytes at ``offset`` of the peer's buffer ``ref``."""
        return bytes.fromhex(self.request("read", ref=ref, size=size, offset=offset))

    def write(self, ref: int, data: bytes, offset: int = 0) -> None:
        """Write ``data`` at ``offset`` of the peer's buffer ``ref``."""
        self.request("write", ref=ref, data=data.hex(), offset=offset)

    def close(self, ref: int) -> bool:
        """Close one open of ``ref`` in the peer; whether that unmapped it (the last one)."""
        return bool(self.request("close", ref=ref))

    # -- exporter side --------------------------------------------------------------------
    def export(self, size: int, data: bytes = b"") -> tuple[int, IpcHandle]:
        """Map ``size`` bytes of device 0 in the peer, write ``data`` at its start and
        export it: (its reference there, the handle)."""
        ref, handle = self.request("export", size=size, data=data.hex())
        result = _decode(handle)
        assert isinstance(result, IpcHandle)
        return int(ref), result

    def free(self, ref: int) -> None:
        """Unmap the peer's exported buffer ``ref``."""
        self.request("free", ref=ref)

    # -- the peer's double ----------------------------------------------------------------
    def live(self) -> dict[str, int]:
        """The peer's double's live counters that are not zero."""
        return dict(self.request("live"))

    def tracked(self) -> dict[str, int]:
        """What the peer's backend still tracks (not zero)."""
        return dict(self.request("tracked"))

    def inject(self, function: str, error: int, skip: int = 0, times: int = 1) -> None:
        """Inject a native error into the peer's double."""
        self.request("inject", function=function, error=error, skip=skip, times=times)

    def forget(self) -> dict[str, int]:
        """Close what the peer still holds, drop its backend's runtime; its live counters
        then (not zero: a leak)."""
        return dict(self.request("forget"))

    def reset(self) -> None:
        """Start the peer afresh: drop what it holds (closing what it can), reset its double
        (freeing everything, clearing injections) and forget its backend's runtime."""
        self.request("reset")

    def stop(self) -> None:
        """End the peer (it closes what it holds first)."""
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.close()
                self._proc.wait(timeout=TIMEOUT)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._stderr.close()

    def __enter__(self) -> IpcPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- the peer process -------------------------------------------------------------------------
class _Peer:
    """What the peer holds: its double, the buffers it opened and those it exported."""

    def __init__(self, double: Any) -> None:
        from aml_core.specs import Kind

        self.double = double
        self.backend = double.backend.BACKEND
        self.opened: dict[int, Any] = {}
        self.exported: dict[int, Any] = {}
        self._area: Any = None
        self._kind = Kind.DEVICE

    def _buffer(self, ref: int) -> Any:
        buf = self.opened.get(ref) or self.exported.get(ref)
        if buf is None:
            raise KeyError(f"the peer holds no buffer {ref}")
        return buf

    def ping(self) -> int:
        return os.getpid()

    def open(self, handle: str) -> list[int]:
        buf = self.backend.ipc_open(_decode(handle))
        self.opened[buf.ptr] = buf
        return [buf.ptr, buf.area.open_count(buf)]

    def read(self, ref: int, size: int, offset: int) -> str:
        buf = self._buffer(ref)
        if not 0 <= offset <= offset + size <= buf.size:
            raise ValueError(f"{size} bytes at {offset} are not inside {buf.size}")
        return bytes(self.double.read_memory(buf.ptr + offset, size)).hex()

    def write(self, ref: int, data: str, offset: int) -> None:
        buf = self._buffer(ref)
        raw = bytes.fromhex(data)
        if not 0 <= offset <= offset + len(raw) <= buf.size:
            raise ValueError(f"{len(raw)} bytes at {offset} do not fit in {buf.size}")
        self.double.write_memory(buf.ptr + offset, raw)

    def close(self, ref: int) -> bool:
        buf = self.opened[ref]
        self.backend.ipc_close(buf)
        if buf.freed:
            del self.opened[ref]
        return bool(buf.freed)

    def export(self, size: int, data: str) -> list[Any]:
        if self._area is None or self._area.closed:
            self._area = self.backend.create_area(self._kind, 0)
        buf = self._area.mmap(size)
        self.exported[buf.ptr] = buf
        raw = bytes.fromhex(data)
        if raw:
            self.double.write_memory(buf.ptr, raw)
        return [buf.ptr, _encode(self._area.ipc_export(buf).handle)]

    def free(self, ref: int) -> None:
        buf = self.exported[ref]
        self._area.munmap(buf)
        del self.exported[ref]

    def live(self) -> dict[str, int]:
        return {k: v for k, v in self.double.live().items() if v}

    def tracked(self) -> dict[str, int]:
        return {k: v for k, v in self.double.tracked().items() if v}

    def inject(self, function: str, error: int, skip: int, times: int) -> None:
        self.double.ctl.inject(function, error, skip, times)

    def forget(self) -> dict[str, int]:
        self.release()
        self.double.forget()
        return self.live()

    def reset(self) -> None:
        with contextlib.suppress(AMLError):  # what cannot be closed, the double's reset frees
            self.release()
        self.opened.clear()
        self.exported.clear()
        self._area = None
        with contextlib.suppress(AMLError):
            self.double.forget()
        self.double.ctl.reset()
        self.double.forget()

    def release(self) -> None:
        """Close every open and free every export (errors propagate: a leak is a failure)."""
        for ref, buf in list(self.opened.items()):
            while not buf.freed:
                self.backend.ipc_close(buf)
            del self.opened[ref]
        if self._area is not None:
            self._area.close()
            self._area = None
        self.exported.clear()


def _load(spec: str) -> Any:
    module, _, name = spec.partition(":")
    cls = getattr(importlib.import_module(module), name)
    return cls(Path(os.environ[cls.library_var]))


def serve(spec: str, requests: IO[bytes], replies: IO[bytes]) -> None:
    """Answer requests until ``requests`` ends (the peer's main loop)."""
    peer = _Peer(_load(spec))
    handlers: dict[str, Callable[..., Any]] = {
        name: getattr(peer, name)
        for name in ("ping", "open", "read", "write", "close", "export", "free", "live", "tracked")
    }
    handlers.update(inject=peer.inject, forget=peer.forget, reset=peer.reset)
    for line in requests:
        request = json.loads(line)
        op = request.pop("op")
        try:
            reply: dict[str, Any] = {"ok": handlers[op](**request)}
        except AMLError as exc:
            reply = {"error": _encode(exc)}
        except Exception:
            reply = {"crash": traceback.format_exc()}
        replies.write(json.dumps(reply).encode() + b"\n")
        replies.flush()
    peer.release()


def main() -> int:
    # The protocol keeps the real stdout; anything else written there goes to stderr.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.argv[1], sys.stdin.buffer, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
