/*
 * The driver double's own declarations (double_abi.h) against Level Zero's header: compiled
 * (never run) by test_ze_abi.py; a difference is a compile error.
 */
#include <stddef.h>

#include <level_zero/ze_api.h>
#include <level_zero/zes_api.h>

#include "double_abi.h"

#define SAME(ours, theirs) _Static_assert(sizeof(ours) == sizeof(theirs), #ours " != " #theirs)
#define AT(ours, theirs, f) _Static_assert(offsetof(ours, f) == offsetof(theirs, f), #ours "." #f)
SAME(ctx_desc_t, ze_context_desc_t);
AT(ctx_desc_t, ze_context_desc_t, flags);
SAME(dev_desc_t, ze_device_mem_alloc_desc_t);
AT(dev_desc_t, ze_device_mem_alloc_desc_t, flags);
AT(dev_desc_t, ze_device_mem_alloc_desc_t, ordinal);
SAME(host_desc_t, ze_host_mem_alloc_desc_t);
AT(host_desc_t, ze_host_mem_alloc_desc_t, flags);
SAME(alloc_props_t, ze_memory_allocation_properties_t);
AT(alloc_props_t, ze_memory_allocation_properties_t, type);
AT(alloc_props_t, ze_memory_allocation_properties_t, id);
AT(alloc_props_t, ze_memory_allocation_properties_t, pageSize);
SAME(phys_desc_t, ze_physical_mem_desc_t);
AT(phys_desc_t, ze_physical_mem_desc_t, flags);
AT(phys_desc_t, ze_physical_mem_desc_t, size);
SAME(ipc_handle_t, ze_ipc_mem_handle_t);
SAME(ext_export_desc_t, ze_external_memory_export_desc_t);
AT(ext_export_desc_t, ze_external_memory_export_desc_t, flags);
SAME(ext_export_fd_t, ze_external_memory_export_fd_t);
AT(ext_export_fd_t, ze_external_memory_export_fd_t, flags);
AT(ext_export_fd_t, ze_external_memory_export_fd_t, fd);
AT(chain_t, ze_base_desc_t, pNext);
_Static_assert(STYPE_EXT_EXPORT_DESC == ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_DESC, "stype");
_Static_assert(STYPE_EXT_EXPORT_FD == ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_FD, "stype");
_Static_assert(EXT_MEM_DMA_BUF == ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF, "external memory type");
SAME(dev_props_t, ze_device_properties_t);
AT(dev_props_t, ze_device_properties_t, maxMemAllocSize);
AT(dev_props_t, ze_device_properties_t, name);
SAME(mem_props_t, ze_device_memory_properties_t);
AT(mem_props_t, ze_device_memory_properties_t, totalSize);
AT(mem_props_t, ze_device_memory_properties_t, name);
SAME(sys_dev_props_t, zes_device_properties_t);
AT(sys_dev_props_t, zes_device_properties_t, core);
AT(sys_dev_props_t, zes_device_properties_t, numSubdevices);
AT(sys_dev_props_t, zes_device_properties_t, driverVersion);
AT(dev_props_t, ze_device_properties_t, uuid);
SAME(sys_mem_props_t, zes_mem_properties_t);
AT(sys_mem_props_t, zes_mem_properties_t, type);
AT(sys_mem_props_t, zes_mem_properties_t, onSubdevice);
AT(sys_mem_props_t, zes_mem_properties_t, subdeviceId);
AT(sys_mem_props_t, zes_mem_properties_t, location);
AT(sys_mem_props_t, zes_mem_properties_t, physicalSize);
AT(sys_mem_props_t, zes_mem_properties_t, numChannels);
SAME(sys_mem_state_t, zes_mem_state_t);
AT(sys_mem_state_t, zes_mem_state_t, health);
AT(sys_mem_state_t, zes_mem_state_t, free);
AT(sys_mem_state_t, zes_mem_state_t, size);
_Static_assert(ZES_STYPE_DEVICE_PROPERTIES == ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES, "stype");
_Static_assert(ZES_STYPE_MEM_PROPERTIES == ZES_STRUCTURE_TYPE_MEM_PROPERTIES, "stype");
_Static_assert(ZES_STYPE_MEM_STATE == ZES_STRUCTURE_TYPE_MEM_STATE, "stype");
_Static_assert(MEM_LOC_SYSTEM == ZES_MEM_LOC_SYSTEM && MEM_LOC_DEVICE == ZES_MEM_LOC_DEVICE, "location");
_Static_assert(MEM_TYPE_HBM == ZES_MEM_TYPE_HBM && MEM_TYPE_DDR == ZES_MEM_TYPE_DDR, "type");
_Static_assert(MEM_HEALTH_OK == ZES_MEM_HEALTH_OK, "health");
_Static_assert(E_UNINITIALIZED == ZE_RESULT_ERROR_UNINITIALIZED, "result");
_Static_assert(E_OUT_OF_DEVICE_MEMORY == ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY, "result");
_Static_assert(E_INVALID_ARGUMENT == ZE_RESULT_ERROR_INVALID_ARGUMENT, "result");
_Static_assert(E_HANDLE_OBJECT_IN_USE == ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE, "result");
_Static_assert(E_OVERLAPPING_REGIONS == ZE_RESULT_ERROR_OVERLAPPING_REGIONS, "result");
_Static_assert(E_UNSUPPORTED_ALIGNMENT == ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT, "result");
_Static_assert(E_INVALID_ENUMERATION == ZE_RESULT_ERROR_INVALID_ENUMERATION, "result");

int main(void) { return 0; }
