"""HIP virtual memory, a part of :class:`aml_hip.runtime.HipRuntime` (its
``VIRTUAL_MEMORY`` group): ``hipMemAddressReserve``, ``hipMemCreate``, ``hipMemMap``,
``hipMemSetAccess``, the shareable handles and friends, with the structures of the
library's ABI (:mod:`aml_hip.abi`)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from ctypes import byref, c_int, c_size_t, c_ulonglong, c_void_p

from aml_core.errors import AMLNotSupported
from aml_core.gpu import runtime as core

from . import abi as C
from .calls import HipCalls
from .calls import vp as _vp

__all__ = ["HipVirtualMemory"]


class HipVirtualMemory(HipCalls, core.VirtualMemoryOps):
    """``hipMem*`` of the virtual-memory API."""

    def _prop(self, device: int, exportable: bool) -> ctypes.Structure:
        """A hipMemAllocationProp in this version's layout (docs/native-abi.md#hip-virtual-memory)."""
        prop = self.abi.allocation_prop()
        prop.type = C.hipMemAllocationTypePinned
        prop.requestedHandleType = (
            C.hipMemHandleTypePosixFileDescriptor if exportable else C.hipMemHandleTypeNone
        )
        prop.location.type = C.hipMemLocationTypeDevice
        prop.location.id = device
        return prop

    def _vmm_granularity(self, device: int, recommended: bool) -> int:
        prop = self._prop(device, False)
        out = c_size_t(0)
        option = (
            C.hipMemAllocationGranularityRecommended if recommended else C.hipMemAllocationGranularityMinimum
        )
        self.lib.call("hipMemGetAllocationGranularity", byref(out), byref(prop), option)
        return int(out.value)

    def _vmm_reserve(self, size: int, alignment: int, address: int) -> int:
        return self._out_ptr(
            "hipMemAddressReserve",
            size,
            alignment,
            _vp(address),
            0,
        )

    def _vmm_address_free(self, ptr: int, size: int) -> None:
        self.lib.call("hipMemAddressFree", _vp(ptr), size)

    def _vmm_create(self, size: int, device: int, exportable: bool) -> int:
        prop = self._prop(device, exportable)
        return self._out_ptr("hipMemCreate", size, byref(prop), 0)

    def _vmm_release(self, handle: int) -> None:
        self.lib.call("hipMemRelease", _vp(handle))

    def _vmm_map(self, ptr: int, size: int, handle: int, offset: int) -> None:
        self.lib.call(
            "hipMemMap",
            _vp(ptr),
            size,
            offset,
            _vp(handle),
            0,
        )

    def _vmm_unmap(self, ptr: int, size: int) -> None:
        self.lib.call("hipMemUnmap", _vp(ptr), size)

    def _vmm_set_access(self, ptr: int, size: int, access: Sequence[tuple[int, int]]) -> None:
        descs = (C.hipMemAccessDesc * len(access))()
        for desc, (device, flags) in zip(descs, access, strict=True):
            desc.location.type = C.hipMemLocationTypeDevice
            desc.location.id = device
            desc.flags = flags
        self.lib.call("hipMemSetAccess", _vp(ptr), size, descs, len(access))

    def _vmm_get_access(self, ptr: int, device: int) -> int:
        location = C.hipMemLocation(C.hipMemLocationTypeDevice, device)
        flags = c_ulonglong(0)
        self.lib.call("hipMemGetAccess", byref(flags), byref(location), _vp(ptr))
        return int(flags.value)

    def _shareable(self) -> None:
        if self.abi.shareable == "unsupported":
            raise AMLNotSupported(
                f"HIP {C.version_string(self.version)} cannot export or import virtual memory "
                "(hipMemExportToShareableHandle / hipMemImportFromShareableHandle return "
                "hipErrorNotSupported in HIP 6.0 and 6.1)"
            )

    def _vmm_export_fd(self, handle: int) -> int:
        self._shareable()
        fd = c_int(-1)
        self.lib.call(
            "hipMemExportToShareableHandle",
            byref(fd),
            _vp(handle),
            C.hipMemHandleTypePosixFileDescriptor,
            0,
        )
        return fd.value

    def _vmm_import_fd(self, fd: int) -> int:
        self._shareable()
        value = fd
        if self.abi.shareable == "value":
            # HIP >= 7.0: the fd cast to void*, like CUDA (docs/native-abi.md#hip-virtual-memory).
            return self._out_ptr(
                "hipMemImportFromShareableHandle", c_void_p(value), C.hipMemHandleTypePosixFileDescriptor
            )
        # HIP 6.2/6.3 (and 5.x, unverified): a pointer to the int fd (docs/native-abi.md#hip-virtual-memory).
        boxed = c_int(value)
        return self._out_ptr(
            "hipMemImportFromShareableHandle",
            c_void_p(ctypes.addressof(boxed)),
            C.hipMemHandleTypePosixFileDescriptor,
        )

    def _vmm_retain(self, ptr: int) -> int:
        return self._out_ptr("hipMemRetainAllocationHandle", _vp(ptr))

    def _vmm_properties(self, handle: int) -> core.AllocationProperties:
        prop = self.abi.allocation_prop()
        self.lib.call("hipMemGetAllocationPropertiesFromHandle", byref(prop), _vp(handle))
        return core.AllocationProperties(
            type=int(prop.type),
            location_device=int(prop.location.id),
            handle_types=int(prop.requestedHandleType),
        )
