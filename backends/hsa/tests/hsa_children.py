"""Child processes of the aml-hsa tests (run with the double's environment), as
``python hsa_children.py TASK``:

``ipc``: read a pickled IpcHandle on stdin, open it twice (one mapping: the importer
cache), check the exporter's bytes, write its own, close both opens, print ``OK``.
``ro-write`` / ``rw-write``: map one granule, grant the GPU agent RO (or RW) and write to it
from the CPU: with RO the page protection makes the write fault (the parent sees SIGSEGV).
``import``: receive a dma-buf fd over the Unix socket on fd ``argv[2]``, import it twice,
map one import, check the bytes the parent wrote, release everything, print ``OK``.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import socket
import sys

import aml_hsa
from aml_hsa import Permission


def ipc() -> None:
    """The importer of the IPC test: reads a pickled IpcHandle on stdin, opens it twice (one
    mapping: the importer cache), checks the exporter's bytes, writes its own, closes both
    opens and prints ``OK``."""
    handle = pickle.loads(sys.stdin.buffer.read())
    first = aml_hsa.ipc_open(handle)
    second = aml_hsa.ipc_open(handle)
    assert first is second
    rt = aml_hsa.get_runtime()
    out = ctypes.create_string_buffer(handle.size)
    rt.memory_copy(ctypes.addressof(out), first.ptr, handle.size)
    assert out.raw == bytes(range(256)) * (handle.size // 256), out.raw[:16]
    reply = ctypes.create_string_buffer(b"child", 5)
    rt.memory_copy(first.ptr, ctypes.addressof(reply), 5)
    aml_hsa.ipc_close(second)
    aml_hsa.ipc_close(first)
    print("OK", first.device, flush=True)


def ro_write(permission: Permission) -> None:
    pool = aml_hsa.device_pool(0)
    g = pool.granule
    gpu = aml_hsa.get_runtime().gpus[0]
    va = aml_hsa.address_reserve(g)
    h = aml_hsa.handle_create(pool, g)
    aml_hsa.map(va, g, h)
    aml_hsa.set_access(va, g, [(gpu, permission)])
    print("WRITING", flush=True)
    ctypes.memset(va, 0x5A, 16)
    print("WROTE", flush=True)
    aml_hsa.unmap(va, g)
    aml_hsa.handle_release(h)
    aml_hsa.address_free(va, g)


def import_twice(sock_fd: int, size: int) -> None:
    rt = aml_hsa.get_runtime()
    with socket.socket(fileno=sock_fd) as sock:
        _, fds, _, _ = socket.recv_fds(sock, 16, 1)
    (fd,) = fds
    first = aml_hsa.import_shareable_handle(fd)
    second = aml_hsa.import_shareable_handle(fd)
    os.close(fd)
    pool, kind = aml_hsa.get_alloc_properties_from_handle(first)
    assert pool.agent.device == 0, pool
    va = aml_hsa.address_reserve(size)
    aml_hsa.map(va, size, first)
    aml_hsa.set_access(va, size, [(rt.gpus[0], Permission.RW)])
    out = ctypes.create_string_buffer(16)
    rt.memory_copy(ctypes.addressof(out), va, 16)
    assert out.raw == bytes(range(16)), out.raw
    aml_hsa.unmap(va, size)
    aml_hsa.address_free(va, size)
    aml_hsa.handle_release(first)
    aml_hsa.handle_release(second)
    print("OK", int(kind), flush=True)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "ipc":
        ipc()
        sys.exit(0)
    if what in ("ro-write", "rw-write"):
        ro_write(Permission.RO if what == "ro-write" else Permission.RW)
    elif what == "import":
        import_twice(int(sys.argv[2]), int(sys.argv[3]))
    else:
        raise SystemExit(f"unknown child task {what!r}")
    live = aml_hsa.get_runtime().live()
    assert live == dict.fromkeys(live, 0), live
