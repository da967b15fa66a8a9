"""HSA / ROCr values and struct layouts (``hsa.h``, ``hsa_ext_amd.h``), by AMD interface version.

The AMD extension interface (``HSA_AMD_INTERFACE_VERSION_MAJOR/MINOR``) grew the virtual
memory API in steps that decide what aml-hsa can call:

==========  ============  ==============================================================
interface   ROCm          what it added that aml-hsa uses
==========  ============  ==============================================================
1.0         5.2 (Debian)  agents, memory pools, pool allocation, IPC (``hsa_amd_ipc_memory_*``)
1.4         6.0           ``hsa_amd_vmem_*`` (virtual memory), ``HSA_ACCESS_PERMISSION_NONE``,
                          ``RUNTIME_ALLOC_REC_GRANULE``, ``MEMORY_POOL_INFO_LOCATION``
1.6         6.2           ``hsa_amd_vmem_address_reserve_align``
==========  ============  ==============================================================

The library does not report its interface version: aml-hsa infers it from the symbols it
exports (:func:`interface_of`). Every value the Debian 5.2 headers define is checked by the
ABI probe (``backends/hsa/tests/native/abi_probe.c``); the 6.x-only values are listed in
:data:`SINCE` and documented in ``docs/native-abi.md#hsa-as-aml-hsa-binds-it``.
"""

from __future__ import annotations

import ctypes
from ctypes import c_int, c_uint32, c_uint64
from typing import Final

__all__ = [
    "DEBIAN_NAMES",
    "DMABUF_FUNCTIONS",
    "INTERFACE_RESERVE_ALIGN",
    "INTERFACE_VMEM",
    "SINCE",
    "VMEM_FUNCTIONS",
    "hsa_amd_ipc_memory_t",
    "hsa_amd_memory_access_desc_t",
    "hsa_amd_pointer_info_t",
    "interface_of",
    "probe_expectations",
]

# -- hsa_status_t (hsa.h; AMD extras in hsa_ext_amd.h are small decimals) -----------------
HSA_STATUS_SUCCESS: Final = 0x0
HSA_STATUS_INFO_BREAK: Final = 0x1
HSA_STATUS_ERROR: Final = 0x1000
HSA_STATUS_ERROR_INVALID_ARGUMENT: Final = 0x1001
HSA_STATUS_ERROR_INVALID_ALLOCATION: Final = 0x1003
HSA_STATUS_ERROR_INVALID_AGENT: Final = 0x1004
HSA_STATUS_ERROR_INVALID_REGION: Final = 0x1005
HSA_STATUS_ERROR_OUT_OF_RESOURCES: Final = 0x1008
HSA_STATUS_ERROR_RESOURCE_FREE: Final = 0x100A
HSA_STATUS_ERROR_NOT_INITIALIZED: Final = 0x100B
HSA_STATUS_ERROR_REFCOUNT_OVERFLOW: Final = 0x100C
HSA_STATUS_ERROR_INVALID_INDEX: Final = 0x100E
HSA_STATUS_ERROR_INVALID_RUNTIME_STATE: Final = 0x1025
HSA_STATUS_ERROR_FATAL: Final = 0x1026
HSA_STATUS_ERROR_INVALID_MEMORY_POOL: Final = 40
HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: Final = 41
HSA_STATUS_ERROR_MEMORY_FAULT: Final = 43
HSA_STATUS_ERROR_RESOURCE_BUSY: Final = 46  # 6.2+
HSA_STATUS_ERROR_NOT_SUPPORTED: Final = 47  # 7.0

# -- hsa_system_info_t, hsa_agent_info_t, hsa_device_type_t --------------------------------
HSA_SYSTEM_INFO_VERSION_MAJOR: Final = 0
HSA_SYSTEM_INFO_VERSION_MINOR: Final = 1
HSA_AGENT_INFO_NAME: Final = 0  # char[64]
HSA_AGENT_INFO_VENDOR_NAME: Final = 1  # char[64]
HSA_AGENT_INFO_NODE: Final = 16  # uint32
HSA_AGENT_INFO_DEVICE: Final = 17  # hsa_device_type_t
HSA_AMD_AGENT_INFO_CHIP_ID: Final = 0xA000  # uint32
HSA_AMD_AGENT_INFO_BDFID: Final = 0xA006  # uint32
HSA_AMD_AGENT_INFO_PRODUCT_NAME: Final = 0xA009  # char[64]
HSA_AMD_AGENT_INFO_DOMAIN: Final = 0xA00F  # uint32, the PCI domain (pairs with BDFID)
HSA_AMD_AGENT_INFO_UUID: Final = 0xA011  # char[21]
HSA_AMD_AGENT_INFO_MEMORY_AVAIL: Final = 0xA015  # uint64, 6.x+ (5.2 answers INVALID_ARGUMENT)
HSA_DEVICE_TYPE_CPU: Final = 0
HSA_DEVICE_TYPE_GPU: Final = 1
HSA_DEVICE_TYPE_DSP: Final = 2

