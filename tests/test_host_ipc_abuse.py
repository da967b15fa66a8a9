"""Host IPC under load and abuse (issue 32, root causes 4 and 5, item 4): a hostile
exporter's refusal that is not UTF-8, a tampered socket name past sun_path, and an
exporter with many idle connections still serving a real importer at once. Loopback
only: every socket is an abstract AF_UNIX one of this machine."""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import time

import pytest

import aml_core
from aml_core.errors import AMLValueError
from aml_core.host import HostArea
from aml_core.host import ipc as host_ipc
from aml_core.ipc import IpcHandle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A hostile exporter: answers every connection with the refusal given in hex on argv.
_HOSTILE = r"""
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
sock.bind(b"\0" + sys.argv[1].encode())
sock.listen(8)
print("ready", flush=True)
while True:
    conn, _ = sock.accept()
    with conn:
        conn.recv(64)
        conn.send(bytes.fromhex(sys.argv[2]))
"""


def _handle(name: bytes, pid: int) -> IpcHandle:
    data = host_ipc._HEAD.pack(host_ipc._MAGIC, 0, bytes(16), 1, 1) + name
    return IpcHandle(backend="host", device=0, size=4096, data=data, pid=pid)


@pytest.mark.parametrize(
    "answer",
    [b"NO:\xff\xfe\xfd not utf-8", b"NO:\x80", b"NO:" + "refus\u00e9".encode("latin-1")],
)
def test_a_refusal_that_is_not_utf8_is_an_aml_value_error(answer: bytes) -> None:
    name = f"aml-test-hostile-{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOSTILE, name, answer.hex()], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(AMLValueError, match="refused this IPC handle") as info:
            aml_core.ipc_open(_handle(name.encode(), proc.pid))
        assert type(info.value) is AMLValueError
        assert "\\x" in str(info.value)  # the bytes shown, not decoded as something else
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("length", [108, 109, 200, 4096])
def test_a_socket_name_past_sun_path_is_tampered(length: int) -> None:
    with pytest.raises(AMLValueError, match=r"bad socket name|data is 1\.\.1024 bytes") as info:
        aml_core.ipc_open(_handle(b"a" * length, os.getppid()))
    assert type(info.value) is AMLValueError


def test_a_socket_name_of_107_bytes_is_looked_for() -> None:
    with pytest.raises(AMLValueError, match="no aml exporter answers") as info:
        aml_core.ipc_open(_handle(b"a" * 107, os.getppid()))
    assert type(info.value) is AMLValueError


_OPENER = (
    "import pickle, sys, time; from aml_core.host import ipc; ipc.TIMEOUT = {timeout}; "
    "import aml_core; t = time.monotonic(); b = aml_core.ipc_open(pickle.load(sys.stdin.buffer)); "
    "print(bytes(memoryview(b)[:4]).decode(), time.monotonic() - t)"
)


@pytest.mark.parametrize("idle", [8, 64, 300])
def test_idle_connections_never_starve_a_real_importer(idle: int) -> None:
    """Many local connections that connect and send nothing (bounded: 8 to 300, each
    AF_UNIX) while a second process opens a real handle: it opens at once (it used to
    wait for each idle one's 5 s, and failed after 30 s with "holds the GIL?")."""
    with HostArea(ipc=True) as area:
        buf = area.mmap(4096)
        memoryview(buf)[:4] = b"real"
        handle = area.ipc_export(buf).handle
        name = handle.data[host_ipc._HEAD.size :]
        conns = []
        try:
            for _ in range(idle):
                c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                conns.append(c)
                c.settimeout(5)
                for _ in range(500):  # the backlog full: the server is accepting, wait
                    try:
                        c.connect(b"\0" + name)
                        break
                    except BlockingIOError:
                        time.sleep(0.01)
            timeout = 10
            done = subprocess.run(
                [sys.executable, "-c", _OPENER.format(timeout=timeout)],
                input=pickle.dumps(handle),
                capture_output=True,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": ROOT},
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, done.stderr.decode()
            word, seconds = done.stdout.decode().split()
            assert word == "real"
            assert float(seconds) < timeout / 2
        finally:
            for c in conns:
                c.close()


def test_an_idle_connection_is_closed_after_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_ipc, "_SERVE_TIMEOUT", 0.3)
    with HostArea(ipc=True) as area:
        handle = area.ipc_export(area.mmap(4096)).handle
        name = handle.data[host_ipc._HEAD.size :]
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as c:
            c.settimeout(10)
            c.connect(b"\0" + name)
            t = time.monotonic()
            assert c.recv(64) == b""  # closed by the server, nothing sent
            assert time.monotonic() - t < 8
