"""Child processes of the IPC, virtual-memory and dma-buf tests (and of the benchmarks): run
as ``python cuda_children.py ipc|ipc-devices|vmm|ipc-raw|dmabuf-recv ...``; each prints one
JSON line."""

from __future__ import annotations

import ctypes
import json
import os
import pickle
import random
import socket
import sys
import time
from typing import Any


def pattern(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def host_address(data: bytearray) -> int:
    return ctypes.addressof((ctypes.c_char * len(data)).from_buffer(data))


def read_device(rt: Any, ptr: int, n: int) -> bytes:
    out = bytearray(n)
    rt.memcpy(host_address(out), ptr, n)
    return bytes(out)


def write_device(rt: Any, ptr: int, data: bytes) -> None:
    src = bytearray(data)
    rt.memcpy(ptr, host_address(src), len(src))


def ipc(handle_hex: str, seed: int, reply_seed: int, opens: int) -> dict[str, Any]:
    """Open a handle (cold, then cached), check the exporter's bytes, write a reply,
    close as many times as opened."""
    import aml_cuda

    handle = pickle.loads(bytes.fromhex(handle_hex))
    rt = aml_cuda.get_runtime()
    rt.set_device(handle.device)
    rt.synchronize()  # the context exists before the clock starts
    t0 = time.perf_counter_ns()
    buf = aml_cuda.ipc_open(handle)
    cold = time.perf_counter_ns() - t0
    cached = []
    for _ in range(opens - 1):
        t0 = time.perf_counter_ns()
        again = aml_cuda.ipc_open(handle)
        cached.append(time.perf_counter_ns() - t0)
        assert again is buf
    area = buf.area
    assert area.open_count(buf) == opens
    assert buf.size == handle.size
    ok = read_device(rt, buf.ptr, handle.size) == pattern(seed, handle.size)
    write_device(rt, buf.ptr, pattern(reply_seed, handle.size))
    rt.synchronize()
    try:
        aml_cuda.ipc_open(pickle.loads(pickle.dumps(handle)))  # equal handle: cached too
        opens += 1
    finally:
        for i in range(opens):
            assert not buf.freed, i
            aml_cuda.ipc_close(buf)
    assert buf.freed
    cached.sort()
    return {
        "ok": ok,
        "cold_us": cold / 1000,
        "cached_us": cached[len(cached) // 2] / 1000 if cached else None,
        "pid": os.getpid(),
    }


def ipc_devices(handle_hex: str, device: int, seed: int, reply_seed: int) -> dict[str, Any]:
    """Current on ``device``, open a handle exported on another device (lazy peer access)
    twice (one mapping: the importer's cache, timed cold and cached), check the
    exporter's bytes and write a reply; current on the other device, open it again (its
    own mapping in that device's context) and read the reply through it; close everything
    from ``device`` (each mapping closed with its own device selected)."""
    import aml_cuda

    handle = pickle.loads(bytes.fromhex(handle_hex))
    n = min(handle.size, 1 << 20)
    rt = aml_cuda.get_runtime()
    other = 1 - device
    for d in (other, device):  # both contexts exist before the clock starts
        rt.set_device(d)
        rt.synchronize()
    t0 = time.perf_counter_ns()
    buf = aml_cuda.ipc_open(handle)
    cold = time.perf_counter_ns() - t0
    t0 = time.perf_counter_ns()
    same = aml_cuda.ipc_open(handle) is buf
    cached = time.perf_counter_ns() - t0
    ok = read_device(rt, buf.ptr, n) == pattern(seed, n)
    write_device(rt, buf.ptr, pattern(reply_seed, n))
    rt.synchronize()
    rt.set_device(other)
    again = aml_cuda.ipc_open(handle)
    second = again is not buf and again.ptr != buf.ptr
    reply = read_device(rt, again.ptr, n) == pattern(reply_seed, n)
    rt.set_device(device)
    for b in (buf, buf, again):
        aml_cuda.ipc_close(b)
    return {
        "ok": ok,
        "same_buffer": same,
        "second_mapping": second,
        "reply_through_second": reply,
        "devices": [buf.device, again.device],
        "current_after_close": rt.get_device(),
        "closed": buf.freed and again.freed,
        "cold_us": cold / 1000,
        "cached_us": cached / 1000,
    }


def ipc_raw(handle_hex: str, device: int | None = None) -> dict[str, Any]:
    """cudaIpcOpenMemHandle directly, for the benchmarks' reference, current on ``device``
    (default: the exporter's)."""
    import aml_cuda
    from cuda.bindings import runtime as rt_

    handle = pickle.loads(bytes.fromhex(handle_hex))
    rt = aml_cuda.get_runtime()
    rt.set_device(handle.device if device is None else device)
    rt.synchronize()
    raw = ctypes.create_string_buffer(handle.data, 64)
    native = rt_.cudaIpcMemHandle_t(_ptr=ctypes.addressof(raw))
    t0 = time.perf_counter_ns()
    err, ptr = rt_.cudaIpcOpenMemHandle(native, rt_.cudaIpcMemLazyEnablePeerAccess)
    cold = time.perf_counter_ns() - t0
    assert int(err) == 0, err
    (err,) = rt_.cudaIpcCloseMemHandle(ptr)
    assert int(err) == 0, err
    return {"ok": True, "cold_us": cold / 1000}


def vmm(sock_fd: int) -> dict[str, Any]:
    """Receive a POSIX fd over a UNIX socket (SCM_RIGHTS), import it, map it, check
    the exporter's bytes and write a reply."""
    import aml_cuda
    from aml_cuda import Access

    sock = socket.socket(fileno=sock_fd)
    msg, fds, _flags, _addr = socket.recv_fds(sock, 4096, 1)
    info = json.loads(msg)
    (fd,) = fds
    size, seed, reply_seed = info["size"], info["seed"], info["reply_seed"]
    device = int(info.get("device", 0))
    rt = aml_cuda.get_runtime()
    rt.set_device(device)
    with aml_cuda.virtual_memory(device) as vm:
        phys = vm.import_fd(fd, size)
        os.close(fd)
        props = vm.properties(phys)
        res = vm.reserve(size)
        vm.map(res.ptr, size, phys)
        vm.set_access(res.ptr, size, {device: Access.READWRITE})
        ok = read_device(rt, res.ptr, size) == pattern(seed, size)
        write_device(rt, res.ptr, pattern(reply_seed, size))
        rt.synchronize()
        vm.unmap(res.ptr, size)
        vm.release(phys)
        vm.address_free(res)
    sock.sendall(b"done")
    sock.close()
    return {
        "ok": ok,
        "type": props.type,
        "location_device": props.location_device,
        "handle_types": props.handle_types,
    }


def dmabuf_recv(sock_fd: int) -> dict[str, Any]:
    """Receive a dma-buf fd (SCM_RIGHTS) and read what the kernel says of it
    (/proc/self/fdinfo: the exporter's name and the size); no CUDA in this process."""
    with socket.socket(fileno=sock_fd) as sock:
        _, fds, _, _ = socket.recv_fds(sock, 16, 1)
    (fd,) = fds
    with open(f"/proc/self/fdinfo/{fd}") as f:
        info = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
    os.close(fd)
    return {
        "pid": os.getpid(),
        "exp_name": info.get("exp_name", "").strip(),
        "size": int(info.get("size", "0").strip() or 0),
    }


def main(argv: list[str]) -> None:
    cmd = argv[1]
    if cmd == "ipc":
        out = ipc(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    elif cmd == "ipc-devices":
        out = ipc_devices(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
    elif cmd == "ipc-raw":
        out = ipc_raw(argv[2], int(argv[3]) if len(argv) > 3 else None)
    elif cmd == "vmm":
        out = vmm(int(argv[2]))
    elif cmd == "dmabuf-recv":
        out = dmabuf_recv(int(argv[2]))
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv)
