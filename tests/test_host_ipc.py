"""Host IPC: memfd buffers of ``HostArea(ipc=True)`` shared with other processes
(aml_core.host.ipc): the conformance kit's IPC class, NUMA policy seen by the importer,
pooled blocks, lifetimes, tampered handles and descriptor leaks, each with a real second
process."""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

import aml_core
from aml_core.errors import AMLError, AMLMemoryError, AMLNotSupported, AMLTypeError, AMLValueError
from aml_core.host import HostArea, Policy
from aml_core.host.ipc import HostIpcImportArea
from aml_core.ipc import IpcHandle
from aml_core.pool import pool
from aml_core.specs import Capability
from aml_core.testing import AreaConformance, IpcConformance, PooledIpcConformance

from .support.child import pickled, unpickled

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The importer: a second Python answering one JSON request per line (ops below).
_PEER = r"""
import json, os, sys
import aml_core
from aml_core.errors import AMLError
from aml_core.host import policy_of
from tests.support.child import pickled, unpickled

held = {}
for line in sys.stdin:
    req = json.loads(line)
    op = req.pop("op")
    try:
        if op == "open":
            buf = aml_core.ipc_open(unpickled(req["handle"]))
            held[buf.ptr] = buf
            out = [buf.ptr, buf.size, buf.readonly, buf.area.backend]
        elif op == "read":
            with memoryview(held[req["ref"]]) as view:
                out = bytes(view[req["offset"] : req["offset"] + req["size"]]).hex()
        elif op == "write":
            data = bytes.fromhex(req["data"])
            with memoryview(held[req["ref"]]) as view:
                view[req["offset"] : req["offset"] + len(data)] = data
            out = None
        elif op == "policy":
            mode, nodes = policy_of(held[req["ref"]].ptr)
            out = [mode.name, list(nodes)]
        elif op == "close":
            buf = held.pop(req["ref"])
            buf.area.munmap(buf)
            out = buf.freed
        elif op == "fds":
            out = len(os.listdir("/proc/self/fd"))
        reply = {"ok": out}
    except AMLError as exc:
        reply = {"error": pickled(exc)}
    print(json.dumps(reply), flush=True)
"""


class Peer:
    """A second process that opens this process's handles (see ``_PEER``)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _PEER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": ROOT},
        )

    def request(self, op: str, **args: Any) -> Any:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the peer died (rc {self.proc.wait()})"
        reply = json.loads(line)
        if "error" in reply:
            exc = unpickled(reply["error"])
            assert isinstance(exc, AMLError)
            raise exc
        return reply["ok"]

    def open(self, handle: IpcHandle) -> int:
        ref, size, _, backend = self.request("open", handle=pickled(handle))
        assert (size, backend) == (handle.size, "host")
        return int(ref)

    def read(self, ref: int, size: int, offset: int = 0) -> bytes:
        return bytes.fromhex(self.request("read", ref=ref, size=size, offset=offset))

    def write(self, ref: int, data: bytes, offset: int = 0) -> None:
        self.request("write", ref=ref, data=data.hex(), offset=offset)

    def stop(self) -> None:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    p = Peer()
    yield p
    p.stop()


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _fd_links() -> list[str]:
    links = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile (the listing's own one)
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
    return links


def memfds() -> int:
    """This process's descriptors of aml's memfds."""
    return sum(link.startswith("/memfd:aml-host") for link in _fd_links())


def sockets() -> int:
    """This process's sockets (the exporter's listening socket and connections). Not
    every descriptor: pytest's capture opens temporary files of its own meanwhile."""
    return sum(link.startswith("socket:") for link in _fd_links())


# -- the kit -------------------------------------------------------------------------------
class TestHostIpcConformance(PooledIpcConformance):
    """Export, open in a child process (found through the host backend's entry point),
    write there, read back here; a pooled block that is not its slab's first too."""

    @pytest.fixture
    def area(self) -> Iterator[HostArea]:
        area = HostArea(ipc=True)
        yield area
        area.close()


class TestHostIpcBoundConformance(IpcConformance):
    @pytest.fixture
    def area(self) -> Iterator[HostArea]:
        area = HostArea("bind", [0], ipc=True)
        yield area
        area.close()


class TestHostIpcArea(AreaConformance):
    """An ipc area is an area like the others (every buffer a memfd)."""

    sizes = (1, 4096, 65537)
    rounds = 10

    @pytest.fixture
    def area(self) -> Iterator[HostArea]:
        area = HostArea("interleave", [0], ipc=True)
        yield area
        area.close()


# -- sharing ---------------------------------------------------------------------------------
def test_writes_cross_both_ways(peer: Peer) -> None:
    with HostArea(ipc=True) as area:
        buf = area.mmap(3 * mmap.PAGESIZE + 5)
        with memoryview(buf) as view:
            view[-5:] = b"tail!"
        ref = peer.open(area.ipc_export(buf).handle)
        assert peer.read(ref, 5, buf.size - 5) == b"tail!"
        peer.write(ref, b"from the peer", 100)
        with memoryview(buf) as view:
            assert bytes(view[100:113]) == b"from the peer"
        assert peer.request("close", ref=ref) is True


