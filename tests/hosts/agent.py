"""The peer agent of the two emulated hosts (:mod:`tests.support.two_hosts`): host ``b`` runs
it, and host ``a``'s tests start programs on ``b`` through it (a UCX peer, a verbs server,
Open MPI's daemon through :mod:`tests.hosts.rsh`), read what they print, signal them (the
"peer host going away" fault) and end the agent.

It listens on ``b``'s address on the guests' own virtual network only, and answers requests
that carry the pair's token (``AML_TWO_HOSTS_TOKEN``, random per boot). One JSON object a
line, each way:

* ``{"op": "run", "argv": [...], "env": {...}}``: answers ``{"pid": N}``, then ``{"out": LINE}``
  for every line the program prints (stdout and stderr), then ``{"rc": N}``. If the caller
  hangs up first, the program's process group is killed.
* ``{"op": "signal", "pid": N, "sig": S}``: signals a program it started (``{"ok": true}``).
* ``{"op": "exit"}``: the agent ends (host ``b``'s guest then powers off).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from tests.support.two_hosts import ADDRESSES, AGENT_PORT

__all__ = ["Remote", "connect", "serve", "stop"]

_started: dict[int, subprocess.Popen[str]] = {}


def _token() -> str:
    return os.environ["AML_TWO_HOSTS_TOKEN"]


def _send(stream: Any, message: dict[str, Any]) -> None:
    stream.write((json.dumps(message) + "\n").encode())
    stream.flush()


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        line = self.rfile.readline()
        if not line:
            return
        request = json.loads(line)
        if request.get("token") != _token():
            _send(self.wfile, {"error": "wrong token"})
            return
        op = request.get("op")
        if op == "exit":
            _send(self.wfile, {"ok": True})
            threading.Thread(target=self.server.shutdown, daemon=True).start()
        elif op == "signal":
            proc = _started.get(int(request["pid"]))
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, int(request["sig"]))
            _send(self.wfile, {"ok": proc is not None})
        elif op == "run":
            self._run(request)
        else:
            _send(self.wfile, {"error": f"unknown op {op!r}"})

    def _run(self, request: dict[str, Any]) -> None:
        proc = subprocess.Popen(
            request["argv"],
            env={**os.environ, **request.get("env", {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        _started[proc.pid] = proc
        try:
            _send(self.wfile, {"pid": proc.pid})
            assert proc.stdout is not None
            for out in proc.stdout:
                _send(self.wfile, {"out": out})
            _send(self.wfile, {"rc": proc.wait()})
        except OSError:  # the caller hung up: its program goes too
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            _started.pop(proc.pid, None)


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def serve(address: str | None = None, port: int = AGENT_PORT) -> None:
    """Answer requests until one says exit (host ``b``)."""
    with _Server((address or os.environ.get("AML_TWO_HOSTS_SELF", ADDRESSES["b"]), port), _Handler) as server:
        print(f"two-hosts agent: listening on {server.server_address}", flush=True)
        server.serve_forever()
    for proc in list(_started.values()):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    print("two-hosts agent: done", flush=True)


def _request(message: dict[str, Any], timeout: float = 30) -> socket.socket:
    sock = socket.create_connection(
        (os.environ.get("AML_TWO_HOSTS_PEER", ADDRESSES["b"]), AGENT_PORT), timeout
    )
    sock.sendall((json.dumps({**message, "token": _token()}) + "\n").encode())
    return sock


def connect(timeout: float = 300) -> None:
    """Wait until host ``b``'s agent answers (it boots alongside)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with _request({"op": "noop"}, timeout=5) as sock:
                sock.recv(1024)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def stop() -> None:
    """End host ``b``'s agent."""
    with contextlib.suppress(OSError), _request({"op": "exit"}) as sock:
        sock.recv(1024)


class Remote:
    """A program running on host ``b``: what it printed so far (read by a thread), its exit
    status once it ended."""

    def __init__(self, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.argv = list(argv)
        self._sock = _request({"op": "run", "argv": self.argv, "env": env or {}})
        self._sock.settimeout(None)
        self._stream = self._sock.makefile("rb")
        first = json.loads(self._stream.readline() or b"{}")
        if "pid" not in first:
            raise RuntimeError(f"host b's agent did not start {self.argv}: {first}")
        self.pid: int = first["pid"]
        self.lines: list[str] = []
        self.rc: int | None = None
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self._stream:
            message = json.loads(raw)
            with self._changed:
                if "out" in message:
                    self.lines.append(message["out"])
                elif "rc" in message:
                    self.rc = int(message["rc"])
                self._changed.notify_all()
        with self._changed:
            if self.rc is None:
                self.rc = -1  # the connection ended without a status
            self._changed.notify_all()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, mark: str, timeout: float = 300) -> str:
        """The first line that starts with ``mark`` (the rest of it); an error quoting the
        program if it ended or ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    if line.startswith(mark):
                        return line[len(mark) :].strip()
                left = deadline - time.monotonic()
                if self.rc is not None or left <= 0:
                    raise RuntimeError(
                        f"{self.argv} on host b printed no {mark!r} (rc {self.rc}): {self.output[-3000:]}"
                    )
                self._changed.wait(left)

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for it to end: whether it has."""
        self._reader.join(timeout)
        return not self._reader.is_alive()

    def wait(self, timeout: float = 300) -> int:
        """Its exit status (killed, and an error, past ``timeout``)."""
        self._reader.join(timeout)
        if self._reader.is_alive():
            self.kill()
            self._reader.join(30)
            raise TimeoutError(f"{self.argv} on host b ran past {timeout} s: {self.output[-3000:]}")
        assert self.rc is not None
        return self.rc

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal its process group (on host b)."""
        with _request({"op": "signal", "pid": self.pid, "sig": int(sig)}) as sock:
            sock.recv(1024)

    def close(self) -> None:
        """Hang up on the agent (a program still running there is killed)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._reader.join(30)
        with contextlib.suppress(OSError):
            self._stream.close()  # the socket's descriptor closes with its last file
            self._sock.close()

    def __enter__(self) -> Remote:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.rc is None:
            with contextlib.suppress(OSError):
                self.kill()
            with contextlib.suppress(Exception):
                self.wait(30)
        self.close()  # its connection's descriptor too (a test counts them)
        self.close()


@contextlib.contextmanager
def remote(argv: Sequence[str], env: dict[str, str] | None = None) -> Iterator[Remote]:
    with Remote(argv, env) as program:
        yield program


if __name__ == "__main__":
    serve()
    sys.exit(0)
