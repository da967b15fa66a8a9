"""IPC of device memory between two real processes (docs/aml-contract.md#hip-ipc), the
conformance kit's IPC classes (a pooled block that is not its slab's first, opened at its
offset), and virtual memory shared through a POSIX file descriptor sent over a UNIX socket
(SCM_RIGHTS)."""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import aml_cuda
import pytest
from cuda_children import pattern, read_device, write_device
from cuda_helpers import HERE, child_env

from aml_core.area import Area
from aml_core.errors import AMLError, AMLNotSupported, AMLTypeError, AMLValueError
from aml_core.testing import PooledIpcConformance

pytestmark = pytest.mark.gpu

CHILD = os.path.join(HERE, "cuda_children.py")


def run_child(*args: str, pass_fds: tuple[int, ...] = ()) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, CHILD, *args],
        check=False,
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
        pass_fds=pass_fds,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


class TestCudaIpcConformance(PooledIpcConformance):
    """The kit's IPC classes on a real GPU: export device memory here
    (``cudaIpcGetMemHandle``), open it in a child process (``cudaIpcOpenMemHandle``, the
    import aml-cuda shares with the other GPU backends, aml_core.gpu.ipc), write there
    and read back here through the area's copies; a pooled block that is not its slab's
    first too (the handle's offset honoured). Off-GPU the directory's conftest skips it
    with the probe's reason (marked ``gpu`` with the module)."""

    @pytest.fixture
    def area(self, rt: Any) -> Iterator[Area]:
        area = aml_cuda.create(0)
        yield area
        area.close()

    def child_env(self, area: Area) -> dict[str, str]:
        return child_env()


def test_ipc_between_processes(rt: Any) -> None:
    size = (8 << 20) + 100
    with aml_cuda.create(0) as area:
        buf = area.mmap(size)
        area.write(buf, pattern(1, size))
        export = area.ipc_export(buf)
        handle = export.handle
        assert handle.backend == "cuda"
        assert handle.size == size
        assert len(handle.data) == 64
        assert pickle.loads(pickle.dumps(handle)) == handle
        with pytest.raises(AMLValueError, match="process that exported"):
            aml_cuda.ipc_open(handle)
        got = run_child("ipc", pickle.dumps(handle).hex(), "1", "2", "4")
        assert got["ok"], "the child did not read the exporter's bytes"
        assert got["pid"] != os.getpid()
        assert area.read(buf) == pattern(2, size), "the parent does not see the child's reply"
        # Two children one after the other: each maps it afresh.
        again = run_child("ipc", pickle.dumps(handle).hex(), "2", "3", "2")
        assert again["ok"]
        assert area.read(buf) == pattern(3, size)
        area.munmap(buf)
        # A freed export raises.
        assert export.closed
        with pytest.raises(AMLValueError, match="freed"):
            _ = export.handle


def test_new_handle_after_free_and_realloc(rt: Any) -> None:
    size = 2 << 20
    with aml_cuda.create(0) as area:
        first = area.mmap(size)
        h1 = area.ipc_export(first).handle
        ptr = first.ptr
        area.munmap(first)
        second = area.mmap(size)
        h2 = area.ipc_export(second).handle
        # cudaIpcGetMemHandle: a new allocation (even at the same address) gets a new handle.
        assert h2.data != h1.data, f"same handle for a new allocation (same address: {second.ptr == ptr})"
        area.munmap(second)


def test_ipc_export_rules(rt: Any) -> None:
    with aml_cuda.create(0, aml_cuda.CudaFlags.ALLOC_UNIFIED) as managed:
        buf = managed.mmap(4096)
        with pytest.raises(AMLNotSupported):
            managed.ipc_export(buf)
    with aml_cuda.create(0) as area:
        buf = area.mmap(1 << 20)
        with pytest.raises(AMLValueError):
            area.ipc_export(buf.ptr + 4096)  # not a base pointer of this area
        export = area.ipc_export(buf.ptr)
        export.close()
        with pytest.raises(AMLValueError, match="closed"):
            _ = export.handle
        area.munmap(buf)
    with pytest.raises(AMLTypeError):
        aml_cuda.ipc_open(b"\0" * 64)  # type: ignore[arg-type]


