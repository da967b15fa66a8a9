"""What aml-hsa's fault injection runs (issue 9): public operations whose hsa* calls fail
one at a time with each status of ``CODES``; each run must be the AML error aml-hsa's table
(:mod:`aml_hsa.errors`) gives, and leave nothing in the double or tracked by aml-hsa once
the caller closes again. Run by :mod:`tests.support.faults`.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from typing import Any

import aml_hsa
from aml_hsa import MemoryType, Permission
from aml_hsa import abi as C
from aml_hsa.errors import make_error_table
from hsa_helpers import HsaDouble

from aml_core.errors import ErrorCode
from tests.support.faults import (
    FaultTable,
    GpuOperations,
    Made,
    Operation,
    Rule,
    Undo,
    main,
    undo,
)

#: Injected statuses: one for each AML class of aml-hsa's table, and HSA_STATUS_ERROR (FAILURE).
CODES = {
    C.HSA_STATUS_ERROR_INVALID_ARGUMENT: "HSA_STATUS_ERROR_INVALID_ARGUMENT",
    C.HSA_STATUS_ERROR_OUT_OF_RESOURCES: "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
    C.HSA_STATUS_ERROR_RESOURCE_FREE: "HSA_STATUS_ERROR_RESOURCE_FREE",
    C.HSA_STATUS_ERROR_NOT_SUPPORTED: "HSA_STATUS_ERROR_NOT_SUPPORTED",
    C.HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION",
    C.HSA_STATUS_ERROR: "HSA_STATUS_ERROR",
}

#: Functions no public operation calls, with why (the table test checks this list).
NOT_CALLED: dict[str, str] = {
    "hsa_shut_down": "called once at exit (atexit) or by aml_hsa.native.shutdown_all, its status ignored",
    "hsa_status_string": "called only to name an error (the fault runs do); its lookup never raises",
    "hsa_system_get_info": "declared (aml_hsa.native) but not called: the interface comes from the "
    "symbols the library exports",
    "hsa_amd_agent_memory_pool_get_info": "declared (aml_hsa.native) but not called: a pool's "
    "access is read with hsa_amd_memory_pool_get_info",
    "hsa_amd_portable_close_dmabuf": "called only to give back the fd of an export that answered "
    "success with an impossible offset (IpcOps.dmabuf_export); the caller closes its own fds",
}


# -- the operations: each registers what it makes in `made`, closed again after a failure ---
def _area(made: Made, host: bool = False) -> Any:
    area = aml_hsa.host_area() if host else aml_hsa.create(0)
    made.append(area)
    return area


def _read(buf: Any, size: int) -> bytes:
    out = ctypes.create_string_buffer(size)
    aml_hsa.get_runtime().memory_copy(ctypes.addressof(out), buf.ptr, size)
    return out.raw


GPU = GpuOperations(aml_hsa, HsaDouble, _area, read=_read, share="import")


def op_device(made: Made) -> None:
    area = _area(made)
    buf = area.mmap(8192)
    area.write(buf, b"x" * 16)
    assert area.read(buf, 16) == b"x" * 16
    area.munmap(buf)
    area.close()


def op_host(made: Made) -> None:
    """Host pool memory, made reachable by every GPU (hsa_amd_agents_allow_access)."""
    area = _area(made, host=True)
    area.munmap(area.mmap(8192))
    area.close()


def op_dmabuf(made: Made) -> None:
    """A device buffer exported as a dma-buf (hsa_amd_portable_export_dmabuf), its fd closed."""
    area = _area(made)
    buf = area.mmap(8192)
    handle = area.export_dmabuf(buf)
    undo(made, _made(made, f"close fd {handle.fd}", lambda: os.close(handle.fd)))
    area.munmap(buf)
    area.close()


def op_agents(made: Made) -> None:
    for agent in aml_hsa.agents():
        aml_hsa.pools(agent)
    aml_hsa.get_runtime().device_info(0)


def op_vmem(made: Made) -> None:
    """The vendor's hsa_amd_vmem_* calls under their names (aml_hsa.vmem), step by step."""
    pool = aml_hsa.device_pool(0)
    gpu = aml_hsa.get_runtime().gpus[0]
    g = pool.granule
    va = aml_hsa.address_reserve_align(2 * g, 0, g)
    free = Undo("address_free", lambda: aml_hsa.address_free(va, 2 * g))
    made.append(free)
    h = aml_hsa.handle_create(pool, g, MemoryType.PINNED)
    release = Undo("handle_release", lambda: aml_hsa.handle_release(h))
    made.append(release)
    aml_hsa.get_alloc_properties_from_handle(h)
    aml_hsa.map(va, g, h)
    unmap = Undo("unmap", lambda: aml_hsa.unmap(va, g))
    made.append(unmap)
    aml_hsa.set_access(va, g, [(gpu, Permission.RW)])
    aml_hsa.get_access(va, gpu)
    retained = aml_hsa.retain_alloc_handle(va)
    undo(made, _made(made, "release the retained handle", lambda: aml_hsa.handle_release(retained)))
    fd = aml_hsa.export_shareable_handle(h)
    made.append(Undo(f"close fd {fd}", lambda: os.close(fd)))
    imported = aml_hsa.import_shareable_handle(fd)
    undo(made, _made(made, "release the imported handle", lambda: aml_hsa.handle_release(imported)))
    other = aml_hsa.address_reserve(g)
    undo(made, _made(made, "free the second reservation", lambda: aml_hsa.address_free(other, g)))
    for step in (unmap, release, free):
        undo(made, step)


def _made(made: Made, what: str, close: Callable[[], object]) -> Undo:
    step = Undo(what, close)
    made.append(step)
    return step


OPERATIONS: dict[str, Operation] = {
    "device": op_device,
    "host": op_host,
    "agents-pools-info": op_agents,
    "ipc-export": GPU.ipc_export,
    "dmabuf-export": op_dmabuf,
    "ipc-open": GPU.ipc_open,
    "vm-mmap-growable": GPU.vm_mmap,
    "vm-steps": GPU.vm_steps,
    "vmem": op_vmem,
}

TABLE = FaultTable(
    double=HsaDouble,
    operations=OPERATIONS,
    codes=CODES,
    translate=make_error_table(str).translate,
    not_called=NOT_CALLED,
    rules={
        "hsa_init": Rule(
            "HsaLibrary.init: OUT_OF_RESOURCES from hsa_init is ROCr's 'no GPU / KFD', ENOTSUP",
            lambda native, code: (
                {ErrorCode.ENOTSUP} if native == C.HSA_STATUS_ERROR_OUT_OF_RESOURCES else {code}
            ),
        ),
    },
    memory_kinds=("pool_alloc",),
)

if __name__ == "__main__":
    sys.exit(main(TABLE))
