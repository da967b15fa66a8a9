"""A warm start for ``aml info``'s isolated probes: a fork of the command's own process,
made before any plugin is loaded and while no other thread runs, that forks one child
per isolated probe (issue 29, item 5).

Why: a probe in a fresh interpreter pays Python's start and aml-core's import again,
about what the command's own start costs; a fork of a process that has aml-core imported
pays neither. Each probe still runs in its own process (a child of the server, never of
the caller's threads), so a crash, a hang or junk in one is that probe's outcome and the
others and the command go on (:func:`.isolation.run_child` reads the child's output and
exit status as it reads a fresh interpreter's). Forked before plugins are loaded, a child
inherits no plugin's state (a GPU runtime initialised at import) and no lock held by
another thread; :func:`warm_probes` forks nothing when another thread already runs, or
when no distribution but aml-core declares a backend (aml-core's host backend is probed
in-process: a server would be a fork for nothing).

Protocol, over one ``AF_UNIX`` ``SOCK_SEQPACKET`` pair: the caller sends
``{"id": n, "args": [...]}`` with two file descriptors (``SCM_RIGHTS``: the write ends of
the probe's stdout and stderr pipes); the server forks a child that runs
:func:`.isolation.probe_child` with them as its fd 1 and 2, and sends ``{"id": n, "rc":
rc}`` when the child has ended (``rc`` as ``subprocess``'s ``returncode``: ``-11`` for
SIGSEGV). ``{"kill": n}`` kills child ``n`` if it has not ended. When the caller closes
its end, the server kills the children left and exits.

File descriptors 0, 1 and 2 are never the server's own: ``aml info 2>&-`` starts with
fd 2 closed, and a socket or pipe landing there would be taken for stderr (the command
points fd 1 at "stderr" while plugins load, so what they print went into the server's
socket, killing the server or failing the plugin's own write). The caller's socket and
pipes are moved above 2 (:func:`_above_std`); the server puts ``/dev/null`` on those of
0, 1, 2 not open, so nothing it opens or receives lands there and its children get the
probe's pipes as fd 1 and 2 whatever the command started with.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import selectors
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from typing import NoReturn

from .config import ENTRY_POINT_GROUP
from .manager import third_party_declared

__all__ = ["ForkServer", "active", "warm_probes"]

_MESSAGE = 65536


class ForkServer:
    """The caller's end of a running server (:meth:`fork` makes one)."""

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self.pid = pid
        self._sock = sock
        self._lock = threading.Lock()
        self._ended: dict[int, int] = {}
        self._lost = False
        self._changed = threading.Condition()
        self._next = 0
        self._reader: threading.Thread | None = None

    @classmethod
    def fork(cls) -> ForkServer | None:
        """Fork a server now; None where it cannot (no ``fork``, another thread running,
        the fork failed): the probes then start fresh interpreters."""
        if not hasattr(os, "fork") or threading.active_count() > 1:
            return None
        try:
            pair = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:
            return None
        try:
            ours, theirs = _socket_above_std(pair[0]), _socket_above_std(pair[1])
        except OSError:  # no file descriptor left
            for s in pair:
                s.close()
            return None
        for stream in (sys.stdout, sys.stderr):  # nothing buffered is written twice
            with contextlib.suppress(Exception):
                stream.flush()
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            return None
        if pid == 0:
            ours.close()
            _serve(theirs)
        theirs.close()
        return cls(ours, pid)

    def spawn(self, args: Sequence[str]) -> tuple[int, int, int] | None:
        """Start one probe child: ``(id, stdout, stderr)``, the read ends of its output
        (the caller closes them); None when the server is gone."""
        out_r, out_w, err_r, err_w = _pipes_above_std()
        with self._lock:
            n = self._next
            self._next += 1
            if self._reader is None:
                self._reader = threading.Thread(target=self._read, name="aml-probe-server", daemon=True)
                self._reader.start()
            try:
                request = json.dumps({"id": n, "args": list(args)}).encode()
                socket.send_fds(self._sock, [request], [out_w, err_w])
            except OSError:
                os.close(out_r)
                os.close(err_r)
                return None
            finally:
                os.close(out_w)
                os.close(err_w)
        return n, out_r, err_r

    def kill(self, n: int) -> None:
        """Kill child ``n`` (nothing if it has ended)."""
        with self._lock, contextlib.suppress(OSError):
            self._sock.send(json.dumps({"kill": n}).encode())

    def wait(self, n: int, timeout: float | None) -> int | None:
        """Child ``n``'s exit status, waiting at most ``timeout`` seconds; None if it has
        not ended by then or the server is gone (:attr:`lost`)."""
        with self._changed:
            self._changed.wait_for(lambda: n in self._ended or self._lost, timeout)
            return self._ended.get(n)

    @property
    def lost(self) -> bool:
        """The server has gone (it was killed, or it failed): no exit status will come."""
        with self._changed:
            return self._lost

    def _read(self) -> None:
        while True:
            try:
                msg = self._sock.recv(_MESSAGE)
                data = json.loads(msg) if msg else None
            except (OSError, ValueError):
                data = None
            with self._changed:
                if not isinstance(data, dict):
                    self._lost = True
                    self._changed.notify_all()
                    return
                self._ended[int(data["id"])] = int(data["rc"])
                self._changed.notify_all()

    def close(self) -> None:
        """Stop the server (it kills the children left); reaps it if it has exited."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with contextlib.suppress(OSError):
            os.waitpid(self.pid, os.WNOHANG)


_active: ForkServer | None = None


def active() -> ForkServer | None:
    """The server :func:`warm_probes` started, while it runs."""
    return _active


@contextlib.contextmanager
def warm_probes(group: str = ENTRY_POINT_GROUP) -> Iterator[ForkServer | None]:
    """Within it, isolated probes are forks of a server forked now (see the module);
    for a command that has aml-core imported and has loaded no plugin yet. Where no
    distribution but aml-core declares an entry point of ``group`` (its metadata read,
    no plugin loaded), no probe will be isolated: nothing is forked."""
    global _active
    if _active is not None:
        yield _active
        return
    server = _active = ForkServer.fork() if third_party_declared(group) else None
    try:
        yield server
    finally:
        _active = None
        if server is not None:
            server.close()


def _above_std(fd: int) -> int:
    """``fd``, or a close-on-exec copy of it numbered 3 or more (the original closed)
    where it is 0, 1 or 2: one of the standard streams was closed when it was opened."""
    if fd > 2:
        return fd
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    finally:
        os.close(fd)


def _socket_above_std(sock: socket.socket) -> socket.socket:
    if sock.fileno() > 2:
        return sock
    return socket.socket(fileno=_above_std(sock.detach()))


def _pipes_above_std() -> tuple[int, int, int, int]:
    """Two pipes, ``(out_r, out_w, err_r, err_w)``, none of them fd 0, 1 or 2."""
    fds: list[int] = []
    try:
        for _ in range(2):
            for fd in os.pipe():
                fds.append(_above_std(fd))
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    out_r, out_w, err_r, err_w = fds
    return out_r, out_w, err_r, err_w


def _serve(sock: socket.socket) -> NoReturn:
    """The server's loop (in the forked process; never returns)."""
    pids: dict[int, int] = {}  # child id -> pid, until it has ended
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command handles ^C; EOF ends us
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        try:
            os.fstat(2)  # the command's stderr, for a traceback of ours
        except OSError:
            os.dup2(devnull, 2)
        if devnull > 2:
            os.close(devnull)
        # 0, 1 and 2 are open now: what is opened or received below is 3 or more.
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        sel = selectors.DefaultSelector()
        sel.register(sock, selectors.EVENT_READ)
        sel.register(wake_r, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select():
                if key.fd == wake_r:
                    os.read(wake_r, 4096)
                    continue
                msg, fds, _, _ = socket.recv_fds(sock, _MESSAGE, 2)
                if not msg:
                    for fd in fds:
                        os.close(fd)
                    _stop(pids)
                request = json.loads(msg)
                if "kill" in request:
                    for fd in fds:
                        os.close(fd)
                    pid = pids.get(int(request["kill"]))
                    if pid is not None:
                        with contextlib.suppress(OSError):
                            os.kill(pid, signal.SIGKILL)
                    continue
                try:
                    pid = os.fork()
                except OSError:
                    pid = -1
                if pid == 0:
                    _child(request["args"], fds, (sock.fileno(), wake_r, wake_w))
                for fd in fds:
                    os.close(fd)
                if pid < 0:
                    sock.send(json.dumps({"id": request["id"], "rc": 127}).encode())
                else:
                    pids[int(request["id"])] = pid
            _reap(sock, pids)
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    _stop(pids)  # no child outlives the server


def _reap(sock: socket.socket, pids: dict[int, int]) -> None:
    """Tell the caller about every child that has ended."""
    while pids:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        for n, p in list(pids.items()):
            if p == pid:
                del pids[n]
                with contextlib.suppress(OSError):
                    sock.send(json.dumps({"id": n, "rc": os.waitstatus_to_exitcode(status)}).encode())


def _stop(pids: dict[int, int]) -> NoReturn:
    """The caller is gone or done: kill the children left and exit (not waiting for a
    child stuck in the kernel: init reaps it)."""
    for pid in pids.values():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    os._exit(0)


def _child(args: list[str], fds: list[int], server_fds: tuple[int, ...]) -> NoReturn:
    """A probe child: the request's pipes as stdout and stderr, then the probe."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in server_fds:
            os.close(fd)
        out, err = fds
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        _standard_streams()
        from .isolation import probe_child

        probe_child(args)
        code = 0
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _standard_streams() -> None:
    """In a probe child, a ``sys.stdin``/``stdout``/``stderr`` (and its ``__std*__``) that
    the command started without (its fd was closed) is made on fd 0, 1 or 2, as a fresh
    interpreter's would be: the plugin's ``print(file=sys.stderr)`` and the child's
    traceback reach the probe's stderr pipe."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        if getattr(sys, name) is not None and getattr(sys, f"__{name}__") is not None:
            continue
        stream = open(  # noqa: SIM115 (it lives on as sys.std*)
            fd,
            "r" if fd == 0 else "w",
            buffering=1 if fd == 2 else -1,
            errors="backslashreplace" if fd == 2 else "strict",
            closefd=False,
        )
        for attr in (name, f"__{name}__"):
            if getattr(sys, attr) is None:
                setattr(sys, attr, stream)