# -- memory pools ----------------------------------------------------------------------------
HSA_AMD_MEMORY_POOL_INFO_SEGMENT: Final = 0  # hsa_amd_segment_t
HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS: Final = 1  # uint32
HSA_AMD_MEMORY_POOL_INFO_SIZE: Final = 2  # size_t
HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED: Final = 5  # bool
HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE: Final = 6  # size_t
HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT: Final = 7  # size_t
HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL: Final = 15  # bool
HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE: Final = 16  # size_t
HSA_AMD_MEMORY_POOL_INFO_LOCATION: Final = 17  # hsa_amd_memory_pool_location_t, 6.0+
HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_REC_GRANULE: Final = 18  # size_t, 6.0+
HSA_AMD_SEGMENT_GLOBAL: Final = 0
HSA_AMD_SEGMENT_READONLY: Final = 1
HSA_AMD_SEGMENT_PRIVATE: Final = 2
HSA_AMD_SEGMENT_GROUP: Final = 3
HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT: Final = 0x1
HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED: Final = 0x2
HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED: Final = 0x4
HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_EXTENDED_SCOPE_FINE_GRAINED: Final = 0x8  # 6.0+
HSA_AMD_MEMORY_POOL_LOCATION_CPU: Final = 0  # 6.0+
HSA_AMD_MEMORY_POOL_LOCATION_GPU: Final = 1  # 6.0+
HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS: Final = 0
HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED: Final = 0
HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT: Final = 1
HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT: Final = 2

# -- access permissions and vmem types -------------------------------------------------------
HSA_ACCESS_PERMISSION_NONE: Final = 0  # 6.0+
HSA_ACCESS_PERMISSION_RO: Final = 1
HSA_ACCESS_PERMISSION_WO: Final = 2
HSA_ACCESS_PERMISSION_RW: Final = 3
MEMORY_TYPE_NONE: Final = 0  # 6.0+ (hsa_amd_memory_type_t)
MEMORY_TYPE_PINNED: Final = 1  # 6.0+
HSA_AMD_VMEM_ADDRESS_NO_REGISTER: Final = 1  # 7.0 (interface 1.10): not accepted by aml-hsa

# -- hsa_amd_pointer_type_t (hsa_amd_pointer_info's answer) ---------------------------------
HSA_EXT_POINTER_TYPE_UNKNOWN: Final = 0  # not known to ROCr (or the query found nothing)
HSA_EXT_POINTER_TYPE_HSA: Final = 1
HSA_EXT_POINTER_TYPE_LOCKED: Final = 2
HSA_EXT_POINTER_TYPE_GRAPHICS: Final = 3
HSA_EXT_POINTER_TYPE_IPC: Final = 4  # attached with hsa_amd_ipc_memory_attach

# -- structs ---------------------------------------------------------------------------------
#: ``hsa_agent_t``, ``hsa_amd_memory_pool_t``, ``hsa_amd_vmem_alloc_handle_t`` are
#: ``struct { uint64_t handle; }``, passed by value: on x86-64 SysV the same as a ``uint64_t``.
HANDLE_SIZE: Final = 8


class hsa_amd_memory_access_desc_t(ctypes.Structure):
    """16 bytes: ``permissions`` @0 (4 B, then 4 B padding), ``agent_handle`` @8 (6.0+)."""

    _fields_ = (("permissions", c_int), ("agent_handle", c_uint64))


class hsa_amd_ipc_memory_t(ctypes.Structure):
    """``struct { uint32_t handle[8]; }``: 32 bytes."""

    _fields_ = (("handle", c_uint32 * 8),)


IPC_HANDLE_SIZE: Final = ctypes.sizeof(hsa_amd_ipc_memory_t)


class hsa_amd_pointer_info_t(ctypes.Structure):
    """56 bytes (5.2): ``size`` @0 (uint32: the caller sets the struct's size, ROCr answers
    the size it filled, if smaller), ``type`` @4, ``agentBaseAddress`` @8,
    ``hostBaseAddress`` @16, ``sizeInBytes`` @24, ``userData`` @32, ``agentOwner`` @40,
    ``global_flags`` @48 (uint32, then 4 B padding). "Within a ROCr major version this
    structure can only grow": the fields up to ``sizeInBytes`` are in every version."""

    _fields_ = (
        ("size", c_uint32),
        ("type", c_int),
        ("agentBaseAddress", ctypes.c_void_p),
        ("hostBaseAddress", ctypes.c_void_p),
        ("sizeInBytes", ctypes.c_size_t),
        ("userData", ctypes.c_void_p),
        ("agentOwner", c_uint64),
        ("global_flags", c_uint32),
    )


#: The least ``size`` a successful ``hsa_amd_pointer_info`` can answer: up to the end of
#: ``sizeInBytes``, the range aml-hsa reads.
POINTER_INFO_MIN_SIZE: Final = (
    hsa_amd_pointer_info_t.sizeInBytes.offset + hsa_amd_pointer_info_t.sizeInBytes.size
)

# -- version history -------------------------------------------------------------------------
INTERFACE_VMEM: Final = (1, 4)
INTERFACE_RESERVE_ALIGN: Final = (1, 6)

