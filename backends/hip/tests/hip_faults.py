"""The HIP fault-injection table (issue 9): the public operations below, whose every hip*
call fails in turn with each code of ``CODES`` and must raise the AML error of HIP's table
(:mod:`aml_hip.errors`); the functions no operation calls and the failures an operation
absorbs, each with why. The runner and its test side are :mod:`tests.support.faults`
(``python hip_faults.py OPERATION`` with ``AML_HIP_LIBRARY`` naming the double).
"""

from __future__ import annotations

import mmap
import os
import sys
from typing import Any

import aml_hip
from aml_hip import HipFlags, HipMmapOptions
from aml_hip import abi as C
from hip_helpers import HipDouble

from aml_core.errors import ErrorCode
from aml_core.gpu.vmm import Access
from tests.support.faults import (
    DEVICE_COUNT,
    FaultTable,
    GpuOperations,
    Made,
    Operation,
    Tolerated,
    Undo,
    main,
)

#: Injected codes: one for each AML class of HIP's table, and one it does not list.
CODES = {
    C.hipErrorInvalidValue: "hipErrorInvalidValue",
    C.hipErrorOutOfMemory: "hipErrorOutOfMemory",
    C.hipErrorNotSupported: "hipErrorNotSupported",
    C.hipErrorContextAlreadyInUse: "hipErrorContextAlreadyInUse",
    C.hipErrorUnknown: "hipErrorUnknown",
}

#: What HIP's table must answer for each injected code, written out from the HIP
#: runtime API's documented meaning of each (hip_runtime_api.h; the numbers as
#: docs/native-abi.md#hip-error-codes lists them), not read from aml_hip.errors: a
#: corrupted table in the backend fails the fault runs.
EXPECTED: dict[int, ErrorCode] = {
    1: ErrorCode.EINVAL,  # hipErrorInvalidValue: an argument the runtime refuses
    2: ErrorCode.ENOMEM,  # hipErrorOutOfMemory
    801: ErrorCode.ENOTSUP,  # hipErrorNotSupported
    216: ErrorCode.EBUSY,  # hipErrorContextAlreadyInUse: the device is held
    999: ErrorCode.FAILURE,  # hipErrorUnknown: not in aml's table
}


def _expected(code: int) -> ErrorCode:
    return EXPECTED[int(code)]


#: Functions no public operation calls, with why (the table test checks this list).
NOT_CALLED: dict[str, str] = {
    "hipDriverGetVersion": "read only by the probe (aml info), not by an area operation",
    "hipInit": "aml_hip never calls it (the HIP runtime initializes itself)",
    "hipGetErrorName": "called only to name an error (the fault runs do); its lookup never raises",
    "hipExtMallocWithFlags": "aml allocates device memory with hipMalloc",
    "hipHostAlloc": "the pre-6.3 spelling; this double emulates 6.2 with hipHostMalloc",
    "hipExtHostAlloc": "the 6.3+ spelling; this double emulates 6.2 with hipHostMalloc",
    "hipFreeHost": "aml frees host memory with hipHostFree",
    "hipHostGetFlags": "not used by aml (the flags are known from the area)",
    "hipStreamCreate": "aml creates streams with hipStreamCreateWithFlags",
    "hipGetErrorString": "aml names errors with hipGetErrorName",
    "hipPeekAtLastError": "not called: every hip* call's result is checked directly",
}


# -- the operations: each registers what it makes in `made`, closed again after a failure ---


def _area(made: Made, flags: int) -> Any:
    area = aml_hip.create(0, flags)
    made.append(area)
    return area


GPU = GpuOperations(
    aml_hip, HipDouble, lambda made: _area(made, 0), read=lambda buf, n: buf.area.read(buf, n), share="export"
)


def op_device(made: Made) -> None:
    area = _area(made, 0)
    buf = area.mmap(8192)
    area.write(buf, b"x" * 16)
    area.read(buf, 16)
    area.munmap(buf)
    area.close()


def op_managed(made: Made) -> None:
    area = _area(made, HipFlags.ALLOC_UNIFIED)
    buf = area.mmap(8192)
    area.advise(buf, 1, 0)
    area.prefetch(buf, 0)
    area.range_attribute(buf, 1)
    area.range_attributes(buf, [1, 2])
    area.attach(buf, None)
    area.munmap(buf)
    area.close()


def op_host(made: Made) -> None:
    area = _area(made, HipFlags.ALLOC_HOST)
    area.munmap(area.mmap(8192))
    area.close()


def op_host_mapped(made: Made) -> None:
    area = _area(made, HipFlags.ALLOC_HOST | HipFlags.ALLOC_MAPPED)
    area.munmap(area.mmap(8192))
    area.close()


def op_registered(made: Made) -> None:
    memory = mmap.mmap(-1, 8192)
    made.append(memory)  # closed after the area (made is closed newest first)
    area = _area(made, HipFlags.ALLOC_MAPPED)
    area.munmap(area.mmap(8192, HipMmapOptions(ptr=memory)))
    area.close()