@pytest.mark.parametrize("policy", [Policy.BIND, Policy.INTERLEAVE, Policy.PREFERRED])
def test_the_importer_sees_the_exporters_numa_policy(peer: Peer, policy: Policy) -> None:
    """The exporter's mbind is the shmem file's shared policy: the importer's mapping
    reports it (get_mempolicy), and pages it touches first are placed by it."""
    with HostArea(policy, [0], ipc=True) as area:
        buf = area.mmap(1 << 20)
        ref = peer.open(area.ipc_export(buf).handle)
        assert peer.request("policy", ref=ref) == [policy.name, [0]]
        peer.write(ref, b"\1" * 4096)  # the peer touches the first page: it is placed then
        with memoryview(buf) as view:  # map it here too (move_pages reads this process's tables)
            assert view[4095] == 1
        assert area.page_nodes(buf)[0] == 0
        peer.request("close", ref=ref)


def test_exporter_memory_lives_until_the_importer_lets_go(peer: Peer) -> None:
    area = HostArea(ipc=True)
    buf = area.mmap(8192)
    with memoryview(buf) as view:
        view[:6] = b"stays!"
    ref = peer.open(area.ipc_export(buf).handle)
    area.munmap(buf)
    area.close()
    assert peer.read(ref, 6) == b"stays!", "the exporter's munmap took the pages from the importer"
    peer.write(ref, b"still")
    assert peer.request("close", ref=ref) is True


def test_a_pooled_block_is_shared_as_its_slab_and_offset(peer: Peer) -> None:
    with HostArea(ipc=True) as area:
        p = pool(area)
        first, second = p.mmap(1000), p.mmap(5000)
        handle = p.ipc_export(second).handle
        assert handle.offset > 0
        assert handle.size == 5000
        with memoryview(second) as view:
            view[:4] = b"blk2"
        ref = peer.open(handle)
        assert peer.read(ref, 4) == b"blk2"
        peer.write(ref, b"back", 4996)
        with memoryview(second) as view:
            assert bytes(view[4996:]) == b"back"
        peer.request("close", ref=ref)
        p.munmap(first)
        p.munmap(second)
        p.close()


def test_a_read_only_buffer_is_read_only_in_the_importer(peer: Peer) -> None:
    with HostArea(ipc=True) as area:
        buf = area.mmap(4096, {"prot": mmap.PROT_READ})
        ref, _, readonly, _ = peer.request("open", handle=pickled(area.ipc_export(buf).handle))
        assert readonly is True
        assert peer.read(ref, 4) == bytes(4)
        peer.request("close", ref=ref)


# -- refusals --------------------------------------------------------------------------------
def test_the_registry_makes_ipc_areas() -> None:
    with aml_core.area("host", ipc=True) as area:
        assert isinstance(area, HostArea)
        assert area.capabilities & Capability.IPC
        assert area.ipc_export(area.mmap(64)).handle.backend == "host"
        assert "ipc" in repr(area)


def test_an_area_without_ipc_does_not_export() -> None:
    with HostArea(shared=True) as area:
        assert not area.capabilities & Capability.IPC
        buf = area.mmap(4096)
        with pytest.raises(AMLNotSupported, match="ipc=True"):
            area.ipc_export(buf)


def test_an_ipc_area_refuses_files_and_private_mappings(tmp_path: Any) -> None:
    with HostArea(ipc=True) as area, open(tmp_path / "f", "wb+") as f:
        f.truncate(4096)
        with pytest.raises(AMLValueError, match="ipc"):
            area.mmap(4096, {"fd": f.fileno()})
        with pytest.raises(AMLValueError, match="ipc"):
            area.mmap(4096, {"shared": False})
    with pytest.raises(AMLTypeError):
        HostArea(ipc=1)  # type: ignore[arg-type]


def _tampered(handle: IpcHandle) -> dict[str, tuple[IpcHandle, str]]:
    """Each field of a handle changed: (the handle, what the refusal says)."""
    data = handle.data  # magic 8, flags 1, token 16, inode 8, device 8, socket name
    return {
        "pid": (attrs.evolve(handle, pid=os.getppid()), "serves its socket"),
        "size": (attrs.evolve(handle, size=handle.size + 2 * mmap.PAGESIZE), "exported memory has 4096"),
        "offset": (attrs.evolve(handle, offset=1 << 30), "at offset 1073741824"),
        "token": (attrs.evolve(handle, data=data[:9] + bytes(16) + data[25:]), "does not serve"),
        "inode": (
            attrs.evolve(handle, data=data[:25] + (1).to_bytes(8, "little") + data[33:]),
            "another file",
        ),
        "socket": (attrs.evolve(handle, data=data[:41] + b"aml-ipc-nobody"), "no aml exporter answers"),
        "magic": (attrs.evolve(handle, data=b"\xab" * 64), "bad magic"),
        "flags": (attrs.evolve(handle, data=data[:8] + b"\x80" + data[9:]), "unknown flags"),
    }


