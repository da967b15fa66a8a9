"""``HipRuntime``: every capability group of :mod:`aml_core.gpu.runtime` over HIP, through
ctypes.

The group classes validate the Python arguments before these native operations run
(types, ranges, the 64-byte IPC handle, the advice and attribute numbers in
:attr:`core.RuntimeTraits.advices` / ``range_attributes``), so bad input is an
:class:`~aml_core.errors.AMLValueError` / :class:`~aml_core.errors.AMLTypeError` and never
reaches ctypes; native failures raise through the HIP error table (:mod:`aml_hip.errors`).
Version differences come from :class:`~aml_hip.abi.HipAbi`; a library without the
virtual-memory calls, or without the stream-ordered ones (``hipMallocAsync``... , exported
since HIP 5.1), does not provide that group (:meth:`HipRuntime.missing_groups`).

The runtime is written by concern: this module holds the devices, allocation and managed
memory; :mod:`aml_hip.streams` the STREAMS and STREAM_ORDERED groups, :mod:`aml_hip.sharing`
PEER and IPC, :mod:`aml_hip.vmm` VIRTUAL_MEMORY, each a part of :class:`HipRuntime` that calls
the library through :class:`aml_hip.calls.HipCalls`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from ctypes import byref, c_int, c_size_t, c_void_p
from typing import NoReturn

from aml_core import checks
from aml_core.backend_api import NativeAllocator
from aml_core.buffer import DLDeviceType
from aml_core.errors import AMLNotSupported, AMLValueError
from aml_core.gpu import runtime as core
from aml_core.specs import DeviceInfo

from . import abi as C
from .calls import vp as _vp
from .native import STREAM_ORDERED_FUNCTIONS, VMM_FUNCTIONS, HipLibrary
from .sharing import HipSharing
from .streams import HipStreams
from .vmm import HipVirtualMemory

__all__ = ["HipRuntime"]

_ADVICES = frozenset(
    {
        C.hipMemAdviseSetReadMostly,
        C.hipMemAdviseUnsetReadMostly,
        C.hipMemAdviseSetPreferredLocation,
        C.hipMemAdviseUnsetPreferredLocation,
        C.hipMemAdviseSetAccessedBy,
        C.hipMemAdviseUnsetAccessedBy,
        C.hipMemAdviseSetCoarseGrain,
        C.hipMemAdviseUnsetCoarseGrain,
    }
)
_RANGE_ATTRIBUTES = frozenset(
    {
        C.hipMemRangeAttributeReadMostly,
        C.hipMemRangeAttributePreferredLocation,
        C.hipMemRangeAttributeAccessedBy,
        C.hipMemRangeAttributeLastPrefetchLocation,
        C.hipMemRangeAttributeCoherencyMode,
    }
)
_COUNT_MESSAGES = {
    C.hipErrorNoDevice: "no HIP device found (no AMD GPU, or /dev/kfd is not accessible)",
    C.hipErrorInsufficientDriver: "the AMD GPU driver is missing or older than this HIP runtime",
}
#: The managed-memory granule and advise alignment HIP documents: 4 KiB
#: (docs/aml-contract.md#hip-managed-memory).
MANAGED_GRANULE = 4096


class HipRuntime(
    core.Runtime,
    core.AllocationOps,
    core.ManagedOps,
    HipStreams,
    HipSharing,
    HipVirtualMemory,
):
    """HIP's native calls for the shared GPU logic (:mod:`aml_core.gpu`)."""

    def __init__(self, library: HipLibrary) -> None:
        self.lib = library
        self.errors = library.errors
        self.abi = library.abi
        self.version = library.version
        self.traits = core.RuntimeTraits(
            name="hip",
            # DLPack has no "ROCm managed" type: managed memory is kDLROCM of its device
            # (and host-accessible through the buffer protocol).
            dl_device=DLDeviceType.ROCM,
            dl_host=DLDeviceType.ROCM_HOST,
            dl_managed=DLDeviceType.ROCM,
            managed_granule=MANAGED_GRANULE,
            advise_alignment=MANAGED_GRANULE,
            advices=_ADVICES,
            range_attributes=_RANGE_ATTRIBUTES,
            versions={"HIP": library.version_text.removeprefix("HIP "), "library": library.path},
        )
        self._native: NativeAllocator | None = None
        self._native_checked = False

    def missing_groups(self) -> Mapping[core.Group, str]:
        """HIP libraries without the virtual-memory calls (``hipMemCreate``...) or the
        stream-ordered ones (``hipMallocAsync``, ``hipFreeAsync``, the events) do not
        provide that group."""
        missing: dict[core.Group, str] = {}
        for group, names in (
            (core.Group.VIRTUAL_MEMORY, VMM_FUNCTIONS),
            (core.Group.STREAM_ORDERED, STREAM_ORDERED_FUNCTIONS),
        ):
            absent = [n for n in names if not self.lib.has(n)]
            if absent:
                missing[group] = (
                    f"{self.lib.path} ({self.lib.version_text}) does not export {', '.join(absent)}"
                )
        return missing

    # -- devices -----------------------------------------------------------------------------
    def device_count(self) -> int:
        n = c_int(0)
        rc = self.lib.raw("hipGetDeviceCount", byref(n))
        if rc != C.hipSuccess:
            message = _COUNT_MESSAGES.get(rc, "cannot count HIP devices")
            raise self.errors.error("hipGetDeviceCount", rc, message)
        return max(0, n.value)

    def get_device(self) -> int:
        d = c_int(-1)
        self.lib.call("hipGetDevice", byref(d))
        return d.value

    def _set_device(self, device: int) -> None:
        self.lib.call("hipSetDevice", device)

    def _free_memory(self, device: int) -> int | None:
        """``hipMemGetInfo`` answers for the current device: select ``device``, ask, and
        give the caller's current device back (also when the query fails)."""
        free, total = c_size_t(0), c_size_t(0)
        current = self.get_device()
        if current != device:
            self.lib.call("hipSetDevice", device)
        try:
            self.lib.call("hipMemGetInfo", byref(free), byref(total))
        finally:
            if current != device:
                self.lib.call("hipSetDevice", current)
        if free.value > total.value:  # an impossible "success"
            return None
        return int(free.value)

    def attribute(self, attr: int, device: int) -> int:
        """``hipDeviceGetAttribute`` (the attribute ids of :mod:`aml_hip.abi`)."""
        value = c_int(0)
        attr = checks.c_int(attr, "attribute")
        self.lib.call("hipDeviceGetAttribute", byref(value), attr, checks.device(device))
        return value.value

    def _attribute_or(self, attr: int | None, device: int, default: int) -> int:
        """The attribute, or ``default`` where this library does not know it (it answers
        hipErrorInvalidValue or hipErrorNotSupported); any other failure is raised (a
        failing query must not report a default such as VMM support)."""
        if attr is None:
            return default
        try:
            return self.attribute(attr, device)
        except (AMLValueError, AMLNotSupported) as exc:
            native = exc.native
            if native is not None and native.code in (C.hipErrorInvalidValue, C.hipErrorNotSupported):
                return default
            raise

    def _device_info(self, device: int) -> DeviceInfo:
        d = device
        name = ctypes.create_string_buffer(256)
        self.lib.call("hipDeviceGetName", name, len(name), d)
        total = c_size_t(0)
        self.lib.call("hipDeviceTotalMem", byref(total), d)
        managed = self._attribute_or(C.hipDeviceAttributeManagedMemory, d, 0)
        concurrent = self._attribute_or(C.hipDeviceAttributeConcurrentManagedAccess, d, 0)
        pageable = self._attribute_or(C.hipDeviceAttributePageableMemoryAccess, d, 0)
        has_vmm = self.why_missing(core.Group.VIRTUAL_MEMORY) is None
        # 5.x has no VMM attribute (docs/native-abi.md#hip-device-attributes): the exported symbols tell.
        vmm = self._attribute_or(self.abi.attr_vmm_supported, d, 1) if has_vmm else 0
        domain = self._attribute_or(C.hipDeviceAttributePciDomainID, d, 0)
        bus = self._attribute_or(C.hipDeviceAttributePciBusId, d, 0)
        slot = self._attribute_or(C.hipDeviceAttributePciDeviceId, d, 0)
        major = self._attribute_or(C.hipDeviceAttributeComputeCapabilityMajor, d, 0)
        minor = self._attribute_or(C.hipDeviceAttributeComputeCapabilityMinor, d, 0)
        return DeviceInfo(
            index=d,
            name=name.value.decode("utf-8", "replace") or f"HIP device {d}",
            total_memory=int(total.value),
            capabilities=core.device_capabilities(
                self,
                managed=bool(managed),
                concurrent=bool(concurrent),
                pageable=bool(pageable),
                vmm=bool(vmm),
            ),
            details={
                "hip_version": C.version_string(self.version),
                "abi": self.abi.label,
                "library": self.lib.path,
                "pci_bus_id": f"{domain:04x}:{bus:02x}:{slot:02x}",
                "compute_capability": f"{major}.{minor}",
                "multiprocessors": self._attribute_or(C.hipDeviceAttributeMultiprocessorCount, d, 0),
            },
        )

    def synchronize(self) -> None:
        self.lib.call("hipDeviceSynchronize")

    # -- allocation --------------------------------------------------------------------------
    def native_allocator(self) -> NativeAllocator | None:
        """hipGetDevice, hipMalloc, hipFree, hipMallocManaged and the version's host pair
        as C function pointers of the loaded library, for GpuArea's compiled path; a
        failure raises through the same table as :meth:`HipLibrary.call`. None for a
        subclass that replaces one of those methods
        (:func:`aml_core.gpu.runtime.replaces_native`)."""
        if getattr(self, "_native_checked", False):  # a subclass may skip __init__
            return self._native
        self._native = None if core.replaces_native(self, HipRuntime) else self._make_native_allocator()
        self._native_checked = True
        return self._native

    def _make_native_allocator(self) -> NativeAllocator:
        lib = self.lib

        def address(name: str) -> int:
            return int(ctypes.cast(lib.native.function(name), c_void_p).value or 0)

        def fail(function: str, code: int, *args: object) -> NoReturn:
            raise self.errors.error(function, code, None)

        names = {
            "get_device": "hipGetDevice",
            "malloc": "hipMalloc",
            "free": "hipFree",
            "malloc_managed": "hipMallocManaged",
            "host_alloc": lib.host_alloc,
            "free_host": lib.host_free,
        }
        return NativeAllocator(
            **{op: address(name) for op, name in names.items()},
            fail=fail,
            names=names,
            attach_host=C.hipMemAttachHost,
            attach_global=C.hipMemAttachGlobal,
            host_portable=C.hipHostMallocDefault | C.hipHostMallocPortable,
            owner=lib,
        )

    def _malloc(self, size: int) -> int:
        return self._out_ptr("hipMalloc", size)

    def _free(self, ptr: int) -> None:
        self.lib.call("hipFree", _vp(ptr))

    def _host_alloc(self, size: int, portable: bool, mapped: bool) -> int:
        flags = C.hipHostMallocDefault
        if portable:
            flags |= C.hipHostMallocPortable
        if mapped:
            flags |= C.hipHostMallocMapped
        return self._out_ptr(self.lib.host_alloc, size, flags)

    def _free_host(self, ptr: int) -> None:
        self.lib.call(self.lib.host_free, _vp(ptr))

    def _malloc_managed(self, size: int, attach_global: bool) -> int:
        flags = C.hipMemAttachGlobal if attach_global else C.hipMemAttachHost
        return self._out_ptr("hipMallocManaged", size, flags)

    def _host_register(self, ptr: int, size: int, portable: bool, mapped: bool) -> None:
        flags = C.hipHostRegisterDefault
        if portable:
            flags |= C.hipHostRegisterPortable
        if mapped:
            flags |= C.hipHostRegisterMapped
        self.lib.call("hipHostRegister", _vp(ptr), size, flags)

    def _host_unregister(self, ptr: int) -> None:
        self.lib.call("hipHostUnregister", _vp(ptr))

    def _host_device_pointer(self, ptr: int) -> int:
        return self._out_ptr("hipHostGetDevicePointer", _vp(ptr), 0)

    def _pointer_attributes(self, ptr: int) -> core.PointerAttributes:
        attr = C.hipPointerAttribute_t()
        self.lib.call("hipPointerGetAttributes", byref(attr), _vp(ptr))
        kind = self.abi.memory_kind(attr.type)
        if attr.isManaged or kind in ("managed", "unified"):
            memory_type = "managed"
        elif kind in ("device", "array"):
            memory_type = "device"
        elif kind == "host":
            memory_type = "host"
        else:
            memory_type = "unregistered"
        return core.PointerAttributes(
            memory_type=memory_type,
            device=attr.device,
            device_pointer=int(attr.devicePointer or 0),
            host_pointer=int(attr.hostPointer or 0),
            is_managed=bool(attr.isManaged),
        )

    def _memcpy(self, dst: int, src: int, size: int) -> None:
        self.lib.call("hipMemcpy", _vp(dst), _vp(src), size, C.hipMemcpyDefault)

    def _memset(self, ptr: int, value: int, size: int) -> None:
        self.lib.call("hipMemset", _vp(ptr), value, size)

    # -- managed memory (docs/aml-contract.md#hip-managed-memory) ------------------------------
    def _mem_prefetch(self, ptr: int, size: int, device: int, stream: int) -> None:
        self.lib.call(
            "hipMemPrefetchAsync",
            _vp(ptr),
            size,
            device,
            _vp(stream),
        )

    def _mem_advise(self, ptr: int, size: int, advice: int, device: int) -> None:
        self.lib.call("hipMemAdvise", _vp(ptr), size, advice, device)

    def _mem_range_attributes(
        self, ptr: int, size: int, requests: Sequence[tuple[int, int]]
    ) -> list[list[int]]:
        p, n = ptr, size
        buffers: list[ctypes.Array[c_int]] = []
        attributes: list[int] = []
        for attr, count in requests:
            buffers.append((c_int * count)())
            attributes.append(attr)
        if len(buffers) == 1:
            buf = buffers[0]
            self.lib.call(
                "hipMemRangeGetAttribute",
                ctypes.cast(buf, c_void_p),
                ctypes.sizeof(buf),
                attributes[0],
                _vp(p),
                n,
            )
        else:
            count = len(buffers)
            data = (c_void_p * count)(*(ctypes.cast(b, c_void_p) for b in buffers))
            sizes = (c_size_t * count)(*(ctypes.sizeof(b) for b in buffers))
            attrs = (c_int * count)(*attributes)
            self.lib.call("hipMemRangeGetAttributes", data, sizes, attrs, count, _vp(p), n)
        return [list(b) for b in buffers]

    def _stream_attach(self, stream: int, ptr: int, size: int, flags: int) -> None:
        self.lib.call(
            "hipStreamAttachMemAsync",
            _vp(stream),
            _vp(ptr),
            size,
            flags,
        )
