"""Every Level Zero constant, enum value and struct layout aml-ze uses.

This module is the one place the bindings take numbers from, so that the ABI probe
(``backends/ze/tests/native/abi_probe.c`` + ``test_ze_abi.py``) checks exactly what the
bindings use against Debian's ``libze-dev`` headers (API 1.4, ``ZE_API_VERSION_CURRENT``
0x10004: ``ze_api.h`` and, for the Sysman values (``ZES_*``, ``zes_*_t``), ``zes_api.h``).
The values used here are the same in the 1.4 and 1.17 headers; the only difference that
matters, the host allocation flags (1.17 adds ``MEM_READ_ONLY`` 0x10), is kept at 1.4's
bits (:data:`HOST_MEM_ALLOC_FLAGS`).
"""

from __future__ import annotations

import ctypes
from typing import Final

__all__ = [
    "DEVICE_MEM_ALLOC_FLAGS",
    "HOST_MEM_ALLOC_FLAGS",
    "RESULT_NAMES",
    "STRUCTS",
    "ze_context_desc_t",
    "ze_device_mem_alloc_desc_t",
    "ze_device_memory_properties_t",
    "ze_device_properties_t",
    "ze_host_mem_alloc_desc_t",
    "ze_ipc_mem_handle_t",
    "ze_external_memory_export_desc_t",
    "ze_external_memory_export_fd_t",
    "ze_memory_allocation_properties_t",
    "ze_physical_mem_desc_t",
    "zes_device_properties_t",
    "zes_mem_properties_t",
    "zes_mem_state_t",
]

# -- ze_result_t (uint32) -----------------------------------------------------------------------
ZE_RESULT_SUCCESS: Final = 0x0
ZE_RESULT_NOT_READY: Final = 0x1
ZE_RESULT_ERROR_DEVICE_LOST: Final = 0x70000001
ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY: Final = 0x70000002
ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY: Final = 0x70000003
ZE_RESULT_ERROR_MODULE_BUILD_FAILURE: Final = 0x70000004
ZE_RESULT_ERROR_MODULE_LINK_FAILURE: Final = 0x70000005
ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET: Final = 0x70000006
ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE: Final = 0x70000007
ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS: Final = 0x70010000
ZE_RESULT_ERROR_NOT_AVAILABLE: Final = 0x70010001
ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE: Final = 0x70020000
ZE_RESULT_ERROR_UNINITIALIZED: Final = 0x78000001
ZE_RESULT_ERROR_UNSUPPORTED_VERSION: Final = 0x78000002
ZE_RESULT_ERROR_UNSUPPORTED_FEATURE: Final = 0x78000003
ZE_RESULT_ERROR_INVALID_ARGUMENT: Final = 0x78000004
ZE_RESULT_ERROR_INVALID_NULL_HANDLE: Final = 0x78000005
ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE: Final = 0x78000006
ZE_RESULT_ERROR_INVALID_NULL_POINTER: Final = 0x78000007
ZE_RESULT_ERROR_INVALID_SIZE: Final = 0x78000008
ZE_RESULT_ERROR_UNSUPPORTED_SIZE: Final = 0x78000009
ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT: Final = 0x7800000A
ZE_RESULT_ERROR_INVALID_SYNCHRONIZATION_OBJECT: Final = 0x7800000B
ZE_RESULT_ERROR_INVALID_ENUMERATION: Final = 0x7800000C
ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION: Final = 0x7800000D
ZE_RESULT_ERROR_UNSUPPORTED_IMAGE_FORMAT: Final = 0x7800000E
ZE_RESULT_ERROR_INVALID_NATIVE_BINARY: Final = 0x7800000F
ZE_RESULT_ERROR_OVERLAPPING_REGIONS: Final = 0x7800001A
ZE_RESULT_ERROR_UNKNOWN: Final = 0x7FFFFFFE

#: The other ze_result_t values of the 1.4 header (for error names; none has a row of its own).
ZE_RESULT_EXP_ERROR_DEVICE_IS_NOT_VERTEX: Final = 0x7FF00001
ZE_RESULT_EXP_ERROR_VERTEX_IS_NOT_DEVICE: Final = 0x7FF00002
ZE_RESULT_EXP_ERROR_REMOTE_DEVICE: Final = 0x7FF00003
ZE_RESULT_WARNING_DROPPED_DATA: Final = 0x70020001
ZE_RESULT_ERROR_INVALID_GLOBAL_NAME: Final = 0x78000010
ZE_RESULT_ERROR_INVALID_KERNEL_NAME: Final = 0x78000011
ZE_RESULT_ERROR_INVALID_FUNCTION_NAME: Final = 0x78000012
ZE_RESULT_ERROR_INVALID_GROUP_SIZE_DIMENSION: Final = 0x78000013
ZE_RESULT_ERROR_INVALID_GLOBAL_WIDTH_DIMENSION: Final = 0x78000014
ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX: Final = 0x78000015
ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_SIZE: Final = 0x78000016
ZE_RESULT_ERROR_INVALID_KERNEL_ATTRIBUTE_VALUE: Final = 0x78000017
ZE_RESULT_ERROR_INVALID_MODULE_UNLINKED: Final = 0x78000018
ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE: Final = 0x78000019
ZE_RESULT_WARNING_ACTION_REQUIRED: Final = 0x7800001B