def op_pinned_pool(made: Made) -> None:
    """The pinned pool (issue 33): a block registered (hipHostRegister) and, the cache off,
    unregistered at munmap (hipHostUnregister); a failure of either leaves nothing behind."""
    pool = aml_hip.pinned_pool(0, max_cached=0)
    made.append(pool)
    pool.munmap(pool.mmap(8192))
    pool.close()


def op_stream(made: Made) -> None:
    stream = aml_hip.BACKEND.stream(non_blocking=True)
    made.append(stream)
    stream.synchronize()
    stream.close()


def op_other_device(made: Made) -> None:
    """An area of device 1 used from device 0: hipSetDevice there and back."""
    area = aml_hip.create(1, 0)
    made.append(area)
    area.munmap(area.mmap(4096))
    area.close()


def op_pointer(made: Made) -> None:
    area = _area(made, 0)
    buf = area.mmap(4096)
    aml_hip.BACKEND.pointer_attributes(buf)
    rt = aml_hip.get_runtime()
    rt.memset(buf.ptr, 7, 4096)
    rt.synchronize()
    area.munmap(buf)
    area.close()


def op_device_info(made: Made) -> None:
    """The probe's device facts: free memory is read on device 1 while device 0 is current
    (hipGetDevice, hipSetDevice there and back, hipMemGetInfo)."""
    rt = aml_hip.get_runtime()
    rt.set_device(0)
    rt.device_info(0)
    rt.device_info(1)


def op_vm_share(made: Made) -> None:
    """Export a physical allocation as a POSIX fd, import it (the same process here; the
    calls are the importer's), map the import and read it."""
    vm = aml_hip.BACKEND.virtual_memory(0)
    made.append(vm)
    g = vm.granularity()
    phys = vm.create(g, exportable=True)
    fd = vm.export_fd(phys)
    made.append(Undo(f"close fd {fd}", lambda: os.close(fd)))
    imported = vm.import_fd(fd, g)
    res = vm.reserve(g)
    vm.map(res.ptr, g, imported)
    vm.set_access(res.ptr, g, Access.READWRITE)
    vm.unmap(res.ptr, g)
    vm.address_free(res)
    vm.release(imported)
    vm.release(phys)
    vm.close()


def _streams(made: Made, n: int) -> list[Any]:

    streams = []
    for _ in range(n):
        stream = aml_hip.BACKEND.stream(non_blocking=True)
        made.append(stream)  # destroyed after the area: the queued frees run then
        streams.append(stream)
    return streams


def op_stream_ordered(made: Made) -> None:
    """hipMallocAsync / hipFreeAsync through a device area, on the allocating stream and
    on another one; a plain buffer freed on a stream (hipStreamSynchronize, then hipFree)."""
    s1, s2 = _streams(made, 2)
    area = _area(made, 0)
    buf = area.mmap(8192, stream=s1)
    area.munmap(buf)
    buf = area.mmap(4096, stream=s1)
    area.munmap(buf, stream=s2)
    area.munmap(area.mmap(4096), stream=s2)
    area.close()
    s2.close()
    s1.close()


def op_pool_streams(made: Made) -> None:
    """A pool hands a block freed on one stream to another: an event recorded on the
    first, waited for by the second, destroyed with the pool."""
    import aml_core

    s1, s2 = _streams(made, 2)
    area = _area(made, 0)
    pool = aml_core.pool(area, small_slab=4096, small_max=4096)
    made.append(pool)
    a = pool.mmap(4096, stream=s1)
    pool.munmap(a)
    b = pool.mmap(4096, stream=s2)
    pool.munmap(b)
    pool.close()
    area.close()
    s2.close()
    s1.close()


def op_pool_kernel(made: Made) -> None:
    """Every native call the allocator kernel makes through a device area: a slab
    (hipMalloc), hits in host order and on a stream (no call), a block handed from one
    stream to another (hipEventCreateWithFlags, hipEventRecord on the first,
    hipStreamWaitEvent on the second), the streams reclaimed before the pool grows
    (hipStreamSynchronize, then hipMalloc: a block stays live, so out of memory has no
    cached slab to release and raises), trim (hipFree of the larger slab), close (hipFree
    of the other, the event destroyed)."""
    import aml_core

    s1, s2 = _streams(made, 2)
    area = _area(made, 0)
    pool = aml_core.pool(area, small_slab=8192, small_max=4096)  # slabs of two 4 KiB blocks
    made.append(pool)
    keep = pool.mmap(4096)  # a slab; keep holds its first block until the end
    pool.munmap(pool.mmap(4096))  # the second block, onto the host-order stack
    pool.munmap(pool.mmap(4096, stream=s1))  # from the host-order stack, onto s1's
    b = pool.mmap(4096, stream=s2)  # only s1 holds one: the event hand-over
    pool.munmap(b, stream=s1)
    c = pool.mmap(8192)  # nothing in host order: s1 synchronized, then a new slab
    pool.munmap(c)
    pool.trim(8192)  # the larger slab goes (the small one is within keep)
    pool.munmap(keep)
    pool.close()
    area.close()
    s2.close()
    s1.close()


