"""``HipRuntime``: the :class:`aml_core.gpu.runtime.GpuRuntime` of HIP, over ctypes.

Every method validates its Python arguments before the native call (types, ranges, the
64-byte IPC handle, the advice and attribute numbers HIP knows), so bad input is an
:class:`~aml_core.errors.AMLValueError` / :class:`~aml_core.errors.AMLTypeError`, never
a crash of the interpreter; native failures raise through the HIP error table
(:mod:`aml_hip.errors`). Version differences come from :class:`~aml_hip.constants.HipAbi`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from ctypes import byref, c_int, c_size_t, c_ulonglong, c_void_p

from aml_core.errors import AMLNotSupported, AMLTypeError, AMLValueError
from aml_core.gpu.backend import device_capabilities
from aml_core.gpu.runtime import AllocationProperties, PointerAttributes, RuntimeTraits
from aml_core.specs import DeviceInfo

from . import constants as C
from .library import VMM_FUNCTIONS, HipLibrary

__all__ = ["DL_ROCM", "DL_ROCM_HOST", "HipRuntime"]

#: DLPack device types (dlpack.h): kDLROCM and kDLROCMHost. DLPack has no "ROCm managed"
#: type: managed memory is exported as kDLROCM of its device (and is host-accessible
#: through the buffer protocol).
DL_ROCM = 10
DL_ROCM_HOST = 11

_U64 = (1 << 64) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
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
_ATTACH = frozenset({C.hipMemAttachGlobal, C.hipMemAttachHost, C.hipMemAttachSingle})
_ACCESS = frozenset(
    {
        C.hipMemAccessFlagsProtNone,
        C.hipMemAccessFlagsProtRead,
        C.hipMemAccessFlagsProtReadWrite,
    }
)
_COUNT_MESSAGES = {
    C.hipErrorNoDevice: "no HIP device found (no AMD GPU, or /dev/kfd is not accessible)",
    C.hipErrorInsufficientDriver: "the AMD GPU driver is missing or older than this HIP runtime",
}
#: The managed-memory granule and advise alignment HIP documents (hipMallocManaged: 4 KiB).
MANAGED_GRANULE = 4096


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise AMLTypeError(f"{what} must be an int, not {type(value).__name__}")
    return value


def _ptr(value: object, what: str = "ptr", *, null: bool = False) -> int:
    v = _int(value, what)
    if v < 0 or v > _U64 or (v == 0 and not null):
        raise AMLValueError(f"{what} must be a {'' if null else 'non-NULL '}64-bit address, got {v:#x}")
    return v


def _size(value: object, what: str = "size", *, zero: bool = False) -> int:
    v = _int(value, what)
    if v < 0 or v > _U64 or (v == 0 and not zero):
        raise AMLValueError(f"{what} must be {'>= 0' if zero else '> 0'} and fit in size_t, got {v}")
    return v


def _cint(value: object, what: str) -> int:
    v = _int(value, what)
    if not _INT_MIN <= v <= _INT_MAX:
        raise AMLValueError(f"{what} {v} does not fit in a C int")
    return v


def _vp(value: int) -> c_void_p:
    return c_void_p(value or None)


class HipRuntime:
    """HIP's native calls for the shared GPU logic (:mod:`aml_core.gpu`)."""

    def __init__(self, library: HipLibrary) -> None:
        self.lib = library
        self.errors = library.errors
        self.abi = library.abi
        self.version = library.version
        self.traits = RuntimeTraits(
            name="hip",
            dl_device=DL_ROCM,
            dl_host=DL_ROCM_HOST,
            dl_managed=DL_ROCM,
            managed_granule=MANAGED_GRANULE,
            advise_alignment=MANAGED_GRANULE,
            advices=_ADVICES,
            range_attributes=_RANGE_ATTRIBUTES,
            version=f"{library.version_text}, {library.path}",
        )

    # -- helpers -----------------------------------------------------------------------------
    def _out_ptr(self, name: str, *args: object) -> int:
        out = c_void_p()
        self.lib.call(name, byref(out), *args)
        return int(out.value or 0)

    def _device(self, device: object, what: str = "device", *, host: bool = False) -> int:
        d = _cint(device, what)
        if d < 0 and not (host and d == C.hipCpuDeviceId):
            allowed = "a device index or -1 (the host)" if host else "a device index"
            raise AMLValueError(f"{what} must be {allowed}, got {d}")
        return d

    def _require(self, *names: str) -> None:
        for name in names:
            if not self.lib.has(name):
                raise AMLNotSupported(f"{self.lib.path} does not export {name}")

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

    def set_device(self, device: int) -> None:
        self.lib.call("hipSetDevice", self._device(device))

    def attribute(self, attr: int, device: int) -> int:
        """``hipDeviceGetAttribute`` (the attribute ids of :mod:`aml_hip.constants`)."""
        value = c_int(0)
        self.lib.call("hipDeviceGetAttribute", byref(value), _cint(attr, "attribute"), self._device(device))
        return value.value

    def _attribute_or(self, attr: int | None, device: int, default: int) -> int:
        if attr is None:
            return default
        try:
            return self.attribute(attr, device)
        except (AMLValueError, AMLNotSupported):
            return default

    def device_info(self, device: int) -> DeviceInfo:
        d = self._device(device)
        name = ctypes.create_string_buffer(256)
        self.lib.call("hipDeviceGetName", name, len(name), d)
        total = c_size_t(0)
        self.lib.call("hipDeviceTotalMem", byref(total), d)
        managed = self._attribute_or(C.hipDeviceAttributeManagedMemory, d, 0)
        concurrent = self._attribute_or(C.hipDeviceAttributeConcurrentManagedAccess, d, 0)
        pageable = self._attribute_or(C.hipDeviceAttributePageableMemoryAccess, d, 0)
        has_vmm = all(self.lib.has(n) for n in VMM_FUNCTIONS)
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
            capabilities=device_capabilities(
                managed=bool(managed),
                concurrent=bool(concurrent),
                pageable=bool(pageable),
                vmm=bool(vmm),
                ipc=True,
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
    def malloc(self, size: int) -> int:
        return self._out_ptr("hipMalloc", _size(size))

    def free(self, ptr: int) -> None:
        self.lib.call("hipFree", _vp(_ptr(ptr)))

    def host_alloc(self, size: int, *, portable: bool, mapped: bool) -> int:
        flags = C.hipHostMallocDefault
        if portable:
            flags |= C.hipHostMallocPortable
        if mapped:
            flags |= C.hipHostMallocMapped
        return self._out_ptr(self.lib.host_alloc, _size(size), flags)

    def free_host(self, ptr: int) -> None:
        self.lib.call(self.lib.host_free, _vp(_ptr(ptr)))

    def malloc_managed(self, size: int, *, attach_global: bool) -> int:
        flags = C.hipMemAttachGlobal if attach_global else C.hipMemAttachHost
        return self._out_ptr("hipMallocManaged", _size(size), flags)

    def host_register(self, ptr: int, size: int, *, portable: bool, mapped: bool) -> None:
        flags = C.hipHostRegisterDefault
        if portable:
            flags |= C.hipHostRegisterPortable
        if mapped:
            flags |= C.hipHostRegisterMapped
        self.lib.call("hipHostRegister", _vp(_ptr(ptr)), _size(size), flags)

    def host_unregister(self, ptr: int) -> None:
        self.lib.call("hipHostUnregister", _vp(_ptr(ptr)))

    def host_device_pointer(self, ptr: int) -> int:
        return self._out_ptr("hipHostGetDevicePointer", _vp(_ptr(ptr)), 0)

    def pointer_attributes(self, ptr: int) -> PointerAttributes:
        attr = C.hipPointerAttribute_t()
        self.lib.call("hipPointerGetAttributes", byref(attr), _vp(_ptr(ptr)))
        kind = self.abi.memory_kind(attr.type)
        if attr.isManaged or kind in ("managed", "unified"):
            memory_type = "managed"
        elif kind in ("device", "array"):
            memory_type = "device"
        elif kind == "host":
            memory_type = "host"
        else:
            memory_type = "unregistered"
        return PointerAttributes(
            memory_type=memory_type,
            device=attr.device,
            device_pointer=int(attr.devicePointer or 0),
            host_pointer=int(attr.hostPointer or 0),
            is_managed=bool(attr.isManaged),
        )

    def memcpy(self, dst: int, src: int, size: int) -> None:
        self.lib.call(
            "hipMemcpy", _vp(_ptr(dst, "dst")), _vp(_ptr(src, "src")), _size(size), C.hipMemcpyDefault
        )

    def memset(self, ptr: int, value: int, size: int) -> None:
        v = _int(value, "value")
        if not 0 <= v <= 255:
            raise AMLValueError(f"memset value must be a byte (0..255), got {v}")
        self.lib.call("hipMemset", _vp(_ptr(ptr)), v, _size(size))

    # -- managed memory (docs/aml-contract.md#hip-managed-memory) ------------------------------
    def mem_prefetch(self, ptr: int, size: int, device: int, stream: int) -> None:
        self.lib.call(
            "hipMemPrefetchAsync",
            _vp(_ptr(ptr)),
            _size(size),
            self._device(device, host=True),
            _vp(_ptr(stream, "stream", null=True)),
        )

    def mem_advise(self, ptr: int, size: int, advice: int, device: int) -> None:
        adv = _cint(advice, "advice")
        if adv not in _ADVICES:
            raise AMLValueError(f"HIP has no advice {adv}; allowed: {sorted(_ADVICES)}")
        self.lib.call("hipMemAdvise", _vp(_ptr(ptr)), _size(size), adv, self._device(device, host=True))

    def mem_range_attributes(
        self, ptr: int, size: int, requests: Sequence[tuple[int, int]]
    ) -> list[list[int]]:
        p, n = _ptr(ptr), _size(size)
        if not requests:
            raise AMLValueError("at least one range attribute is needed")
        buffers: list[ctypes.Array[c_int]] = []
        attributes: list[int] = []
        for attr, count in requests:
            a, k = _cint(attr, "attribute"), _int(count, "count")
            if a not in _RANGE_ATTRIBUTES:
                raise AMLValueError(f"HIP has no range attribute {a}; allowed: {sorted(_RANGE_ATTRIBUTES)}")
            if not 1 <= k <= 4096:
                raise AMLValueError(f"a range attribute holds 1..4096 ints, not {k}")
            buffers.append((c_int * k)())
            attributes.append(a)
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

    def stream_attach(self, stream: int, ptr: int, size: int, flags: int) -> None:
        f = _int(flags, "flags")
        if f not in _ATTACH:
            raise AMLValueError(f"attach flags must be hipMemAttachGlobal 1, Host 2 or Single 4, got {f}")
        self.lib.call(
            "hipStreamAttachMemAsync",
            _vp(_ptr(stream, "stream", null=True)),
            _vp(_ptr(ptr)),
            _size(size, zero=True),
            f,
        )

    # -- streams -----------------------------------------------------------------------------
    def stream_create(self, non_blocking: bool) -> int:
        flags = C.hipStreamNonBlocking if non_blocking else C.hipStreamDefault
        return self._out_ptr("hipStreamCreateWithFlags", flags)

    def stream_destroy(self, stream: int) -> None:
        self.lib.call("hipStreamDestroy", _vp(_ptr(stream, "stream")))

    def stream_synchronize(self, stream: int) -> None:
        self.lib.call("hipStreamSynchronize", _vp(_ptr(stream, "stream", null=True)))

    # -- IPC (docs/aml-contract.md#hip-ipc) -----------------------------------------------------
    def ipc_get_handle(self, ptr: int) -> bytes:
        handle = C.hipIpcMemHandle_t()
        self.lib.call("hipIpcGetMemHandle", byref(handle), _vp(_ptr(ptr)))
        return ctypes.string_at(byref(handle), C.HIP_IPC_HANDLE_SIZE)

    def ipc_open_handle(self, handle: bytes) -> int:
        if not isinstance(handle, (bytes, bytearray, memoryview)):
            raise AMLTypeError(f"an IPC handle is {C.HIP_IPC_HANDLE_SIZE} bytes, not {type(handle).__name__}")
        data = bytes(handle)
        if len(data) != C.HIP_IPC_HANDLE_SIZE:
            raise AMLValueError(f"an IPC handle is {C.HIP_IPC_HANDLE_SIZE} bytes, got {len(data)}")
        native = C.hipIpcMemHandle_t.from_buffer_copy(data)
        # hipIpcMemLazyEnablePeerAccess: 0 up to HIP 5.7, 1 from 6.0 (docs/native-abi.md#hip-flags-and-ids).
        return self._out_ptr("hipIpcOpenMemHandle", native, self.abi.ipc_lazy_enable_peer_access)

    def ipc_close_handle(self, ptr: int) -> None:
        self.lib.call("hipIpcCloseMemHandle", _vp(_ptr(ptr)))

    # -- virtual memory ----------------------------------------------------------------------
    def _prop(self, device: int, exportable: bool) -> ctypes.Structure:
        """A hipMemAllocationProp in this version's layout (docs/native-abi.md#hip-virtual-memory)."""
        prop = self.abi.allocation_prop()
        prop.type = C.hipMemAllocationTypePinned
        prop.requestedHandleType = (
            C.hipMemHandleTypePosixFileDescriptor if exportable else C.hipMemHandleTypeNone
        )
        prop.location.type = C.hipMemLocationTypeDevice
        prop.location.id = self._device(device)
        return prop

    def vmm_granularity(self, device: int, recommended: bool) -> int:
        self._require("hipMemGetAllocationGranularity")
        prop = self._prop(device, False)
        out = c_size_t(0)
        option = (
            C.hipMemAllocationGranularityRecommended if recommended else C.hipMemAllocationGranularityMinimum
        )
        self.lib.call("hipMemGetAllocationGranularity", byref(out), byref(prop), option)
        return int(out.value)

    def vmm_reserve(self, size: int, alignment: int, address: int) -> int:
        self._require("hipMemAddressReserve")
        return self._out_ptr(
            "hipMemAddressReserve",
            _size(size),
            _size(alignment, "alignment", zero=True),
            _vp(_ptr(address, "address", null=True)),
            0,
        )

    def vmm_address_free(self, ptr: int, size: int) -> None:
        self._require("hipMemAddressFree")
        self.lib.call("hipMemAddressFree", _vp(_ptr(ptr)), _size(size))

    def vmm_create(self, size: int, device: int, exportable: bool) -> int:
        self._require("hipMemCreate")
        prop = self._prop(device, exportable)
        return self._out_ptr("hipMemCreate", _size(size), byref(prop), 0)

    def vmm_release(self, handle: int) -> None:
        self._require("hipMemRelease")
        self.lib.call("hipMemRelease", _vp(_ptr(handle, "handle")))

    def vmm_map(self, ptr: int, size: int, handle: int, offset: int) -> None:
        self._require("hipMemMap")
        self.lib.call(
            "hipMemMap",
            _vp(_ptr(ptr)),
            _size(size),
            _size(offset, "offset", zero=True),
            _vp(_ptr(handle, "handle")),
            0,
        )

    def vmm_unmap(self, ptr: int, size: int) -> None:
        self._require("hipMemUnmap")
        self.lib.call("hipMemUnmap", _vp(_ptr(ptr)), _size(size))

    def vmm_set_access(self, ptr: int, size: int, access: Sequence[tuple[int, int]]) -> None:
        self._require("hipMemSetAccess")
        if not access:
            raise AMLValueError("set_access needs at least one (device, access) pair")
        descs = (C.hipMemAccessDesc * len(access))()
        for desc, (device, flags) in zip(descs, access, strict=True):
            f = _int(flags, "access")
            if f not in _ACCESS:
                raise AMLValueError(f"access must be ProtNone 0, ProtRead 1 or ProtReadWrite 3, got {f}")
            desc.location.type = C.hipMemLocationTypeDevice
            desc.location.id = self._device(device)
            desc.flags = f
        self.lib.call("hipMemSetAccess", _vp(_ptr(ptr)), _size(size), descs, len(access))

    def vmm_get_access(self, ptr: int, device: int) -> int:
        self._require("hipMemGetAccess")
        location = C.hipMemLocation(C.hipMemLocationTypeDevice, self._device(device))
        flags = c_ulonglong(0)
        self.lib.call("hipMemGetAccess", byref(flags), byref(location), _vp(_ptr(ptr)))
        return int(flags.value)

    def _shareable(self) -> None:
        if self.abi.shareable == "unsupported":
            raise AMLNotSupported(
                f"HIP {C.version_string(self.version)} cannot export or import virtual memory "
                "(hipMemExportToShareableHandle / hipMemImportFromShareableHandle return "
                "hipErrorNotSupported in HIP 6.0 and 6.1)"
            )

    def vmm_export_fd(self, handle: int) -> int:
        self._require("hipMemExportToShareableHandle")
        self._shareable()
        fd = c_int(-1)
        self.lib.call(
            "hipMemExportToShareableHandle",
            byref(fd),
            _vp(_ptr(handle, "handle")),
            C.hipMemHandleTypePosixFileDescriptor,
            0,
        )
        return fd.value

    def vmm_import_fd(self, fd: int) -> int:
        self._require("hipMemImportFromShareableHandle")
        self._shareable()
        value = _cint(fd, "fd")
        if value < 0:
            raise AMLValueError(f"fd must be an open file descriptor, got {value}")
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

    def vmm_retain(self, ptr: int) -> int:
        self._require("hipMemRetainAllocationHandle")
        return self._out_ptr("hipMemRetainAllocationHandle", _vp(_ptr(ptr)))

    def vmm_properties(self, handle: int) -> AllocationProperties:
        self._require("hipMemGetAllocationPropertiesFromHandle")
        prop = self.abi.allocation_prop()
        self.lib.call("hipMemGetAllocationPropertiesFromHandle", byref(prop), _vp(_ptr(handle, "handle")))
        return AllocationProperties(
            type=int(prop.type),
            location_device=int(prop.location.id),
            handle_types=int(prop.requestedHandleType),
        )