#: Every ze_result_t of the 1.4 header, by value (the names the error messages use).
RESULT_NAMES: Final[dict[int, str]] = {
    value: name
    for name, value in sorted(globals().items())
    if name.startswith("ZE_RESULT_") and isinstance(value, int)
}

# -- flags and enums ------------------------------------------------------------------------
ZE_INIT_FLAG_GPU_ONLY: Final = 0x1
ZE_DEVICE_TYPE_GPU: Final = 1
ZE_DEVICE_TYPE_CPU: Final = 2
ZE_DEVICE_TYPE_FPGA: Final = 3
ZE_DEVICE_TYPE_MCA: Final = 4
ZE_DEVICE_TYPE_VPU: Final = 5
ZE_DEVICE_PROPERTY_FLAG_INTEGRATED: Final = 0x1
ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE: Final = 0x2
ZE_DEVICE_PROPERTY_FLAG_ECC: Final = 0x4
ZE_DEVICE_PROPERTY_FLAG_ONDEMANDPAGING: Final = 0x8
ZE_DEVICE_MEM_ALLOC_FLAG_BIAS_CACHED: Final = 0x1
ZE_DEVICE_MEM_ALLOC_FLAG_BIAS_UNCACHED: Final = 0x2
ZE_DEVICE_MEM_ALLOC_FLAG_BIAS_INITIAL_PLACEMENT: Final = 0x4
ZE_HOST_MEM_ALLOC_FLAG_BIAS_CACHED: Final = 0x1
ZE_HOST_MEM_ALLOC_FLAG_BIAS_UNCACHED: Final = 0x2
ZE_HOST_MEM_ALLOC_FLAG_BIAS_WRITE_COMBINED: Final = 0x4
ZE_HOST_MEM_ALLOC_FLAG_BIAS_INITIAL_PLACEMENT: Final = 0x8
#: Every ``ze_device_mem_alloc_flag_t`` bit of the 1.4 header.
DEVICE_MEM_ALLOC_FLAGS: Final = 0x7
#: Every ``ze_host_mem_alloc_flag_t`` bit of the 1.4 header (1.17 adds MEM_READ_ONLY 0x10).
HOST_MEM_ALLOC_FLAGS: Final = 0xF
ZE_MEMORY_TYPE_UNKNOWN: Final = 0
ZE_MEMORY_TYPE_HOST: Final = 1
ZE_MEMORY_TYPE_DEVICE: Final = 2
ZE_MEMORY_TYPE_SHARED: Final = 3
ZE_IPC_MEMORY_FLAG_BIAS_CACHED: Final = 0x1
ZE_MEMORY_ACCESS_ATTRIBUTE_NONE: Final = 0
ZE_MEMORY_ACCESS_ATTRIBUTE_READWRITE: Final = 1
ZE_MEMORY_ACCESS_ATTRIBUTE_READONLY: Final = 2
#: ``ze_external_memory_type_flag_t``: a Linux dma-buf fd (dma-buf export, docs/dmabuf.md).
ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF: Final = 0x2

# -- ze_structure_type_t ------------------------------------------------------------------------
ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES: Final = 0x3
ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES: Final = 0x7
ZE_STRUCTURE_TYPE_CONTEXT_DESC: Final = 0xD
ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC: Final = 0x15
ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC: Final = 0x16
ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES: Final = 0x17
ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_DESC: Final = 0x18
ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_FD: Final = 0x1A
ZE_STRUCTURE_TYPE_PHYSICAL_MEM_DESC: Final = 0x20

# -- Sysman (zes_api.h): zes_structure_type_t, zes_mem_loc_t ----------------------------------
ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES: Final = 0x1
ZES_STRUCTURE_TYPE_MEM_PROPERTIES: Final = 0xB
ZES_STRUCTURE_TYPE_MEM_STATE: Final = 0x1E
ZES_MEM_LOC_SYSTEM: Final = 0
ZES_MEM_LOC_DEVICE: Final = 1
ZES_STRING_PROPERTY_SIZE: Final = 64

# -- constants --------------------------------------------------------------------------------
ZE_MAX_IPC_HANDLE_SIZE: Final = 64
ZE_MAX_DEVICE_NAME: Final = 256
ZE_MAX_DEVICE_UUID_SIZE: Final = 16
ZE_API_VERSION_1_4: Final = (1 << 16) | 4


def version_string(version: int) -> str:
    """``ZE_MAKE_VERSION(1, 4)`` (0x10004) -> ``"1.4"``."""
    return f"{version >> 16}.{version & 0xFFFF}"


# -- structs (every desc starts with uint32 stype @0 and void* pNext @8) -----------------------
class ze_context_desc_t(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32)]


class ze_device_mem_alloc_desc_t(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("flags", ctypes.c_uint32),
        ("ordinal", ctypes.c_uint32),
    ]