def test_ipc_open_of_a_garbage_handle_fails_cleanly() -> None:
    from aml_core.gpu import IpcHandle

    bogus = IpcHandle(backend="cuda", device=0, size=4096, data=b"\x01" * 64, pid=os.getpid() + 1)
    with pytest.raises(AMLError) as info:
        aml_cuda.ipc_open(bogus)
    assert info.value.native is not None
    assert info.value.native.function == "cudaIpcOpenMemHandle"


def test_vmm_fd_between_processes(rt: Any) -> None:
    with aml_cuda.virtual_memory(0) as vm:
        g = vm.granularity()
        size = 4 * g
        phys = vm.create(size, exportable=True)
        res = vm.reserve(size)
        vm.map(res.ptr, size, phys)
        vm.set_access(res.ptr, size, aml_cuda.Access.READWRITE)
        write_device(rt, res.ptr, pattern(11, size))
        fd = vm.export_fd(phys)
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proc = subprocess.Popen(
                [sys.executable, CHILD, "vmm", str(child.fileno())],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env(),
                pass_fds=(child.fileno(),),
            )
            child.close()
            msg = json.dumps({"size": size, "seed": 11, "reply_seed": 12}).encode()
            socket.send_fds(parent, [msg], [fd])
            os.close(fd)
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err[-4000:]
            assert parent.recv(16) == b"done"
        finally:
            parent.close()
        got = json.loads(out.strip().splitlines()[-1])
        assert got["ok"], "the child did not read the exporter's bytes"
        assert got["type"] == 1
        assert got["location_device"] == 0
        # The importer's handle reports no requested handle types (CUDA fills the
        # exporter's request only); the exporter's says POSIX file descriptor.
        assert got["handle_types"] in (0, 1)
        assert vm.properties(phys).handle_types == 1
        assert read_device(rt, res.ptr, size) == pattern(12, size), (
            "the parent does not see the child's reply"
        )
        vm.unmap(res.ptr, size)
        vm.release(phys)
        vm.address_free(res)


def test_vmm_api(rt: Any) -> None:
    from aml_cuda import Access

    with aml_cuda.virtual_memory(0) as vm:
        g = vm.granularity()
        assert g == rt.vmm_granularity(0, False)
        assert vm.granularity(recommended=True) % g == 0
        phys = vm.create(2 * g, exportable=True)
        props = vm.properties(phys)
        assert (props.type, props.location_device, props.handle_types) == (1, 0, 1)
        plain = vm.create(g)
        assert vm.properties(plain).handle_types == 0
        with pytest.raises(AMLError) as info:
            vm.export_fd(plain)  # not created exportable
        assert info.value.native is not None
        assert info.value.native.function == "cuMemExportToShareableHandle"
        res = vm.reserve(4 * g)
        vm.map(res.ptr, 2 * g, phys)
        assert vm.get_access(res.ptr) is Access.NONE
        vm.set_access(res.ptr, 2 * g, Access.READ)
        assert vm.get_access(res.ptr) is Access.READ
        vm.set_access(res.ptr, 2 * g, {0: Access.READWRITE})
        assert vm.get_access(res.ptr) is Access.READWRITE
        again = vm.retain(res.ptr)
        assert again is phys
        assert phys.refs == 2
        vm.release(again)
        write_device(rt, res.ptr + g, b"vmm!")
        assert read_device(rt, res.ptr + g, 4) == b"vmm!"
        vm.unmap(res.ptr, 2 * g)
        vm.release(phys)
        vm.release(plain)
        vm.address_free(res)


def test_growable_keeps_address_and_data(rt: Any) -> None:
    with aml_cuda.virtual_memory(0) as vm:
        buf = vm.growable(4 << 30, 1 << 30)
        ptr = buf.ptr
        head = pattern(21, 1 << 20)
        write_device(rt, ptr, head)
        write_device(rt, ptr + (1 << 30) - len(head), head)
        buf.grow(2 << 30)
        assert buf.ptr == ptr
        assert buf.size == 2 << 30
        assert buf.mapped == 2 << 30
        assert read_device(rt, ptr, len(head)) == head
        assert read_device(rt, ptr + (1 << 30) - len(head), len(head)) == head
        write_device(rt, ptr + (2 << 30) - 4, b"tail")  # the new bytes are mapped
        assert read_device(rt, ptr + (2 << 30) - 4, 4) == b"tail"
        cai = buf.__cuda_array_interface__
        assert cai["shape"] == (2 << 30,)
        assert cai["data"][0] == ptr
        vm.munmap(buf)