def test_tampered_handles_are_refused_and_leak_nothing(peer: Peer) -> None:
    with HostArea(ipc=True) as area:
        buf = area.mmap(4096)
        handle = area.ipc_export(buf).handle
        before = peer.request("fds")
        for what, (bad, why) in _tampered(handle).items():
            with pytest.raises(AMLValueError, match=why) as info:
                peer.open(bad)
            assert info.type is AMLValueError, (what, info.value)
        assert peer.request("fds") == before, "a refused handle left a descriptor open in the importer"
        ref = peer.open(handle)  # the genuine one still opens
        peer.request("close", ref=ref)


def test_a_closed_export_or_a_freed_buffer_is_refused(peer: Peer) -> None:
    with HostArea(ipc=True) as area:
        buf = area.mmap(4096)
        closed = area.ipc_export(buf)
        stale = closed.handle
        closed.close()
        live = area.ipc_export(buf).handle
        with pytest.raises(AMLValueError, match="closed"):
            peer.open(stale)
        peer.request("close", ref=peer.open(live))  # another export of it still serves
        area.munmap(buf)
        with pytest.raises(AMLValueError, match="freed"):
            peer.open(live)
        with pytest.raises(AMLValueError):
            area.ipc_export(buf)


def test_a_handle_is_not_opened_by_its_exporter_nor_by_another_backend() -> None:
    with HostArea(ipc=True) as area:
        handle = area.ipc_export(area.mmap(4096)).handle
        with pytest.raises(AMLValueError, match="exported it"):
            aml_core.ipc_open(handle)
        importer = HostIpcImportArea()
        with pytest.raises(AMLValueError, match="exported by 'cuda'"):
            importer.open(attrs.evolve(handle, backend="cuda"))
        with pytest.raises(AMLValueError, match=r"use aml_core\.ipc_open"):
            importer.mmap(4096)
        importer.close()


# -- descriptors -----------------------------------------------------------------------------
def test_no_descriptor_leaks(peer: Peer) -> None:
    """The exporter holds one memfd per live buffer, and none once it is freed; the
    importer holds none (its mapping keeps the file); closing the area leaves no more
    sockets than before its buffers."""
    area = HostArea(ipc=True)
    warm = area.mmap(4096)
    area.ipc_export(warm)  # the server thread and its socket start with the first export
    area.munmap(warm)
    start, mem_start, peer_start = sockets(), memfds(), peer.request("fds")
    bufs = [area.mmap(4096 * (i + 1)) for i in range(4)]
    assert memfds() == mem_start + 4
    refs = [peer.open(area.ipc_export(b).handle) for b in bufs]
    assert peer.request("fds") == peer_start
    for ref in refs:
        peer.request("close", ref=ref)
    for b in bufs[:2]:
        area.munmap(b)
    assert memfds() == mem_start + 2
    area.close()
    assert memfds() == mem_start
    # An importer's connection may still be open on the server side until the importer
    # closes it or its idle deadline (5 s) passes; then no descriptor is left over.
    deadline = time.monotonic() + 10
    while fds() > start and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sockets() <= start
    assert peer.request("fds") == peer_start


def test_huge_pages_without_any_configured_leave_no_descriptor() -> None:
    with HostArea(ipc=True, huge_pages=True) as area:
        before = fds()
        try:
            buf = area.mmap(4096)
        except AMLMemoryError:
            assert fds() == before
        else:  # huge pages are configured here: the memfd is on hugetlbfs
            assert buf.native.length % area.huge_page_size == 0
            buf.free()


_FORKED = r"""
import os, pickle, subprocess, sys
from aml_core.host import HostArea

area = HostArea(ipc=True)
area.ipc_export(area.mmap(4096))  # the parent's server runs
pid = os.fork()
if pid == 0:  # the child serves its own exports, from a server of its own
    buf = area.mmap(4096)
    with memoryview(buf) as view:
        view[:5] = b"child"
    handle = area.ipc_export(buf).handle
    opener = (
        "import aml_core, pickle, sys; b = aml_core.ipc_open(pickle.load(sys.stdin.buffer)); "
        "print(bytes(memoryview(b)[:5]).decode())"
    )
    out = subprocess.run([sys.executable, "-c", opener], input=pickle.dumps(handle), capture_output=True)
    os._exit(0 if handle.pid == os.getpid() and out.stdout.strip() == b"child" else 1)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_forked_child_exports_from_a_server_of_its_own() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _FORKED],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        timeout=120,
        check=False,
    )
    assert (proc.returncode, proc.stdout.strip()) == (0, "0"), proc.stderr