class ze_host_mem_alloc_desc_t(ctypes.Structure):
    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32)]


class ze_memory_allocation_properties_t(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint64),
        ("pageSize", ctypes.c_uint64),
    ]


class ze_external_memory_export_desc_t(ctypes.Structure):
    """Chained to a device allocation's descriptor: the allocation may be exported."""

    _fields_ = [("stype", ctypes.c_uint32), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32)]


class ze_external_memory_export_fd_t(ctypes.Structure):
    """Chained to ``zeMemGetAllocProperties``'s properties: the allocation as an fd."""

    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("flags", ctypes.c_uint32),
        ("fd", ctypes.c_int),
    ]


class ze_physical_mem_desc_t(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("flags", ctypes.c_uint32),
        ("size", ctypes.c_size_t),
    ]


class ze_ipc_mem_handle_t(ctypes.Structure):
    _fields_ = [("data", ctypes.c_char * ZE_MAX_IPC_HANDLE_SIZE)]


class ze_device_properties_t(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("type", ctypes.c_uint32),
        ("vendorId", ctypes.c_uint32),
        ("deviceId", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("subdeviceId", ctypes.c_uint32),
        ("coreClockRate", ctypes.c_uint32),
        ("maxMemAllocSize", ctypes.c_uint64),
        ("maxHardwareContexts", ctypes.c_uint32),
        ("maxCommandQueuePriority", ctypes.c_uint32),
        ("numThreadsPerEU", ctypes.c_uint32),
        ("physicalEUSimdWidth", ctypes.c_uint32),
        ("numEUsPerSubslice", ctypes.c_uint32),
        ("numSubslicesPerSlice", ctypes.c_uint32),
        ("numSlices", ctypes.c_uint32),
        ("timerResolution", ctypes.c_uint64),
        ("timestampValidBits", ctypes.c_uint32),
        ("kernelTimestampValidBits", ctypes.c_uint32),
        ("uuid", ctypes.c_uint8 * ZE_MAX_DEVICE_UUID_SIZE),
        ("name", ctypes.c_char * ZE_MAX_DEVICE_NAME),
    ]


class ze_device_memory_properties_t(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("flags", ctypes.c_uint32),
        ("maxClockRate", ctypes.c_uint32),
        ("maxBusWidth", ctypes.c_uint32),
        ("totalSize", ctypes.c_uint64),
        ("name", ctypes.c_char * ZE_MAX_DEVICE_NAME),
    ]


class zes_device_properties_t(ctypes.Structure):
    """Sysman's device properties: the core properties (their ``uuid`` matches a Sysman
    device to a core one) and six ``char[ZES_STRING_PROPERTY_SIZE]`` strings."""

    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("core", ze_device_properties_t),
        ("numSubdevices", ctypes.c_uint32),
        ("serialNumber", ctypes.c_char * ZES_STRING_PROPERTY_SIZE),
        ("boardNumber", ctypes.c_char * ZES_STRING_PROPERTY_SIZE),
        ("brandName", ctypes.c_char * ZES_STRING_PROPERTY_SIZE),
        ("modelName", ctypes.c_char * ZES_STRING_PROPERTY_SIZE),
        ("vendorName", ctypes.c_char * ZES_STRING_PROPERTY_SIZE),
        ("driverVersion", ctypes.c_char * ZES_STRING_PROPERTY_SIZE),
    ]


class zes_mem_properties_t(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("type", ctypes.c_uint32),  # zes_mem_type_t
        ("onSubdevice", ctypes.c_uint8),  # ze_bool_t
        ("subdeviceId", ctypes.c_uint32),
        ("location", ctypes.c_uint32),  # zes_mem_loc_t
        ("physicalSize", ctypes.c_uint64),
        ("busWidth", ctypes.c_int32),
        ("numChannels", ctypes.c_int32),
    ]


class zes_mem_state_t(ctypes.Structure):
    _fields_ = [
        ("stype", ctypes.c_uint32),
        ("pNext", ctypes.c_void_p),
        ("health", ctypes.c_uint32),  # zes_mem_health_t
        ("free", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
    ]


#: The structs the bindings pass to the loader (the ABI probe checks size and offsets).
STRUCTS: Final[tuple[type[ctypes.Structure], ...]] = (
    ze_context_desc_t,
    ze_device_mem_alloc_desc_t,
    ze_host_mem_alloc_desc_t,
    ze_memory_allocation_properties_t,
    ze_external_memory_export_desc_t,
    ze_external_memory_export_fd_t,
    ze_physical_mem_desc_t,
    ze_ipc_mem_handle_t,
    ze_device_properties_t,
    ze_device_memory_properties_t,
    zes_device_properties_t,
    zes_mem_properties_t,
    zes_mem_state_t,
)


def constants() -> dict[str, int]:
    """Every ``ZE_*`` and ``ZES_*`` value of this module the ABI probe can compare with
    the headers."""
    return {
        name: value
        for name, value in globals().items()
        if name.startswith(("ZE_", "ZES_")) and isinstance(value, int) and name != "ZE_API_VERSION_1_4"
    }