def op_pool_expandable(made: Made) -> None:
    """The kernel's expandable segment: a reservation, chunks mapped as it grows, the
    free end unmapped by trim, the rest and the reservation by close."""
    import aml_core

    vm = aml_hip.virtual_memory(0)
    made.append(vm)
    pool = aml_core.pool(vm, expandable=True, capacity=64 << 20)
    made.append(pool)
    a = pool.mmap(1 << 20)  # the first chunk
    b = pool.mmap(3 << 20)  # the segment grows at its end
    pool.munmap(b)
    pool.trim()  # the free end
    pool.munmap(a)
    pool.close()
    vm.close()


class _Event:
    """An event of the runtime, destroyed by close (again after a failed destroy)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.handle: int = runtime.event_create()

    def close(self) -> None:
        if self.handle:
            self.runtime.event_destroy(self.handle)
            self.handle = 0


def op_events(made: Made) -> None:
    """The runtime's event calls: record after queued work, query (not done), make another
    stream wait, synchronize (done)."""

    (s1, s2) = _streams(made, 2)
    area = _area(made, 0)
    rt = aml_hip.get_runtime()
    buf = area.mmap(4096, stream=s1)  # work queued on s1
    event = _Event(rt)
    made.append(event)
    rt.event_record(event.handle, s1.handle)
    assert not rt.event_query(event.handle)
    rt.stream_wait_event(s2.handle, event.handle)
    rt.event_synchronize(event.handle)
    assert rt.event_query(event.handle)
    area.munmap(buf)
    event.close()
    area.close()
    s2.close()
    s1.close()


class _PeerAccess:
    """What op_peer enabled, as an object the caller's retry closes: disables it."""

    def __init__(self, peer: int, device: int) -> None:
        self.peer, self.device = peer, device

    def close(self) -> None:
        aml_hip.disable_peer_access(self.peer, self.device)


def op_peer(made: Made) -> None:
    """Peer access from device 1 (selected and restored: the caller is on device 0), enabled
    twice (the second answers False, clearing hipGetLastError) and disabled twice; a copy
    between the devices."""
    assert aml_hip.can_access_peer(1, 0)
    made.append(_PeerAccess(0, 1))
    aml_hip.enable_peer_access(0, device=1)
    aml_hip.enable_peer_access(0, device=1)
    first = aml_hip.create(0, 0)
    made.append(first)
    second = aml_hip.create(1, 0)
    made.append(second)
    a, b = first.mmap(4096), second.mmap(4096)
    aml_hip.copy_peer(b, a)
    first.munmap(a)
    second.munmap(b)
    second.close()
    first.close()
    aml_hip.disable_peer_access(0, device=1)
    aml_hip.disable_peer_access(0, device=1)


OPERATIONS: dict[str, Operation] = {
    "device": op_device,
    "managed": op_managed,
    "host": op_host,
    "host-mapped": op_host_mapped,
    "registered": op_registered,
    "pinned-pool": op_pinned_pool,
    "stream": op_stream,
    "other-device": op_other_device,
    "ipc-export": GPU.ipc_export,
    "ipc-open": GPU.ipc_open,
    "pointer-memset": op_pointer,
    "device-info": op_device_info,
    "vm-mmap-growable": GPU.vm_mmap,
    "vm-steps": GPU.vm_steps,
    "vm-share": op_vm_share,
    "stream-ordered": op_stream_ordered,
    "pool-streams": op_pool_streams,
    "pool-kernel": op_pool_kernel,
    "pool-expandable": op_pool_expandable,
    "events": op_events,
    "peer": op_peer,
}


TABLE = FaultTable(
    double=HipDouble,
    operations=OPERATIONS,
    codes=CODES,
    translate=_expected,
    not_called=NOT_CALLED,
    tolerated={
        "hipDeviceGetAttribute": Tolerated(
            {C.hipErrorInvalidValue, C.hipErrorNotSupported},
            "device_info reads an attribute the library does not know (hipErrorInvalidValue, "
            "hipErrorNotSupported) as its default (runtime._attribute_or); any other failure raises",
        ),
        # free memory is a report: a failed query is "not known" (Runtime.free_memory)
        "hipGetDevice@device-info": "the free-memory query's, which reads a failure as not known",
        "hipSetDevice@device-info": "the free-memory query selects the device and back: not known",
        "hipGetLastError": "read only to clear a peer call's 'already enabled' / 'not enabled' "
        "answer: what it returns is that answer, not a failure",
        "hipMemGetInfo": "free memory is a report: a failed query is 'not known' (None)",
        "hipMallocAsync": "out of memory is retried once after the device synchronizes (frees may "
        "still be queued on streams); the other codes raise",
    },
    rules={"hipGetDeviceCount": DEVICE_COUNT},
    devices=2,
    memory_kinds=("device", "host", "managed", "registered"),
)

if __name__ == "__main__":
    sys.exit(main(TABLE))
