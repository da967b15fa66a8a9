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
        ctx = self._dcall("cuCtxGetCurrent")
        if ctx is not None and int(ctx):
            return
        device = self.get_device()
        with self._lock:
            primary = self._primary.get(device)
            if primary is None:
                primary = self._dcall("cuDevicePrimaryCtxRetain", self._cu_device(device))
                self._primary[device] = primary
        self._dcall("cuCtxSetCurrent", primary)

    def _vcall(self, function: str, *args: Any, message: str | None = None) -> Any:
        """A driver call of the virtual-memory API (:meth:`_dcall`), with a context made
        current on this thread first (:meth:`_context`)."""
        self._context()
        return self._dcall(function, *args, message=message)

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
        gran = self._vcall(
            "cuMemGetAllocationGranularity", self._prop(device, True), _GRAN_REC if recommended else _GRAN_MIN
        )
        self._granularity[key] = int(gran)
        return int(gran)

    def _vmm_reserve(self, size: int, alignment: int, address: int) -> int:
        return int(
            self._vcall(
                "cuMemAddressReserve",
                size,
                alignment,
                address,
                0,
                message=f"could not reserve {size} bytes of device addresses",
            )
        )

    def _vmm_address_free(self, ptr: int, size: int) -> None:
        self._vcall("cuMemAddressFree", ptr, size)

    def _vmm_create(self, size: int, device: int, exportable: bool) -> int:
        return int(
            self._vcall(
                "cuMemCreate",
                size,
                self._prop(device, exportable),
                0,
                message=f"cuMemCreate of {size} bytes on device {device} failed",
            )
        )

    def _vmm_release(self, handle: int) -> None:
        self._vcall("cuMemRelease", handle)

    def _vmm_map(self, ptr: int, size: int, handle: int, offset: int) -> None:
        self._vcall("cuMemMap", ptr, size, offset, handle, 0)

    def _vmm_unmap(self, ptr: int, size: int) -> None:
        self._vcall("cuMemUnmap", ptr, size)

    def _vmm_set_access(self, ptr: int, size: int, access: Sequence[tuple[int, int]]) -> None:
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
        self._vcall("cuMemSetAccess", ptr, size, descs, len(descs))

    def _vmm_get_access(self, ptr: int, device: int) -> int:
        loc = self._devlocs.get(device)
        if loc is None:
            loc = _drv.CUmemLocation()
            loc.type = _LOC_DEVICE
            loc.id = device
            self._devlocs[device] = loc
        return int(self._vcall("cuMemGetAccess", loc, ptr))

    def _vmm_export_fd(self, handle: int) -> int:
        fd = self._vcall(
            "cuMemExportToShareableHandle",
            handle,
            _POSIX_FD,
            0,
            message="could not export the allocation as a POSIX fd (was it created exportable?)",
        )
        return int(fd)

    def _vmm_import_fd(self, fd: int) -> int:
        # The POSIX fd is passed by value (cast to void*), not by address.
        return int(self._vcall("cuMemImportFromShareableHandle", fd, _POSIX_FD))

    def _vmm_retain(self, ptr: int) -> int:
        return int(self._vcall("cuMemRetainAllocationHandle", ptr))

    def _vmm_properties(self, handle: int) -> core.AllocationProperties:
        prop = self._vcall("cuMemGetAllocationPropertiesFromHandle", handle)
        return core.AllocationProperties(
            type=int(prop.type),
            location_device=int(prop.location.id),
            handle_types=int(prop.requestedHandleTypes),
        )
