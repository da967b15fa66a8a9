"""The CUDA runtime of aml: :class:`CudaRuntime` provides every capability group of
:mod:`aml_core.gpu.runtime` with NVIDIA's ``cuda-bindings`` (13.x, see :mod:`.native`).

* Allocation, managed memory, streams and IPC use the runtime API
  (``cuda.bindings.runtime``, which links the CUDA runtime statically and needs only the
  driver). CUDA 13 forms: ``cudaMemAdvise`` / ``cudaMemPrefetchAsync`` take a
  ``cudaMemLocation`` (device -1 is ``{Host, 0}``).
* Virtual memory uses the driver API (``cuda.bindings.driver``) with the current
  device's primary context made current on the calling thread when none is.
* ``device_info`` uses the driver API only (``cuDeviceGetName``, ``cuDeviceTotalMem``,
  ``cuDeviceGetAttribute``) and NVML for free memory (:mod:`aml_cuda.nvml`): it creates
  no context and allocates nothing.

Every call returns a tuple ``(error, outputs...)``; nothing raises for API errors. A
failure is translated by :data:`aml_cuda.errors.RUNTIME_ERRORS` (runtime calls) or
:data:`aml_cuda.errors.DRIVER_ERRORS` (driver calls) into an
:class:`~aml_core.errors.AMLError` whose ``native`` names the call and the CUDA error.
The runtime's last-error state is cleared after a failure so that it does not surface
later in an unrelated call.

The hot path (``malloc``/``free`` and friends) is one native call, one test of the
error code and no allocation beyond what the bindings make.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from aml_core._buffer import NativeAllocator
from aml_core.buffer import DLDeviceType
from aml_core.errors import AMLNotSupported, ErrorTable
from aml_core.gpu import runtime as core
from aml_core.specs import DeviceInfo

from . import nvml
from .errors import DRIVER_ERRORS, RUNTIME_ERRORS
from .native import (
    CYRUNTIME_SENTINEL,
    bindings,
    bindings_version,
    cyruntime_functions,
    display_driver_version,
)

_rt, _drv = bindings()

__all__ = [
    "TRAITS_ADVICES",
    "TRAITS_RANGE_ATTRIBUTES",
    "CudaRuntime",
]

#: cudaMemoryAdvise 1-6 (SetReadMostly .. UnsetAccessedBy).
TRAITS_ADVICES = frozenset(range(1, 7))
#: cudaMemRangeAttribute 1-8 (ReadMostly .. LastPrefetchLocationId).
TRAITS_RANGE_ATTRIBUTES = frozenset(range(1, 9))

_E = _rt.cudaError_t
_ERR_NO_DRIVER = int(_E.cudaErrorInsufficientDriver)
_ERR_NO_DEVICE = int(_E.cudaErrorNoDevice)

# Bound once: the hot path looks up module globals, not attributes of modules.
_cudaMalloc = _rt.cudaMalloc
_cudaFree = _rt.cudaFree
_cudaHostAlloc = _rt.cudaHostAlloc
_cudaFreeHost = _rt.cudaFreeHost
_cudaMallocManaged = _rt.cudaMallocManaged
_cudaHostGetDevicePointer = _rt.cudaHostGetDevicePointer
_cudaGetDevice = _rt.cudaGetDevice
_cudaSetDevice = _rt.cudaSetDevice
_cudaMemcpy = _rt.cudaMemcpy
_cudaGetLastError = _rt.cudaGetLastError
_MEMCPY_DEFAULT = _rt.cudaMemcpyKind.cudaMemcpyDefault
_cudaMallocAsync = _rt.cudaMallocAsync
_cudaFreeAsync = _rt.cudaFreeAsync
_cudaEventRecord = _rt.cudaEventRecord
_cudaEventQuery = _rt.cudaEventQuery
_ERR_NOT_READY = int(_E.cudaErrorNotReady)
_ERR_PEER_ENABLED = int(_E.cudaErrorPeerAccessAlreadyEnabled)
_ERR_PEER_NOT_ENABLED = int(_E.cudaErrorPeerAccessNotEnabled)
_EVENT_DISABLE_TIMING = int(_rt.cudaEventDisableTiming)

_HOST_PORTABLE = int(_rt.cudaHostAllocPortable)
_HOST_MAPPED = int(_rt.cudaHostAllocMapped)
_REGISTER_PORTABLE = int(_rt.cudaHostRegisterPortable)
_REGISTER_MAPPED = int(_rt.cudaHostRegisterMapped)
_ATTACH_GLOBAL = int(_rt.cudaMemAttachGlobal)
_ATTACH_HOST = int(_rt.cudaMemAttachHost)
_IPC_LAZY = int(_rt.cudaIpcMemLazyEnablePeerAccess)
_IPC_HANDLE_SIZE = 64

_MEMORY_TYPES = {
    int(_rt.cudaMemoryType.cudaMemoryTypeUnregistered): "unregistered",
    int(_rt.cudaMemoryType.cudaMemoryTypeHost): "host",
    int(_rt.cudaMemoryType.cudaMemoryTypeDevice): "device",
    int(_rt.cudaMemoryType.cudaMemoryTypeManaged): "managed",
}
_ADVICES = {i: _rt.cudaMemoryAdvise(i) for i in TRAITS_ADVICES}
_RANGE_ATTRIBUTES = {i: _rt.cudaMemRangeAttribute(i) for i in TRAITS_RANGE_ATTRIBUTES}

_POSIX_FD = _drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_NO_HANDLE = _drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
_PINNED = _drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
_LOC_DEVICE = _drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
_GRAN_MIN = _drv.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
_GRAN_REC = _drv.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
_A = _drv.CUdevice_attribute


#: NativeAllocator operation -> the cyruntime function behind it.
NATIVE_FUNCTIONS = {
    "get_device": "cudaGetDevice",
    "malloc": "cudaMalloc",
    "free": "cudaFree",
    "malloc_managed": "cudaMallocManaged",
    "host_alloc": "cudaHostAlloc",
    "free_host": "cudaFreeHost",
}
#: The C signature each capsule must name (the shapes NativeAllocator calls).
CYRUNTIME_SIGNATURES = {
    "cudaGetDevice": "cudaError_t (int *)",
    "cudaMalloc": "cudaError_t (void **, size_t)",
    "cudaFree": "cudaError_t (void *)",
    "cudaMallocManaged": "cudaError_t (void **, size_t, unsigned int)",
    "cudaHostAlloc": "cudaError_t (void **, size_t, unsigned int)",
    "cudaFreeHost": "cudaError_t (void *)",
}


def _version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


class CudaRuntime(
    core.Runtime,
    core.AllocationOps,
    core.ManagedOps,
    core.StreamOps,
    core.IpcOps,
    core.VirtualMemoryOps,
    core.StreamOrderedOps,
    core.PeerOps,
):
    """Every capability group over ``cuda-bindings``."""

    def __init__(self) -> None:
        self.errors: ErrorTable = RUNTIME_ERRORS
        self.driver_errors: ErrorTable = DRIVER_ERRORS
        err, runtime_version = _rt.cudaRuntimeGetVersion()
        self.runtime_version = int(runtime_version) if not err else 0
        err, driver_version = _rt.cudaDriverGetVersion()
        self.driver_version = int(driver_version) if not err else 0
        self.display_driver = display_driver_version()
        versions = {"cuda-bindings": bindings_version()}
        if self.runtime_version:
            versions["runtime"] = _version(self.runtime_version)
        if self.driver_version:
            versions["driver API"] = _version(self.driver_version)
        if self.display_driver:
            versions["driver"] = self.display_driver
        self.traits = core.RuntimeTraits(
            name="cuda",
            dl_device=DLDeviceType.CUDA,
            dl_host=DLDeviceType.CUDA_HOST,
            dl_managed=DLDeviceType.CUDA_MANAGED,
            managed_granule=1,
            advise_alignment=1,
            advices=TRAITS_ADVICES,
            range_attributes=TRAITS_RANGE_ATTRIBUTES,
            versions=versions,
        )
        self._lock = threading.Lock()
        self._count: int | None = None
        self._driver_ready = False
        self._primary: dict[int, Any] = {}
        self._locations: dict[int, Any] = {}
        self._granularity: dict[tuple[int, bool], int] = {}
        # Bindings structs the driver calls only read, built once.
        self._props: dict[tuple[int, bool], Any] = {}
        self._access: dict[tuple[tuple[int, int], ...], list[Any]] = {}
        self._devlocs: dict[int, Any] = {}
        self._libcuda: ctypes.CDLL | None = None
        self._native: NativeAllocator | None = None
        self._native_checked = False

    def __repr__(self) -> str:
        return f"<CudaRuntime {self.traits.version}>"

    # -- errors ----------------------------------------------------------------------------
    def _fail(self, function: str, err: Any, message: str | None = None) -> NoReturn:
        with contextlib.suppress(Exception):
            _cudaGetLastError()  # clear the runtime's last error: it is reported here
        raise self.errors.error(function, int(err), message)

    def _dfail(self, function: str, err: Any, message: str | None = None) -> NoReturn:
        raise self.driver_errors.error(function, int(err), message)

    def _driver(self) -> None:
        """``cuInit(0)`` once; a missing driver library is ENOTSUP (the bindings raise
        a cuda.pathfinder error instead of returning a CUresult)."""
        if self._driver_ready:
            return
        try:
            (err,) = _drv.cuInit(0)
        except Exception as exc:
            raise AMLNotSupported(
                f"the NVIDIA driver library (libcuda.so.1) could not be loaded: {type(exc).__name__}: {exc}"
            ) from exc
        if err:
            self._dfail("cuInit", err, "the CUDA driver could not be initialized")
        self._driver_ready = True

    # -- devices ---------------------------------------------------------------------------
    def device_count(self) -> int:
        count = self._count
        if count is not None:
            return count
        err, n = _rt.cudaGetDeviceCount()
        if err:
            code = int(err)
            if code == _ERR_NO_DRIVER:
                rt = _version(self.runtime_version) if self.runtime_version else "13"
                self._fail(
                    "cudaGetDeviceCount",
                    err,
                    f"no usable NVIDIA driver: libcuda.so.1 is missing or older than CUDA {rt}",
                )
            if code == _ERR_NO_DEVICE:
                self._fail("cudaGetDeviceCount", err, "no CUDA device is visible to this process")
            self._fail("cudaGetDeviceCount", err)
        self._count = int(n)
        return self._count

    def get_device(self) -> int:
        err, dev = _cudaGetDevice()
        if err:
            self._fail("cudaGetDevice", err)
        return int(dev)

    def _set_device(self, device: int) -> None:
        (err,) = _cudaSetDevice(device)
        if err:
            self._fail("cudaSetDevice", err, f"could not select CUDA device {device}")

    def synchronize(self) -> None:
        (err,) = _rt.cudaDeviceSynchronize()
        if err:
            self._fail("cudaDeviceSynchronize", err)

    def _cu_device(self, device: int) -> Any:
        self._driver()
        err, dev = _drv.cuDeviceGet(device)
        if err:
            self._dfail("cuDeviceGet", err, f"no CUDA device {device}")
        return dev

    def _attribute(self, dev: Any, attribute: Any) -> int:
        err, value = _drv.cuDeviceGetAttribute(attribute, dev)
        if err:
            self._dfail("cuDeviceGetAttribute", err)
        return int(value)

    def _device_info(self, device: int) -> DeviceInfo:
        """Name, memory, capabilities and details of a device, through the driver API
        only: no context is created and nothing is allocated."""
        dev = self._cu_device(device)
        err, raw = _drv.cuDeviceGetName(256, dev)
        if err:
            self._dfail("cuDeviceGetName", err)
        name = bytes(raw).split(b"\0", 1)[0].decode(errors="replace").strip()
        err, total = _drv.cuDeviceTotalMem(dev)
        if err:
            self._dfail("cuDeviceTotalMem", err)
        attr = self._attribute
        major = attr(dev, _A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        minor = attr(dev, _A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        managed = attr(dev, _A.CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)
        concurrent = attr(dev, _A.CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)
        pageable = attr(dev, _A.CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS)
        vmm = attr(dev, _A.CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
        posix_fd = attr(dev, _A.CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)
        unified = attr(dev, _A.CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)
        err, bus = _drv.cuDeviceGetPCIBusId(32, dev)
        pci = bytes(bus).split(b"\0", 1)[0].decode(errors="replace") if not err else "?"
        details: dict[str, object] = {
            "compute_capability": f"{major}.{minor}",
            "pci_bus_id": pci,
            "driver_version": self.display_driver or "?",
            "cuda_driver_api": _version(self.driver_version) if self.driver_version else "?",
            "cuda_runtime": _version(self.runtime_version) if self.runtime_version else "?",
            "cuda_bindings": bindings_version(),
            "unified_addressing": bool(unified),
            "vmm_posix_fd": bool(posix_fd),
        }
        caps = core.device_capabilities(
            self,
            managed=bool(managed),
            concurrent=bool(concurrent),
            pageable=bool(pageable),
            vmm=bool(vmm),
            ipc=bool(unified),
        )
        return DeviceInfo(
            index=device, name=name, total_memory=int(total), capabilities=caps, details=details
        )

    def _free_memory(self, device: int) -> int | None:
        """Through NVML (:mod:`aml_cuda.nvml`), by the device's PCI bus id: no context is
        created. None when NVML cannot answer."""
        dev = self._cu_device(device)
        err, bus = _drv.cuDeviceGetPCIBusId(32, dev)
        if err:
            self._dfail("cuDeviceGetPCIBusId", err)
        pci = bytes(bus).split(b"\0", 1)[0].decode(errors="replace")
        return nvml.free_memory(pci) if pci else None

    def memory_info(self) -> tuple[int, int]:
        """``cudaMemGetInfo``: (free, total) bytes of the current device."""
        err, free, total = _rt.cudaMemGetInfo()
        if err:
            self._fail("cudaMemGetInfo", err)
        return int(free), int(total)

    # -- allocation ------------------------------------------------------------------------
    def native_allocator(self) -> NativeAllocator | None:
        """cudaGetDevice, cudaMalloc, cudaFree, cudaMallocManaged, cudaHostAlloc and
        cudaFreeHost as the C functions of cuda-bindings' cyruntime (the ones
        ``cuda.bindings.runtime`` calls), for GpuArea's compiled path; None if this
        cuda-bindings does not export them with the expected signatures. A failure goes
        through :meth:`_fail` (the last error cleared, :data:`RUNTIME_ERRORS`), with the
        messages of the ``_``-methods. None too for a subclass that replaces one of
        those methods (:func:`aml_core.gpu.runtime.replaces_native`)."""
        if getattr(self, "_native_checked", False):  # a subclass may skip __init__
            return self._native
        self._native = self._make_native_allocator()
        self._native_checked = True
        return self._native

    def _make_native_allocator(self) -> NativeAllocator | None:
        if core.replaces_native(self, CudaRuntime):
            return None
        try:
            found = cyruntime_functions(NATIVE_FUNCTIONS.values())
        except AMLNotSupported:
            return None
        for function in NATIVE_FUNCTIONS.values():
            if found[function][1] != CYRUNTIME_SIGNATURES[function]:
                return None
        names = dict(NATIVE_FUNCTIONS)
        return NativeAllocator(
            **{op: found[name][0] for op, name in names.items()},
            fail=self._native_fail,
            names=names,
            error_sentinel=CYRUNTIME_SENTINEL,
            attach_host=_ATTACH_HOST,
            attach_global=_ATTACH_GLOBAL,
            host_portable=_HOST_PORTABLE,
        )

    def _native_fail(self, function: str, code: int, *args: int) -> NoReturn:
        """The compiled allocator's error hook: what the ``_``-methods raise."""
        message = None
        if function == "cudaHostAlloc":
            size, flags = args
            message = f"cudaHostAlloc of {size} bytes (flags 0x{flags:x}) failed"
        elif args:
            message = f"{function} of {args[0]} bytes failed"
        self._fail(function, code, message)

    def _malloc(self, size: int) -> int:
        err, ptr = _cudaMalloc(size)
        if err:
            self._fail("cudaMalloc", err, f"cudaMalloc of {size} bytes failed")
        return int(ptr)

    def _free(self, ptr: int) -> None:
        (err,) = _cudaFree(ptr)
        if err:
            self._fail("cudaFree", err)

    def _host_alloc(self, size: int, portable: bool, mapped: bool) -> int:
        flags = (_HOST_PORTABLE if portable else 0) | (_HOST_MAPPED if mapped else 0)
        err, ptr = _cudaHostAlloc(size, flags)
        if err:
            self._fail("cudaHostAlloc", err, f"cudaHostAlloc of {size} bytes (flags 0x{flags:x}) failed")
        return int(ptr)

    def _free_host(self, ptr: int) -> None:
        (err,) = _cudaFreeHost(ptr)
        if err:
            self._fail("cudaFreeHost", err)

    def _malloc_managed(self, size: int, attach_global: bool) -> int:
        flags = _ATTACH_GLOBAL if attach_global else _ATTACH_HOST
        err, ptr = _cudaMallocManaged(size, flags)
        if err:
            self._fail("cudaMallocManaged", err, f"cudaMallocManaged of {size} bytes failed")
        return int(ptr)

    def _host_register(self, ptr: int, size: int, portable: bool, mapped: bool) -> None:
        flags = (_REGISTER_PORTABLE if portable else 0) | (_REGISTER_MAPPED if mapped else 0)
        (err,) = _rt.cudaHostRegister(ptr, size, flags)
        if err:
            self._fail("cudaHostRegister", err)

    def _host_unregister(self, ptr: int) -> None:
        (err,) = _rt.cudaHostUnregister(ptr)
        if err:
            self._fail("cudaHostUnregister", err)

    def _host_device_pointer(self, ptr: int) -> int:
        err, dptr = _cudaHostGetDevicePointer(ptr, 0)
        if err:
            self._fail("cudaHostGetDevicePointer", err)
        return int(dptr)

    def _pointer_attributes(self, ptr: int) -> core.PointerAttributes:
        err, attrs = _rt.cudaPointerGetAttributes(ptr)
        if err:
            self._fail("cudaPointerGetAttributes", err)
        kind = int(attrs.type)
        return core.PointerAttributes(
            memory_type=_MEMORY_TYPES.get(kind, "unregistered"),
            device=int(attrs.device),
            device_pointer=int(attrs.devicePointer or 0),
            host_pointer=int(attrs.hostPointer or 0),
            is_managed=kind == int(_rt.cudaMemoryType.cudaMemoryTypeManaged),
        )

    def _memcpy(self, dst: int, src: int, size: int) -> None:
        (err,) = _cudaMemcpy(dst, src, size, _MEMCPY_DEFAULT)
        if err:
            self._fail("cudaMemcpy", err)

    def _memset(self, ptr: int, value: int, size: int) -> None:
        """``cudaMemset``, then a synchronization of the default stream, so that the
        bytes are set when this returns (whatever the kind of memory)."""
        (err,) = _rt.cudaMemset(ptr, value, size)
        if err:
            self._fail("cudaMemset", err)
        (err,) = _rt.cudaStreamSynchronize(0)
        if err:
            self._fail("cudaStreamSynchronize", err)

    # -- managed memory --------------------------------------------------------------------
    def _location(self, device: int) -> Any:
        """The ``cudaMemLocation`` of a device, or ``{Host, 0}`` for -1 (cached: the
        bindings only read it)."""
        loc = self._locations.get(device)
        if loc is None:
            loc = _rt.cudaMemLocation()
            if device == core.CPU_DEVICE:
                loc.type = _rt.cudaMemLocationType.cudaMemLocationTypeHost
                loc.id = 0
            else:
                loc.type = _rt.cudaMemLocationType.cudaMemLocationTypeDevice
                loc.id = device
            self._locations[device] = loc
        return loc

    def _mem_prefetch(self, ptr: int, size: int, device: int, stream: int) -> None:
        (err,) = _rt.cudaMemPrefetchAsync(ptr, size, self._location(device), 0, stream)
        if err:
            self._fail("cudaMemPrefetchAsync", err)

    def _mem_advise(self, ptr: int, size: int, advice: int, device: int) -> None:
        adv = _ADVICES.get(advice)
        if adv is None:
            raise self.errors.error(
                "cudaMemAdvise", int(_E.cudaErrorInvalidValue), f"unknown advice {advice}"
            )
        (err,) = _rt.cudaMemAdvise(ptr, size, adv, self._location(device))
        if err:
            self._fail("cudaMemAdvise", err)

    def _mem_range_attributes(
        self, ptr: int, size: int, requests: Sequence[tuple[int, int]]
    ) -> list[list[int]]:
        sizes = [4 * count for _, count in requests]
        try:
            names = [_RANGE_ATTRIBUTES[attr] for attr, _ in requests]
        except KeyError as exc:
            raise self.errors.error(
                "cudaMemRangeGetAttributes",
                int(_E.cudaErrorInvalidValue),
                f"unknown range attribute {exc.args[0]}",
            ) from None
        try:
            err, data = _rt.cudaMemRangeGetAttributes(sizes, names, len(names), ptr, size)
        except TypeError:
            # An older cuda-bindings without a helper for some attribute: ask the
            # driver through ctypes instead (same numbers, same semantics).
            return [self._range_attribute_ctypes(ptr, size, a, c) for a, c in requests]
        if err:
            self._fail("cudaMemRangeGetAttributes", err)
        out: list[list[int]] = []
        for (_, count), value in zip(requests, data, strict=True):
            if isinstance(value, (list, tuple)):
                out.append([int(v) for v in value][:count])
            else:
                out.append([int(value)])
        return out

    def _range_attribute_ctypes(self, ptr: int, size: int, attribute: int, count: int) -> list[int]:
        self._driver()
        if self._libcuda is None:
            lib = ctypes.CDLL("libcuda.so.1")
            fn = lib.cuMemRangeGetAttribute
            fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint64, ctypes.c_size_t]
            fn.restype = ctypes.c_int
            self._libcuda = lib
        data = (ctypes.c_int * count)()
        err = self._libcuda.cuMemRangeGetAttribute(data, 4 * count, attribute, ptr, size)
        if err:
            self._dfail("cuMemRangeGetAttribute", err)
        return list(data)

    def _stream_attach(self, stream: int, ptr: int, size: int, flags: int) -> None:
        (err,) = _rt.cudaStreamAttachMemAsync(stream, ptr, size, flags)
        if err:
            self._fail("cudaStreamAttachMemAsync", err)

    # -- streams ---------------------------------------------------------------------------
    def _stream_create(self, non_blocking: bool) -> int:
        flags = int(_rt.cudaStreamNonBlocking) if non_blocking else int(_rt.cudaStreamDefault)
        err, stream = _rt.cudaStreamCreateWithFlags(flags)
        if err:
            self._fail("cudaStreamCreateWithFlags", err)
        return int(stream)

    def _stream_destroy(self, stream: int) -> None:
        (err,) = _rt.cudaStreamDestroy(stream)
        if err:
            self._fail("cudaStreamDestroy", err)

    def _stream_synchronize(self, stream: int) -> None:
        (err,) = _rt.cudaStreamSynchronize(stream)
        if err:
            self._fail("cudaStreamSynchronize", err)

    # -- stream-ordered allocation ---------------------------------------------------------
    def _malloc_async(self, size: int, stream: int) -> int:
        err, ptr = _cudaMallocAsync(size, stream)
        if err:
            self._fail("cudaMallocAsync", err, f"cudaMallocAsync of {size} bytes failed")
        return int(ptr)

    def _free_async(self, ptr: int, stream: int) -> None:
        (err,) = _cudaFreeAsync(ptr, stream)
        if err:
            self._fail("cudaFreeAsync", err)

    def _event_create(self) -> int:
        err, event = _rt.cudaEventCreateWithFlags(_EVENT_DISABLE_TIMING)
        if err:
            self._fail("cudaEventCreateWithFlags", err)
        return int(event)

    def _event_destroy(self, event: int) -> None:
        (err,) = _rt.cudaEventDestroy(event)
        if err:
            self._fail("cudaEventDestroy", err)

    def _event_record(self, event: int, stream: int) -> None:
        (err,) = _cudaEventRecord(event, stream)
        if err:
            self._fail("cudaEventRecord", err)

    def _event_query(self, event: int) -> bool:
        (err,) = _cudaEventQuery(event)
        if not err:
            return True
        if int(err) == _ERR_NOT_READY:
            return False
        self._fail("cudaEventQuery", err)

    def _event_synchronize(self, event: int) -> None:
        (err,) = _rt.cudaEventSynchronize(event)
        if err:
            self._fail("cudaEventSynchronize", err)

    def _stream_wait_event(self, stream: int, event: int) -> None:
        (err,) = _rt.cudaStreamWaitEvent(stream, event, 0)
        if err:
            self._fail("cudaStreamWaitEvent", err)

    # -- peer access (docs/aml-contract.md#peer-access) --------------------------------------
    def _can_access_peer(self, device: int, peer: int) -> bool:
        err, can = _rt.cudaDeviceCanAccessPeer(device, peer)
        if err:
            self._fail("cudaDeviceCanAccessPeer", err)
        return bool(can)

    def _enable_peer_access(self, peer: int) -> bool:
        (err,) = _rt.cudaDeviceEnablePeerAccess(peer, 0)
        if not err:
            return True
        if int(err) == _ERR_PEER_ENABLED:
            # An answer, not an error (idempotent enable): clear it so that it does not
            # surface in a later cudaGetLastError (CUDA records it like any failure).
            _cudaGetLastError()
            return False
        self._fail("cudaDeviceEnablePeerAccess", err, f"could not enable access to CUDA device {peer}")

    def _disable_peer_access(self, peer: int) -> bool:
        (err,) = _rt.cudaDeviceDisablePeerAccess(peer)
        if not err:
            return True
        if int(err) == _ERR_PEER_NOT_ENABLED:
            _cudaGetLastError()
            return False
        self._fail("cudaDeviceDisablePeerAccess", err, f"could not disable access to CUDA device {peer}")

    def _memcpy_peer(self, dst: int, dst_device: int, src: int, src_device: int, size: int) -> None:
        """``cudaMemcpyPeer``, then a synchronization of the default stream: CUDA queues a
        device-to-device copy on the current device's default stream and returns before
        it is done, and aml's returns when the bytes are there."""
        (err,) = _rt.cudaMemcpyPeer(dst, dst_device, src, src_device, size)
        if err:
            self._fail(
                "cudaMemcpyPeer",
                err,
                f"cudaMemcpyPeer of {size} bytes from device {src_device} to device {dst_device} failed",
            )
        (err,) = _rt.cudaStreamSynchronize(0)
        if err:
            self._fail("cudaStreamSynchronize", err)

    # -- IPC -------------------------------------------------------------------------------
    def _ipc_get_handle(self, ptr: int, size: int) -> bytes:
        err, handle = _rt.cudaIpcGetMemHandle(ptr)
        if err:
            self._fail("cudaIpcGetMemHandle", err)
        return ctypes.string_at(handle.getPtr(), _IPC_HANDLE_SIZE)

    def _ipc_open_handle(self, handle: bytes, size: int) -> int:
        raw = ctypes.create_string_buffer(bytes(handle), _IPC_HANDLE_SIZE)
        native = _rt.cudaIpcMemHandle_t(_ptr=ctypes.addressof(raw))
        err, ptr = _rt.cudaIpcOpenMemHandle(native, _IPC_LAZY)
        del native, raw
        if err:
            self._fail("cudaIpcOpenMemHandle", err)
        return int(ptr)

    def _ipc_close_handle(self, ptr: int) -> None:
        (err,) = _rt.cudaIpcCloseMemHandle(ptr)
        if err:
            self._fail("cudaIpcCloseMemHandle", err)

    def _ipc_address_range(self, ptr: int) -> tuple[int, int] | None:
        """``cuMemGetAddressRange``: the exporter's allocation behind an opened handle
        (the importer refuses a handle that claims more, issue 9)."""
        err, base, size = _drv.cuMemGetAddressRange(ptr)
        if err:
            self._dfail("cuMemGetAddressRange", err)
        return int(base), int(size)

    # -- virtual memory (driver API) -------------------------------------------------------
    def _context(self) -> None:
        """Make the current device's primary context current on this thread if no
        context is (VMM calls need one; the runtime API uses the same contexts)."""
        self._driver()
        err, ctx = _drv.cuCtxGetCurrent()
        if err:
            self._dfail("cuCtxGetCurrent", err)
        if ctx is not None and int(ctx):
            return
        device = self.get_device()
        with self._lock:
            primary = self._primary.get(device)
            if primary is None:
                err, primary = _drv.cuDevicePrimaryCtxRetain(self._cu_device(device))
                if err:
                    self._dfail("cuDevicePrimaryCtxRetain", err)
                self._primary[device] = primary
        (err,) = _drv.cuCtxSetCurrent(primary)
        if err:
            self._dfail("cuCtxSetCurrent", err)

    def _prop(self, device: int, exportable: bool) -> Any:
        """The ``CUmemAllocationProp`` of pinned device memory (cached: building a
        bindings struct costs more than the driver call; the bindings only read it)."""
        key = (device, exportable)
        prop = self._props.get(key)
        if prop is None:
            prop = _drv.CUmemAllocationProp()
            prop.type = _PINNED
            prop.location.type = _LOC_DEVICE
            prop.location.id = device
            prop.requestedHandleTypes = _POSIX_FD if exportable else _NO_HANDLE
            self._props[key] = prop
        return prop

    def _vmm_granularity(self, device: int, recommended: bool) -> int:
        key = (device, recommended)
        found = self._granularity.get(key)
        if found is not None:
            return found
        self._context()
        err, gran = _drv.cuMemGetAllocationGranularity(
            self._prop(device, True), _GRAN_REC if recommended else _GRAN_MIN
        )
        if err:
            self._dfail("cuMemGetAllocationGranularity", err)
        self._granularity[key] = int(gran)
        return int(gran)

    def _vmm_reserve(self, size: int, alignment: int, address: int) -> int:
        self._context()
        err, ptr = _drv.cuMemAddressReserve(size, alignment, address, 0)
        if err:
            self._dfail("cuMemAddressReserve", err, f"could not reserve {size} bytes of device addresses")
        return int(ptr)

    def _vmm_address_free(self, ptr: int, size: int) -> None:
        self._context()
        (err,) = _drv.cuMemAddressFree(ptr, size)
        if err:
            self._dfail("cuMemAddressFree", err)

    def _vmm_create(self, size: int, device: int, exportable: bool) -> int:
        self._context()
        err, handle = _drv.cuMemCreate(size, self._prop(device, exportable), 0)
        if err:
            self._dfail("cuMemCreate", err, f"cuMemCreate of {size} bytes on device {device} failed")
        return int(handle)

    def _vmm_release(self, handle: int) -> None:
        self._context()
        (err,) = _drv.cuMemRelease(handle)
        if err:
            self._dfail("cuMemRelease", err)

    def _vmm_map(self, ptr: int, size: int, handle: int, offset: int) -> None:
        self._context()
        (err,) = _drv.cuMemMap(ptr, size, offset, handle, 0)
        if err:
            self._dfail("cuMemMap", err)

    def _vmm_unmap(self, ptr: int, size: int) -> None:
        self._context()
        (err,) = _drv.cuMemUnmap(ptr, size)
        if err:
            self._dfail("cuMemUnmap", err)

    def _vmm_set_access(self, ptr: int, size: int, access: Sequence[tuple[int, int]]) -> None:
        self._context()
        key = tuple(access)
        descs = self._access.get(key)
        if descs is None:
            descs = []
            for device, flags in key:
                desc = _drv.CUmemAccessDesc()
                desc.location.type = _LOC_DEVICE
                desc.location.id = device
                desc.flags = _drv.CUmemAccess_flags(flags)
                descs.append(desc)
            if len(self._access) < 64:
                self._access[key] = descs
        (err,) = _drv.cuMemSetAccess(ptr, size, descs, len(descs))
        if err:
            self._dfail("cuMemSetAccess", err)

    def _vmm_get_access(self, ptr: int, device: int) -> int:
        self._context()
        loc = self._devlocs.get(device)
        if loc is None:
            loc = _drv.CUmemLocation()
            loc.type = _LOC_DEVICE
            loc.id = device
            self._devlocs[device] = loc
        err, flags = _drv.cuMemGetAccess(loc, ptr)
        if err:
            self._dfail("cuMemGetAccess", err)
        return int(flags)

    def _vmm_export_fd(self, handle: int) -> int:
        self._context()
        err, fd = _drv.cuMemExportToShareableHandle(handle, _POSIX_FD, 0)
        if err:
            self._dfail(
                "cuMemExportToShareableHandle",
                err,
                "could not export the allocation as a POSIX fd (was it created exportable?)",
            )
        return int(fd)

    def _vmm_import_fd(self, fd: int) -> int:
        self._context()
        # The POSIX fd is passed by value (cast to void*), not by address.
        err, handle = _drv.cuMemImportFromShareableHandle(fd, _POSIX_FD)
        if err:
            self._dfail("cuMemImportFromShareableHandle", err)
        return int(handle)

    def _vmm_retain(self, ptr: int) -> int:
        self._context()
        err, handle = _drv.cuMemRetainAllocationHandle(ptr)
        if err:
            self._dfail("cuMemRetainAllocationHandle", err)
        return int(handle)

    def _vmm_properties(self, handle: int) -> core.AllocationProperties:
        self._context()
        err, prop = _drv.cuMemGetAllocationPropertiesFromHandle(handle)
        if err:
            self._dfail("cuMemGetAllocationPropertiesFromHandle", err)
        return core.AllocationProperties(
            type=int(prop.type),
            location_device=int(prop.location.id),
            handle_types=int(prop.requestedHandleTypes),
        )
