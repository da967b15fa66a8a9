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

The runtime is written by concern: this module holds the devices and allocation;
:mod:`aml_cuda.managed` the rest of MANAGED, :mod:`aml_cuda.streams` STREAMS and
STREAM_ORDERED, :mod:`aml_cuda.sharing` PEER and IPC, :mod:`aml_cuda.vmm` VIRTUAL_MEMORY,
each a part of :class:`CudaRuntime` over :class:`aml_cuda.calls.CudaCalls` (the bindings,
the error tables and the driver's set-up).
"""

from __future__ import annotations

import threading
from typing import Any

from aml_core.backend_api import NativeAllocator
from aml_core.buffer import DLDeviceType
from aml_core.errors import AMLNotSupported
from aml_core.gpu import runtime as core
from aml_core.specs import DeviceInfo

from . import nvml
from .calls import _drv, _rt
from .calls import version_text as _version
from .errors import DRIVER_ERRORS, RUNTIME_ERRORS
from .managed import TRAITS_ADVICES, TRAITS_RANGE_ATTRIBUTES, CudaManaged
from .native import (
    CYRUNTIME_SENTINEL,
    bindings_version,
    cyruntime_functions,
    display_driver_version,
)
from .sharing import CudaSharing
from .streams import CudaStreams
from .vmm import CudaVirtualMemory

__all__ = [
    "TRAITS_ADVICES",
    "TRAITS_RANGE_ATTRIBUTES",
    "CudaRuntime",
]


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
_MEMCPY_DEFAULT = _rt.cudaMemcpyKind.cudaMemcpyDefault

_HOST_PORTABLE = int(_rt.cudaHostAllocPortable)
_HOST_MAPPED = int(_rt.cudaHostAllocMapped)
_REGISTER_PORTABLE = int(_rt.cudaHostRegisterPortable)
_REGISTER_MAPPED = int(_rt.cudaHostRegisterMapped)
_ATTACH_GLOBAL = int(_rt.cudaMemAttachGlobal)
_ATTACH_HOST = int(_rt.cudaMemAttachHost)

_MEMORY_TYPES = {
    int(_rt.cudaMemoryType.cudaMemoryTypeUnregistered): "unregistered",
    int(_rt.cudaMemoryType.cudaMemoryTypeHost): "host",
    int(_rt.cudaMemoryType.cudaMemoryTypeDevice): "device",
    int(_rt.cudaMemoryType.cudaMemoryTypeManaged): "managed",
}
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


class CudaRuntime(
    core.Runtime,
    core.AllocationOps,
    CudaManaged,
    CudaStreams,
    CudaSharing,
    CudaVirtualMemory,
):
    """Every capability group over ``cuda-bindings``."""

    def __init__(self) -> None:
        self.errors = RUNTIME_ERRORS
        self.driver_errors = DRIVER_ERRORS
        err, runtime_version = self._raw("cudaRuntimeGetVersion")
        self.runtime_version = int(runtime_version) if not err else 0
        err, driver_version = self._raw("cudaDriverGetVersion")
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
        self._primary = {}
        self._locations = {}
        self._granularity = {}
        self._props = {}
        self._access = {}
        self._devlocs = {}
        self._libcuda = None
        self._native: NativeAllocator | None = None
        self._native_checked = False

    def __repr__(self) -> str:
        return f"<CudaRuntime {self.traits.version}>"

    # -- devices ---------------------------------------------------------------------------
    def device_count(self) -> int:
        count = self._count
        if count is not None:
            return count
        err, n = self._raw("cudaGetDeviceCount")
        if err:
            rt = _version(self.runtime_version) if self.runtime_version else "13"
            messages = {
                _ERR_NO_DRIVER: f"no usable NVIDIA driver: libcuda.so.1 is missing or older than CUDA {rt}",
                _ERR_NO_DEVICE: "no CUDA device is visible to this process",
            }
            self._fail("cudaGetDeviceCount", err, messages.get(int(err)))
        self._count = int(n)
        return self._count

    def get_device(self) -> int:
        return int(self._hot("cudaGetDevice", _cudaGetDevice()))

    def _set_device(self, device: int) -> None:
        self._hot("cudaSetDevice", _cudaSetDevice(device), device)

    def synchronize(self) -> None:
        self._call("cudaDeviceSynchronize")

    def _attribute(self, dev: Any, attribute: Any) -> int:
        return int(self._dcall("cuDeviceGetAttribute", attribute, dev))

    def _device_info(self, device: int) -> DeviceInfo:
        """Name, memory, capabilities and details of a device, through the driver API
        only: no context is created and nothing is allocated."""
        dev = self._cu_device(device)
        raw = self._dcall("cuDeviceGetName", 256, dev)
        name = bytes(raw).split(b"\0", 1)[0].decode(errors="replace").strip()
        total = self._dcall("cuDeviceTotalMem", dev)
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
        bus = self._dcall("cuDeviceGetPCIBusId", 32, dev)
        pci = bytes(bus).split(b"\0", 1)[0].decode(errors="replace")
        return nvml.free_memory(pci) if pci else None

    def _link(self, bus: str, peer: str) -> str | None:
        """NVML's answer (:func:`aml_cuda.nvml.link`: the NVLinks between them, else the
        PCIe path), else what sysfs tells (the base class)."""
        return nvml.link(bus, peer) or super()._link(bus, peer)

    def memory_info(self) -> tuple[int, int]:
        """``cudaMemGetInfo``: (free, total) bytes of the current device."""
        free, total = self._call("cudaMemGetInfo")
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

    def _malloc(self, size: int) -> int:
        return int(self._hot("cudaMalloc", _cudaMalloc(size), size))

    def _free(self, ptr: int) -> None:
        self._hot("cudaFree", _cudaFree(ptr))

    def _host_alloc(self, size: int, portable: bool, mapped: bool) -> int:
        flags = (_HOST_PORTABLE if portable else 0) | (_HOST_MAPPED if mapped else 0)
        return int(self._hot("cudaHostAlloc", _cudaHostAlloc(size, flags), size, flags))

    def _free_host(self, ptr: int) -> None:
        self._hot("cudaFreeHost", _cudaFreeHost(ptr))

    def _malloc_managed(self, size: int, attach_global: bool) -> int:
        flags = _ATTACH_GLOBAL if attach_global else _ATTACH_HOST
        return int(self._hot("cudaMallocManaged", _cudaMallocManaged(size, flags), size))

    def _host_register(self, ptr: int, size: int, portable: bool, mapped: bool) -> None:
        flags = (_REGISTER_PORTABLE if portable else 0) | (_REGISTER_MAPPED if mapped else 0)
        self._call("cudaHostRegister", ptr, size, flags)

    def _host_unregister(self, ptr: int) -> None:
        self._call("cudaHostUnregister", ptr)

    def _host_device_pointer(self, ptr: int) -> int:
        return int(self._hot("cudaHostGetDevicePointer", _cudaHostGetDevicePointer(ptr, 0)))

    def _pointer_attributes(self, ptr: int) -> core.PointerAttributes:
        attrs = self._call("cudaPointerGetAttributes", ptr)
        kind = int(attrs.type)
        return core.PointerAttributes(
            memory_type=_MEMORY_TYPES.get(kind, "unregistered"),
            device=int(attrs.device),
            device_pointer=int(attrs.devicePointer or 0),
            host_pointer=int(attrs.hostPointer or 0),
            is_managed=kind == int(_rt.cudaMemoryType.cudaMemoryTypeManaged),
        )

    def _memcpy(self, dst: int, src: int, size: int) -> None:
        self._hot("cudaMemcpy", _cudaMemcpy(dst, src, size, _MEMCPY_DEFAULT))

    def _memset(self, ptr: int, value: int, size: int) -> None:
        """``cudaMemset``, then a synchronization of the default stream, so that the
        bytes are set when this returns (whatever the kind of memory)."""
        self._call("cudaMemset", ptr, value, size)
        self._call("cudaStreamSynchronize", 0)
