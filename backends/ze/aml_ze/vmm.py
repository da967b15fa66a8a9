"""Level Zero virtual memory, a part of :class:`aml_ze.runtime.ZeRuntime` (its
``VIRTUAL_MEMORY`` group): ``zeVirtualMemReserve`` / ``zePhysicalMemCreate`` /
``zeVirtualMemMap`` and friends in the runtime's own context, with the physical
allocations and mappings tracked (Level Zero has no retain or property query: the facts
are aml-ze's records).
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Sequence
from ctypes import byref, c_size_t, c_uint32, c_void_p
from typing import TYPE_CHECKING, Final

import attrs

from aml_core.errors import AMLFailure, AMLNotSupported, AMLValueError
from aml_core.gpu.runtime import AllocationProperties, VirtualMemoryOps

from . import abi as C

if TYPE_CHECKING:
    from .native import ZeLibrary

__all__ = ["ZeVirtualMemory"]

#: Access values of the shared virtual-memory API (CUDA's) <-> ze_memory_access_attribute_t.
_TO_ZE_ACCESS: Final = {
    0: C.ZE_MEMORY_ACCESS_ATTRIBUTE_NONE,
    1: C.ZE_MEMORY_ACCESS_ATTRIBUTE_READONLY,
    3: C.ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE,
}
_FROM_ZE_ACCESS: Final = {v: k for k, v in _TO_ZE_ACCESS.items()}


def _vp(value: int) -> c_void_p:
    return c_void_p(value or None)


@attrs.define
class _Physical:
    size: int
    device: int
    refs: int = 1
    maps: int = 0


class ZeVirtualMemory(VirtualMemoryOps, abc.ABC):
    """The VIRTUAL_MEMORY group of the runtime, which sets ``lib`` and ``_lock``, calls
    ``ZeVirtualMemory.__init__`` and gives its context and device handles."""

    lib: ZeLibrary
    _lock: threading.RLock

    def __init__(self) -> None:
        self._physicals: dict[int, _Physical] = {}
        self._mappings: dict[int, tuple[int, int]] = {}
        #: unmapped address -> the physical allocation its unmap could not destroy
        self._undestroyed: dict[int, int] = {}

    @property
    @abc.abstractmethod
    def context(self) -> int:
        """The runtime's own context."""

    @abc.abstractmethod
    def handle(self, device: int) -> int:
        """The ``ze_device_handle_t`` of a device index."""

    def _vmm_granularity(self, device: int, recommended: bool) -> int:
        out = c_size_t(0)
        # The page size Level Zero would use for an allocation of this many bytes: the
        # smallest (1 byte) is the minimum granularity, 2 MiB the recommended one.
        size = (1 << 21) if recommended else 1
        self.lib.call(
            "zeVirtualMemQueryPageSize", _vp(self.context), _vp(self.handle(device)), size, byref(out)
        )
        g = int(out.value)
        if g <= 0 or g & (g - 1):
            raise AMLFailure(f"zeVirtualMemQueryPageSize returned SUCCESS and page size {g}")
        return g

    def _vmm_reserve(self, size: int, alignment: int, address: int) -> int:
        out = c_void_p()
        self.lib.call("zeVirtualMemReserve", _vp(self.context), _vp(address), size, byref(out))
        ptr = int(out.value or 0)
        if not ptr:
            raise AMLFailure("zeVirtualMemReserve returned SUCCESS and a NULL pointer")
        if alignment and ptr % alignment:
            self.lib.call("zeVirtualMemFree", _vp(self.context), _vp(ptr), size)
            raise AMLNotSupported(
                f"zeVirtualMemReserve has no alignment argument and returned 0x{ptr:x}, "
                f"not aligned to {alignment}"
            )
        return ptr

    def _vmm_address_free(self, ptr: int, size: int) -> None:
        self.lib.call("zeVirtualMemFree", _vp(self.context), _vp(ptr), size)

    def _vmm_create(self, size: int, device: int, exportable: bool) -> int:
        desc = C.ze_physical_mem_desc_t(C.ZE_STRUCTURE_TYPE_PHYSICAL_MEM_DESC, None, 0, size)
        out = c_void_p()
        self.lib.call(
            "zePhysicalMemCreate", _vp(self.context), _vp(self.handle(device)), byref(desc), byref(out)
        )
        handle = int(out.value or 0)
        if not handle:
            raise AMLFailure("zePhysicalMemCreate returned SUCCESS and a NULL handle")
        with self._lock:
            self._physicals[handle] = _Physical(size, device)
        return handle

    def _tracked(self, handle: int) -> _Physical:
        found = self._physicals.get(handle)
        if found is None:
            raise AMLValueError(f"0x{handle:x} is not a live physical allocation of this runtime")
        return found

    def _destroy_if_unused(self, handle: int, phys: _Physical) -> None:
        if phys.refs <= 0 and phys.maps <= 0:
            self.lib.call("zePhysicalMemDestroy", _vp(self.context), _vp(handle))
            del self._physicals[handle]

    def _vmm_release(self, handle: int) -> None:
        with self._lock:
            phys = self._tracked(handle)
            phys.refs -= 1
            try:
                self._destroy_if_unused(handle, phys)
            except BaseException:
                phys.refs += 1  # still alive: keep it tracked
                raise

    def _vmm_map(self, ptr: int, size: int, handle: int, offset: int) -> None:
        with self._lock:
            phys = self._tracked(handle)
            self.lib.call(
                "zeVirtualMemMap",
                _vp(self.context),
                _vp(ptr),
                size,
                _vp(handle),
                offset,
                C.ZE_MEMORY_ACCESS_ATTRIBUTE_NONE,
            )
            phys.maps += 1
            self._mappings[ptr] = (size, handle)

    def _vmm_unmap(self, ptr: int, size: int) -> None:
        with self._lock:
            handle = self._undestroyed.get(ptr)
            if handle is None:
                self.lib.call("zeVirtualMemUnmap", _vp(self.context), _vp(ptr), size)
                found = self._mappings.pop(ptr, None)
                if found is None:
                    return
                handle = found[1]
                phys = self._physicals.get(handle)
                if phys is None:
                    return
                phys.maps -= 1
            else:  # unmapped already: this retry destroys what the last unmap could not
                phys = self._physicals[handle]
            try:
                self._destroy_if_unused(handle, phys)
            except BaseException:
                # The range is unmapped, but the physical allocation it was the last user
                # of is not destroyed: the caller keeps the mapping, and its retry of this
                # unmap (or close()) destroys it without unmapping twice.
                self._undestroyed[ptr] = handle
                raise
            self._undestroyed.pop(ptr, None)

    def _vmm_set_access(self, ptr: int, size: int, access: Sequence[tuple[int, int]]) -> None:
        wanted = {flags for _, flags in access}
        if len(wanted) != 1:
            raise AMLNotSupported(
                "Level Zero sets one access attribute per range for every device of the context; "
                f"got different accesses {sorted(wanted)}"
            )
        self.lib.call(
            "zeVirtualMemSetAccessAttribute", _vp(self.context), _vp(ptr), size, _TO_ZE_ACCESS[wanted.pop()]
        )

    def _vmm_get_access(self, ptr: int, device: int) -> int:
        self.handle(device)
        size = next((s for p, (s, _) in self._mappings.items() if p <= ptr < p + s), 0)
        if not size:
            raise AMLValueError(f"0x{ptr:x} is not mapped by this runtime")
        access = c_uint32(0)
        out = c_size_t(0)
        self.lib.call(
            "zeVirtualMemGetAccessAttribute", _vp(self.context), _vp(ptr), size, byref(access), byref(out)
        )
        value = _FROM_ZE_ACCESS.get(int(access.value))
        if value is None:
            raise AMLFailure(f"zeVirtualMemGetAccessAttribute returned unknown access {access.value}")
        return value

    _NO_EXPORT: Final = (
        "Level Zero 1.4 cannot share a physical allocation as a file descriptor "
        "(zePhysicalMemCreate has no external-memory export; only zeMemAlloc* memory is shared, "
        "through IPC handles)"
    )

    def _vmm_export_fd(self, handle: int) -> int:
        self._tracked(handle)
        raise AMLNotSupported(self._NO_EXPORT)

    def _vmm_import_fd(self, fd: int) -> int:
        raise AMLNotSupported(self._NO_EXPORT)

    def _vmm_retain(self, ptr: int) -> int:
        with self._lock:
            found = self._mappings.get(ptr)
            if found is None:
                raise AMLValueError(f"0x{ptr:x} is not a mapping of this runtime")
            self._physicals[found[1]].refs += 1
            return found[1]

    def _vmm_properties(self, handle: int) -> AllocationProperties:
        phys = self._tracked(handle)
        # Level Zero has no query: these are the facts aml-ze recorded at creation
        # (device memory, no shareable handle type).
        return AllocationProperties(type=1, location_device=phys.device, handle_types=0)
