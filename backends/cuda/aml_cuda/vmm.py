"""CUDA virtual memory, a part of :class:`aml_cuda.runtime.CudaRuntime` (its
``VIRTUAL_MEMORY`` group), through the driver API (``cuMemAddressReserve``,
``cuMemCreate``, ``cuMemMap``, ``cuMemSetAccess``, the POSIX-fd shareable handles) with the
current device's primary context made current on the calling thread when none is."""

from __future__ import annotations

import abc
import threading
from collections.abc import Sequence
from typing import Any

from aml_core.gpu import runtime as core

from .calls import CudaCalls, _drv

__all__ = ["CudaVirtualMemory"]

_POSIX_FD = _drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_NO_HANDLE = _drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
_PINNED = _drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
_LOC_DEVICE = _drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
_GRAN_MIN = _drv.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
_GRAN_REC = _drv.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED


class CudaVirtualMemory(CudaCalls, core.VirtualMemoryOps):
    """``cuMem*`` of the virtual-memory API."""

    _lock: threading.Lock
    _primary: dict[int, Any]
    _granularity: dict[tuple[int, bool], int]
    # Bindings structs the driver calls only read, built once.
    _props: dict[tuple[int, bool], Any]
    _access: dict[tuple[tuple[int, int], ...], list[Any]]
    _devlocs: dict[int, Any]

    @abc.abstractmethod
    def get_device(self) -> int: ...

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
