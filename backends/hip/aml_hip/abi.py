"""Every HIP constant, enum value and struct layout aml-hip uses, per HIP version.

This module is the one place the bindings take numbers from, so that the ABI probe
(``backends/hip/tests/native/abi_probe.c`` + ``backends/hip/tests/native/test_hip_abi.py``) checks exactly
what the bindings use:

* the values that are the same in every supported version (5.2 .. 7.x) are module
  constants with HIP's C names;
* the values that changed between versions live in one :class:`HipAbi` per version
  range; :func:`abi_for` picks it from ``hipRuntimeGetVersion``;
* struct layouts are ctypes structures, with the offsets they must have.

Sources (``docs/native-abi.md#hip``, cited by its section anchors ``#hip-...``): every value of
HIP 5.2 is compared one by one against Debian's ``libamdhip64-dev`` 5.2.3 headers by the
ABI probe; the 5.3 .. 7.x values cannot be compiled here (no such headers) and are
encoded from the tables of that page, cited at each value, and checked against those
tables by ``test_hip_abi.py``. ``hipErrorContextAlreadyInUse`` is only known from 5.2: its
value was probed from the Debian 5.2 header (and is checked by the probe).
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, Literal

import attrs

__all__ = [
    "ABIS",
    "COMMON_NAMES",
    "NEWEST_KNOWN_MAJOR",
    "REFERENCE_LAYOUTS",
    "STRUCTS",
    "HipAbi",
    "abi_for",
    "common_values",
    "hipIpcMemHandle_t",
    "hipMemAccessDesc",
    "hipMemAllocationProp_v5_2",
    "hipMemAllocationProp_v5_3",
    "hipMemLocation",
    "hipPointerAttribute_t",
    "hip_version",
    "probe_expectations",
    "struct_layout",
    "version_string",
]


def hip_version(major: int, minor: int, patch: int = 0) -> int:
    """``HIP_VERSION``: major * 10000000 + minor * 100000 + patch (native-abi.md#hip-library-and-version)."""
    return major * 10_000_000 + minor * 100_000 + patch


def version_string(version: int) -> str:
    """``50221153`` -> ``"5.2.21153"``."""
    return f"{version // 10_000_000}.{version // 100_000 % 100}.{version % 100_000}"


# -- hipError_t (docs/native-abi.md#hip-error-codes: identical in 5.2 .. 7.x for every code below)
hipSuccess: Final = 0
hipErrorInvalidValue: Final = 1
hipErrorOutOfMemory: Final = 2
hipErrorMemoryAllocation: Final = 2  # alias of hipErrorOutOfMemory
hipErrorNotInitialized: Final = 3
hipErrorInitializationError: Final = 3  # alias of hipErrorNotInitialized
hipErrorInsufficientDriver: Final = 35
hipErrorNoDevice: Final = 100
hipErrorInvalidDevice: Final = 101
#: Only known from Debian's 5.2 hip_runtime_api.h (and by the ABI probe).
hipErrorContextAlreadyInUse: Final = 216
#: hipEventQuery's "the recorded work is not done yet" (a state, not an error).
hipErrorNotReady: Final = 600
hipErrorPeerAccessUnsupported: Final = 217
hipErrorPeerAccessAlreadyEnabled: Final = 704
hipErrorPeerAccessNotEnabled: Final = 705
hipErrorHostMemoryAlreadyRegistered: Final = 712
hipErrorNotSupported: Final = 801
hipErrorUnknown: Final = 999

# -- special device ids and streams (docs/native-abi.md#hip-flags-and-ids) ---------------------
hipCpuDeviceId: Final = -1
hipInvalidDeviceId: Final = -2
hipStreamDefault: Final = 0x0
hipStreamNonBlocking: Final = 0x1

# -- events (docs/native-abi.md#hip-stream-ordered-allocation; unsigned int flags) -------------
hipEventDisableTiming: Final = 0x2

# -- hipMemcpyKind (Debian 5.2 driver_types.h; CUDA's cudaMemcpyDefault is the same 4) ----
hipMemcpyDefault: Final = 4

# -- host allocation and registration flags (docs/native-abi.md#hip-flags-and-ids; unsigned int) ---
hipHostMallocDefault: Final = 0x0
hipHostMallocPortable: Final = 0x1
hipHostMallocMapped: Final = 0x2
hipHostRegisterDefault: Final = 0x0
hipHostRegisterPortable: Final = 0x1
hipHostRegisterMapped: Final = 0x2

# -- hipMallocManaged / hipStreamAttachMemAsync (docs/native-abi.md#hip-flags-and-ids) ------------
hipMemAttachGlobal: Final = 0x1
hipMemAttachHost: Final = 0x2
hipMemAttachSingle: Final = 0x4

# -- IPC (docs/native-abi.md#hip-ipc); the lazy-peer flag is per version: HipAbi ---------------
HIP_IPC_HANDLE_SIZE: Final = 64

# -- hipMemoryAdvise (docs/native-abi.md#hip-managed-memory-enums, same 5.2 .. 7.x) --------------
hipMemAdviseSetReadMostly: Final = 1
hipMemAdviseUnsetReadMostly: Final = 2
hipMemAdviseSetPreferredLocation: Final = 3
hipMemAdviseUnsetPreferredLocation: Final = 4
hipMemAdviseSetAccessedBy: Final = 5
hipMemAdviseUnsetAccessedBy: Final = 6
hipMemAdviseSetCoarseGrain: Final = 100
hipMemAdviseUnsetCoarseGrain: Final = 101

# -- hipMemRangeAttribute and hipMemRangeCoherencyMode (docs/native-abi.md#hip-managed-memory-enums)
hipMemRangeAttributeReadMostly: Final = 1
hipMemRangeAttributePreferredLocation: Final = 2
hipMemRangeAttributeAccessedBy: Final = 3
hipMemRangeAttributeLastPrefetchLocation: Final = 4
hipMemRangeAttributeCoherencyMode: Final = 100
hipMemRangeCoherencyModeFineGrain: Final = 0
hipMemRangeCoherencyModeCoarseGrain: Final = 1
hipMemRangeCoherencyModeIndeterminate: Final = 2

# -- hipDeviceAttribute_t (docs/native-abi.md#hip-device-attributes: same in 5.2 and 6.x; 7.x consistent)
# VirtualMemoryManagementSupported (89) exists from 6.0 only: see HipAbi.attr_vmm_supported.
hipDeviceAttributeCanMapHostMemory: Final = 3
hipDeviceAttributeConcurrentManagedAccess: Final = 9
hipDeviceAttributeComputeCapabilityMajor: Final = 23
hipDeviceAttributeManagedMemory: Final = 24
hipDeviceAttributeComputeCapabilityMinor: Final = 61
hipDeviceAttributeMultiprocessorCount: Final = 63
hipDeviceAttributePageableMemoryAccess: Final = 65
hipDeviceAttributePciBusId: Final = 67
hipDeviceAttributePciDeviceId: Final = 68
hipDeviceAttributePciDomainID: Final = 69
hipDeviceAttributeUnifiedAddressing: Final = 85

# -- virtual memory enums (docs/native-abi.md#hip-virtual-memory; 7.x only adds values aml-hip does not use)
hipMemAllocationTypePinned: Final = 0x1
hipMemHandleTypeNone: Final = 0x0
hipMemHandleTypePosixFileDescriptor: Final = 0x1
hipMemLocationTypeDevice: Final = 1
hipMemAccessFlagsProtNone: Final = 0
hipMemAccessFlagsProtRead: Final = 1
hipMemAccessFlagsProtReadWrite: Final = 3
hipMemAllocationGranularityMinimum: Final = 0x0
hipMemAllocationGranularityRecommended: Final = 0x1

#: The version-independent constants above, by C name: what the ABI probe prints for
#: every version and what ``test_hip_abi.py`` compares one by one.
COMMON_NAMES: Final[tuple[str, ...]] = (
    "hipSuccess",
    "hipErrorInvalidValue",
    "hipErrorOutOfMemory",
    "hipErrorMemoryAllocation",
    "hipErrorNotInitialized",
    "hipErrorInitializationError",
    "hipErrorInsufficientDriver",
    "hipErrorNoDevice",
    "hipErrorInvalidDevice",
    "hipErrorContextAlreadyInUse",
    "hipErrorNotReady",
    "hipErrorPeerAccessUnsupported",
    "hipErrorPeerAccessAlreadyEnabled",
    "hipErrorPeerAccessNotEnabled",
    "hipErrorHostMemoryAlreadyRegistered",
    "hipErrorNotSupported",
    "hipErrorUnknown",
    "hipCpuDeviceId",
    "hipInvalidDeviceId",
    "hipStreamDefault",
    "hipStreamNonBlocking",
    "hipEventDisableTiming",
    "hipMemcpyDefault",
    "hipHostMallocDefault",
    "hipHostMallocPortable",
    "hipHostMallocMapped",
    "hipHostRegisterDefault",
    "hipHostRegisterPortable",
    "hipHostRegisterMapped",
    "hipMemAttachGlobal",
    "hipMemAttachHost",
    "hipMemAttachSingle",
    "HIP_IPC_HANDLE_SIZE",
    "hipMemAdviseSetReadMostly",
    "hipMemAdviseUnsetReadMostly",
    "hipMemAdviseSetPreferredLocation",
    "hipMemAdviseUnsetPreferredLocation",
    "hipMemAdviseSetAccessedBy",
    "hipMemAdviseUnsetAccessedBy",
    "hipMemAdviseSetCoarseGrain",
    "hipMemAdviseUnsetCoarseGrain",
    "hipMemRangeAttributeReadMostly",
    "hipMemRangeAttributePreferredLocation",
    "hipMemRangeAttributeAccessedBy",
    "hipMemRangeAttributeLastPrefetchLocation",
    "hipMemRangeAttributeCoherencyMode",
    "hipMemRangeCoherencyModeFineGrain",
    "hipMemRangeCoherencyModeCoarseGrain",
    "hipMemRangeCoherencyModeIndeterminate",
    "hipDeviceAttributeCanMapHostMemory",
    "hipDeviceAttributeConcurrentManagedAccess",
    "hipDeviceAttributeComputeCapabilityMajor",
    "hipDeviceAttributeManagedMemory",
    "hipDeviceAttributeComputeCapabilityMinor",
    "hipDeviceAttributeMultiprocessorCount",
    "hipDeviceAttributePageableMemoryAccess",
    "hipDeviceAttributePciBusId",
    "hipDeviceAttributePciDeviceId",
    "hipDeviceAttributePciDomainID",
    "hipDeviceAttributeUnifiedAddressing",
    "hipMemAllocationTypePinned",
    "hipMemHandleTypeNone",
    "hipMemHandleTypePosixFileDescriptor",
    "hipMemLocationTypeDevice",
    "hipMemAccessFlagsProtNone",
    "hipMemAccessFlagsProtRead",
    "hipMemAccessFlagsProtReadWrite",
    "hipMemAllocationGranularityMinimum",
    "hipMemAllocationGranularityRecommended",
)


def common_values() -> dict[str, int]:
    """The version-independent constants by C name."""
    values = globals()
    return {name: int(values[name]) for name in COMMON_NAMES}


# -- struct layouts ------------------------------------------------------------------------------
class hipMemLocation(ctypes.Structure):
    """``{ hipMemLocationType type; int id; }``, 8 bytes (docs/native-abi.md#hip-virtual-memory)."""

    _fields_ = (("type", ctypes.c_int), ("id", ctypes.c_int))


class hipMemAccessDesc(ctypes.Structure):
    """``{ hipMemLocation location; hipMemAccessFlags flags; }``, 12 bytes, flags at 8
    (docs/native-abi.md#hip-virtual-memory)."""

    _fields_ = (("location", hipMemLocation), ("flags", ctypes.c_int))


class hipIpcMemHandle_t(ctypes.Structure):
    """``struct { char reserved[64]; }``, passed by value to hipIpcOpenMemHandle (native-abi.md#hip-ipc)."""

    _fields_ = (("reserved", ctypes.c_char * HIP_IPC_HANDLE_SIZE),)


class hipPointerAttribute_t(ctypes.Structure):
    """32 bytes in every version (docs/native-abi.md#hip-pointer-attributes). Field 0 is
    ``memoryType`` in 5.2 .. 5.4 and ``type`` from 6.0; its numbering is per version
    (:attr:`HipAbi.memory_types`)."""

    _fields_ = (
        ("type", ctypes.c_int),
        ("device", ctypes.c_int),
        ("devicePointer", ctypes.c_void_p),
        ("hostPointer", ctypes.c_void_p),
        ("isManaged", ctypes.c_int),
        ("allocationFlags", ctypes.c_uint),
    )


class hipMemAllocationProp_v5_2(ctypes.Structure):
    """``hipMemAllocationProp`` of HIP 5.2 (Debian), 32 bytes (docs/native-abi.md#hip-virtual-memory)."""

    _fields_ = (
        ("compressionType", ctypes.c_ubyte),
        ("location", hipMemLocation),
        ("requestedHandleType", ctypes.c_int),
        ("type", ctypes.c_int),
        ("usage", ctypes.c_ushort),
        ("win32HandleMetaData", ctypes.c_void_p),
    )


class _AllocFlags(ctypes.Structure):
    _fields_ = (
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
    )


class hipMemAllocationProp_v5_3(ctypes.Structure):
    """``hipMemAllocationProp`` of HIP >= 5.3 (6.x, 7.x; = CUmemAllocationProp), 32 bytes
    (docs/native-abi.md#hip-virtual-memory, >= 5.3 row). HIP pads 4 bytes after allocFlags."""

    _fields_ = (
        ("type", ctypes.c_int),
        ("requestedHandleType", ctypes.c_int),
        ("location", hipMemLocation),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
        ("_padding", ctypes.c_ubyte * 4),
    )


#: Offsets (and sizes) the structures must have, from docs/native-abi.md#hip-virtual-memory,
#: #hip-pointer-attributes and #hip-ipc. 5.2 entries are also compared against the Debian header by the probe.
REFERENCE_LAYOUTS: Final[Mapping[str, Mapping[str, int]]] = MappingProxyType(
    {
        "hipMemLocation": MappingProxyType({"sizeof": 8, "type": 0, "id": 4}),
        "hipMemAccessDesc": MappingProxyType({"sizeof": 12, "location": 0, "flags": 8}),
        "hipIpcMemHandle_t": MappingProxyType({"sizeof": 64, "reserved": 0}),
        "hipPointerAttribute_t": MappingProxyType(
            {
                "sizeof": 32,
                "type": 0,
                "device": 4,
                "devicePointer": 8,
                "hostPointer": 16,
                "isManaged": 24,
                "allocationFlags": 28,
            }
        ),
        "hipMemAllocationProp_v5_2": MappingProxyType(
            {
                "sizeof": 32,
                "compressionType": 0,
                "location": 4,
                "requestedHandleType": 12,
                "type": 16,
                "usage": 20,
                "win32HandleMetaData": 24,
            }
        ),
        "hipMemAllocationProp_v5_3": MappingProxyType(
            {
                "sizeof": 32,
                "type": 0,
                "requestedHandleType": 4,
                "location": 8,
                "win32HandleMetaData": 16,
                "allocFlags": 24,
                "allocFlags.compressionType": 24,
                "allocFlags.gpuDirectRDMACapable": 25,
                "allocFlags.usage": 26,
            }
        ),
    }
)

#: The ctypes structure of each layout name.
STRUCTS: Final[Mapping[str, type[ctypes.Structure]]] = MappingProxyType(
    {
        "hipMemLocation": hipMemLocation,
        "hipMemAccessDesc": hipMemAccessDesc,
        "hipIpcMemHandle_t": hipIpcMemHandle_t,
        "hipPointerAttribute_t": hipPointerAttribute_t,
        "hipMemAllocationProp_v5_2": hipMemAllocationProp_v5_2,
        "hipMemAllocationProp_v5_3": hipMemAllocationProp_v5_3,
    }
)


def struct_layout(name: str) -> dict[str, int]:
    """The size and field offsets of one of :data:`STRUCTS`, measured on the ctypes class
    (nested fields as ``outer.inner``), in the keys of :data:`REFERENCE_LAYOUTS`."""
    cls = STRUCTS[name]
    out = {"sizeof": ctypes.sizeof(cls)}
    for field in cls._fields_:
        fname, ftype = field[0], field[1]
        if fname.startswith("_"):
            continue
        offset = int(getattr(cls, fname).offset)
        out[fname] = offset
        if (
            name.startswith("hipMemAllocationProp")
            and isinstance(ftype, type)
            and issubclass(ftype, ctypes.Structure)
            and ftype is not hipMemLocation
        ):
            for sub in ftype._fields_:
                out[f"{fname}.{sub[0]}"] = offset + int(getattr(ftype, sub[0]).offset)
    return out


# -- per-version ABI -------------------------------------------------------------------------
#: How ``hipMemImportFromShareableHandle`` takes the fd: a pointer to an int (6.2/6.3;
#: assumed for 5.x, where the behaviour was not verified), the fd value cast
#: to ``void*`` (>= 7.0), or not at all (6.0/6.1 return hipErrorNotSupported).
ShareableConvention = Literal["pointer", "value", "unsupported"]
MemoryKind = Literal["unregistered", "host", "device", "managed", "array", "unified"]


def _frozen(mapping: Mapping[str, int]) -> Mapping[str, int]:
    return MappingProxyType(dict(mapping))


@attrs.frozen
class HipAbi:
    """What differs between HIP versions (docs/native-abi.md#hip-version-differences), for a version range."""

    #: First HIP_VERSION this ABI applies to.
    since: int
    #: Short label for messages ("5.2", "6.2/6.3", ...).
    label: str
    #: ``hipIpcMemLazyEnablePeerAccess`` (docs/native-abi.md#hip-flags-and-ids: 0 up to 5.7, 1 from 6.0).
    ipc_lazy_enable_peer_access: int
    #: hipMemoryType numbering, C name -> value (docs/native-abi.md#hip-pointer-attributes).
    memory_types: Mapping[str, int] = attrs.field(converter=_frozen)
    #: Name of field 0 of hipPointerAttribute_t in this version (docs/native-abi.md#hip-pointer-attributes).
    pointer_type_field: str
    #: ``hipMemAllocationProp`` layout (docs/native-abi.md#hip-virtual-memory).
    allocation_prop: type[ctypes.Structure]
    #: Shareable-handle convention of the VMM export/import calls (docs/native-abi.md#hip-virtual-memory).
    shareable: ShareableConvention
    #: Host allocation and free calls (hipExtHostAlloc / hipFreeHost from 6.3; see the version table).
    host_alloc: str
    host_free: str
    #: hipDeviceAttributeVirtualMemoryManagementSupported (89 from 6.0, not 5.2; #hip-device-attributes).
    attr_vmm_supported: int | None

    def memory_kind(self, value: int) -> MemoryKind | None:
        """The kind of memory a ``hipMemoryType`` value means in this version."""
        for name, number in self.memory_types.items():
            if number == value:
                kind = name.removeprefix("hipMemoryType").lower()
                return kind  # type: ignore[return-value]
        return None

    def values(self) -> dict[str, int]:
        """The version-dependent constants by C name (for the ABI probe)."""
        out = dict(self.memory_types)
        out["hipIpcMemLazyEnablePeerAccess"] = self.ipc_lazy_enable_peer_access
        if self.attr_vmm_supported is not None:
            out["hipDeviceAttributeVirtualMemoryManagementSupported"] = self.attr_vmm_supported
        return out


_OLD_TYPES = {
    "hipMemoryTypeHost": 0,
    "hipMemoryTypeDevice": 1,
    "hipMemoryTypeArray": 2,
    "hipMemoryTypeUnified": 3,
}
# docs/native-abi.md#hip-pointer-attributes: 6.0 renumbered, added Unregistered; Managed was 4 in 5.3 .. 5.7.
_NEW_TYPES = {
    "hipMemoryTypeUnregistered": 0,
    "hipMemoryTypeHost": 1,
    "hipMemoryTypeDevice": 2,
    "hipMemoryTypeManaged": 3,
    "hipMemoryTypeArray": 10,
    "hipMemoryTypeUnified": 11,
}


def _versions(first: HipAbi, *changes: dict[str, Any]) -> tuple[HipAbi, ...]:
    """``first``, then each version as what it changes from the one before."""
    out = [first]
    for change in changes:
        out.append(attrs.evolve(out[-1], **change))
    return tuple(out)


#: Every ABI, oldest first; :func:`abi_for` picks the last one whose ``since`` <= version.
#: Each version after 5.2 says only what it changes from the one before.
ABIS: Final[tuple[HipAbi, ...]] = _versions(
    # HIP 5.2 (Debian 12): compared one by one with the header by the ABI probe.
    HipAbi(
        since=0,
        label="5.2",
        ipc_lazy_enable_peer_access=0,
        memory_types=_OLD_TYPES,
        pointer_type_field="memoryType",
        allocation_prop=hipMemAllocationProp_v5_2,
        shareable="pointer",
        host_alloc="hipHostMalloc",
        host_free="hipHostFree",
        attr_vmm_supported=None,
    ),
    # 5.3 .. 5.7: new prop layout, Managed = 4, lazy flag 0 (docs/native-abi.md#hip-version-differences).
    {
        "since": hip_version(5, 3),
        "label": "5.3-5.7",
        "memory_types": {**_OLD_TYPES, "hipMemoryTypeManaged": 4},
        "allocation_prop": hipMemAllocationProp_v5_3,
    },
    # 6.0 / 6.1: lazy flag 1, new hipMemoryType, VMM export NotSupported (#hip-version-differences).
    {
        "since": hip_version(6, 0),
        "label": "6.0/6.1",
        "ipc_lazy_enable_peer_access": 1,
        "memory_types": _NEW_TYPES,
        "pointer_type_field": "type",
        "shareable": "unsupported",
        "attr_vmm_supported": 89,
    },
    # 6.2: dma-buf fd export, import dereferences osHandle as int* (docs/native-abi.md#hip-virtual-memory).
    {"since": hip_version(6, 2), "label": "6.2", "shareable": "pointer"},
    # 6.3 .. 6.x: hipExtHostAlloc / hipFreeHost replace hipHostMalloc / hipHostFree (same table).
    {
        "since": hip_version(6, 3),
        "label": "6.3+",
        "host_alloc": "hipExtHostAlloc",
        "host_free": "hipFreeHost",
    },
    # 7.x: import takes the fd by value, like CUDA (docs/native-abi.md#hip-virtual-memory).
    {"since": hip_version(7, 0), "label": "7.x", "shareable": "value"},
)

#: Versions past the newest one docs/native-abi.md describes use its ABI (noted in status text).
NEWEST_KNOWN_MAJOR: Final = 7


def abi_for(version: int) -> HipAbi:
    """The ABI of a ``HIP_VERSION`` (as ``hipRuntimeGetVersion`` returns it)."""
    chosen = ABIS[0]
    for abi in ABIS:
        if version >= abi.since:
            chosen = abi
    return chosen


def probe_expectations(version: int) -> dict[str, int]:
    """Every value, size and offset the ABI probe prints for a header of ``version``,
    keyed as the probe prints them (``name``, ``sizeof(T)``, ``offsetof(T,field)``)."""
    abi = abi_for(version)
    out = common_values()
    out.update(abi.values())
    layouts: dict[str, tuple[str, Mapping[str, int]]] = {
        "hipMemLocation": ("hipMemLocation", REFERENCE_LAYOUTS["hipMemLocation"]),
        "hipMemAccessDesc": ("hipMemAccessDesc", REFERENCE_LAYOUTS["hipMemAccessDesc"]),
        "hipIpcMemHandle_t": ("hipIpcMemHandle_t", REFERENCE_LAYOUTS["hipIpcMemHandle_t"]),
        "hipPointerAttribute_t": ("hipPointerAttribute_t", REFERENCE_LAYOUTS["hipPointerAttribute_t"]),
        "hipMemAllocationProp": (
            abi.allocation_prop.__name__,
            REFERENCE_LAYOUTS[abi.allocation_prop.__name__],
        ),
    }
    for c_name, (_, layout) in layouts.items():
        for field, value in layout.items():
            if field == "sizeof":
                out[f"sizeof({c_name})"] = value
                continue
            renamed = (c_name, field) == ("hipPointerAttribute_t", "type")
            c_field = abi.pointer_type_field if renamed else field
            out[f"offsetof({c_name},{c_field})"] = value
    # enum and handle sizes the prototypes rely on (enums 4 bytes, handles 8: #hip-functions-declared)
    out.update(
        {
            "sizeof(hipError_t)": 4,
            "sizeof(hipDeviceAttribute_t)": 4,
            "sizeof(hipMemoryAdvise)": 4,
            "sizeof(hipMemRangeAttribute)": 4,
            "sizeof(hipMemcpyKind)": 4,
            "sizeof(hipMemAllocationHandleType)": 4,
            "sizeof(hipMemAllocationGranularity_flags)": 4,
            "sizeof(hipStream_t)": 8,
            "sizeof(hipEvent_t)": 8,
            "sizeof(hipMemGenericAllocationHandle_t)": 8,
        }
    )
    return out