#: The 12 virtual-memory functions of interface 1.4 (ROCm 6.0); with reserve_align, 13.
VMEM_FUNCTIONS: Final[tuple[str, ...]] = (
    "hsa_amd_vmem_address_reserve",
    "hsa_amd_vmem_address_free",
    "hsa_amd_vmem_handle_create",
    "hsa_amd_vmem_handle_release",
    "hsa_amd_vmem_map",
    "hsa_amd_vmem_unmap",
    "hsa_amd_vmem_set_access",
    "hsa_amd_vmem_get_access",
    "hsa_amd_vmem_export_shareable_handle",
    "hsa_amd_vmem_import_shareable_handle",
    "hsa_amd_vmem_retain_alloc_handle",
    "hsa_amd_vmem_get_alloc_properties_from_handle",
)
RESERVE_ALIGN: Final = "hsa_amd_vmem_address_reserve_align"

#: Values not in the Debian 5.2 headers, with the interface that brought them.
SINCE: Final[dict[str, tuple[int, int]]] = {
    "HSA_STATUS_ERROR_RESOURCE_BUSY": (1, 6),
    # ROCr 5.3 (ROCR-Runtime commit 4ac8402, April 2022) with the interface still at 1.0:
    # no interface version tells, the library's answer does (5.2 refuses the attribute).
    "HSA_AMD_AGENT_INFO_MEMORY_AVAIL": (1, 0),
    "HSA_STATUS_ERROR_NOT_SUPPORTED": (1, 10),
    "HSA_AMD_MEMORY_POOL_INFO_LOCATION": (1, 4),
    "HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_REC_GRANULE": (1, 4),
    "HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_EXTENDED_SCOPE_FINE_GRAINED": (1, 3),
    "HSA_AMD_MEMORY_POOL_LOCATION_CPU": (1, 4),
    "HSA_AMD_MEMORY_POOL_LOCATION_GPU": (1, 4),
    "HSA_ACCESS_PERMISSION_NONE": (1, 4),
    "MEMORY_TYPE_NONE": (1, 4),
    "MEMORY_TYPE_PINNED": (1, 4),
    "HSA_AMD_VMEM_ADDRESS_NO_REGISTER": (1, 10),
    "sizeof(hsa_amd_memory_access_desc_t)": (1, 4),
    "offsetof(hsa_amd_memory_access_desc_t,permissions)": (1, 4),
    "offsetof(hsa_amd_memory_access_desc_t,agent_handle)": (1, 4),
}


def probe_expectations() -> dict[str, int]:
    """Every value and layout of this module by its C spelling (what ``abi_probe.c`` prints)."""
    values = {
        name: value
        for name, value in globals().items()
        if name.startswith(("HSA_", "MEMORY_TYPE_")) and isinstance(value, int) and name != "HANDLE_SIZE"
    }
    values["sizeof(hsa_amd_ipc_memory_t)"] = ctypes.sizeof(hsa_amd_ipc_memory_t)
    values["sizeof(hsa_agent_t)"] = HANDLE_SIZE
    values["sizeof(hsa_amd_memory_pool_t)"] = HANDLE_SIZE
    values["sizeof(hsa_amd_memory_access_desc_t)"] = ctypes.sizeof(hsa_amd_memory_access_desc_t)
    values["sizeof(hsa_amd_pointer_info_t)"] = ctypes.sizeof(hsa_amd_pointer_info_t)
    for field in ("size", "type", "agentBaseAddress", "hostBaseAddress", "sizeInBytes", "agentOwner"):
        values[f"offsetof(hsa_amd_pointer_info_t,{field})"] = getattr(hsa_amd_pointer_info_t, field).offset
    values["offsetof(hsa_amd_memory_access_desc_t,permissions)"] = (
        hsa_amd_memory_access_desc_t.permissions.offset
    )
    values["offsetof(hsa_amd_memory_access_desc_t,agent_handle)"] = (
        hsa_amd_memory_access_desc_t.agent_handle.offset
    )
    return values


#: The names of :func:`probe_expectations` the Debian 5.2 headers define (all but SINCE).
DEBIAN_NAMES: Final[frozenset[str]] = frozenset(probe_expectations()) - frozenset(SINCE)


#: dma-buf export (interface 1.1, ROCm 5.6; not in Debian's 5.2 library).
DMABUF_FUNCTIONS: Final = ("hsa_amd_portable_export_dmabuf", "hsa_amd_portable_close_dmabuf")


def interface_of(has: object) -> tuple[int, int]:
    """The AMD interface version a library provides at least, from its symbols:
    ``has(name) -> bool``. (1, 6) with ``reserve_align``, (1, 4) with the 12 vmem calls,
    else (1, 0)."""
    if not callable(has):  # pragma: no cover - a programming error
        raise TypeError("has must be callable")
    if not all(has(name) for name in VMEM_FUNCTIONS):
        return (1, 0)
    return INTERFACE_RESERVE_ALIGN if has(RESERVE_ALIGN) else INTERFACE_VMEM
