/*
 * ABI probe for aml-hsa: prints every value and layout of aml_hsa/abi.py that Debian's
 * libhsa-runtime-dev (ROCr 5.2, AMD interface 1.0) defines, one "name value" a line,
 * compiled against the vendor headers. test_hsa_abi.py compares the output with
 * aml_hsa.abi.probe_expectations() and requires the same set of names as
 * aml_hsa.abi.DEBIAN_NAMES. The 6.x-only values (interface 1.4+) are checked against
 * docs/native-abi.md#hsa-as-aml-hsa-binds-it instead.
 */
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stddef.h>
#include <stdio.h>

#define P(name) printf("%s %lld\n", #name, (long long)(name))
#define S(type) printf("sizeof(%s) %zu\n", #type, sizeof(type))
#define O(type, field) printf("offsetof(%s,%s) %zu\n", #type, #field, offsetof(type, field))

int main(void)
{
    P(HSA_ACCESS_PERMISSION_RO);
    P(HSA_ACCESS_PERMISSION_RW);
    P(HSA_ACCESS_PERMISSION_WO);
    P(HSA_AGENT_INFO_DEVICE);
    P(HSA_AGENT_INFO_NAME);
    P(HSA_AGENT_INFO_NODE);
    P(HSA_AGENT_INFO_VENDOR_NAME);
    P(HSA_AMD_AGENT_INFO_BDFID);
    P(HSA_AMD_AGENT_INFO_CHIP_ID);
    P(HSA_AMD_AGENT_INFO_DOMAIN);
    P(HSA_AMD_AGENT_INFO_PRODUCT_NAME);
    P(HSA_AMD_AGENT_INFO_UUID);
    P(HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS);
    P(HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT);
    P(HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT);
    P(HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED);
    P(HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED);
    P(HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED);
    P(HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT);
    P(HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL);
    P(HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE);
    P(HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS);
    P(HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT);
    P(HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED);
    P(HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE);
    P(HSA_AMD_MEMORY_POOL_INFO_SEGMENT);
    P(HSA_AMD_MEMORY_POOL_INFO_SIZE);
    P(HSA_AMD_SEGMENT_GLOBAL);
    P(HSA_AMD_SEGMENT_GROUP);
    P(HSA_AMD_SEGMENT_PRIVATE);
    P(HSA_AMD_SEGMENT_READONLY);
    P(HSA_DEVICE_TYPE_CPU);
    P(HSA_DEVICE_TYPE_DSP);
    P(HSA_DEVICE_TYPE_GPU);
    P(HSA_EXT_POINTER_TYPE_GRAPHICS);
    P(HSA_EXT_POINTER_TYPE_HSA);
    P(HSA_EXT_POINTER_TYPE_IPC);
    P(HSA_EXT_POINTER_TYPE_LOCKED);
    P(HSA_EXT_POINTER_TYPE_UNKNOWN);
    P(HSA_STATUS_ERROR);
    P(HSA_STATUS_ERROR_FATAL);
    P(HSA_STATUS_ERROR_INVALID_AGENT);
    P(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    P(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    P(HSA_STATUS_ERROR_INVALID_INDEX);
    P(HSA_STATUS_ERROR_INVALID_MEMORY_POOL);
    P(HSA_STATUS_ERROR_INVALID_REGION);
    P(HSA_STATUS_ERROR_INVALID_RUNTIME_STATE);
    P(HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION);
    P(HSA_STATUS_ERROR_MEMORY_FAULT);
    P(HSA_STATUS_ERROR_NOT_INITIALIZED);
    P(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    P(HSA_STATUS_ERROR_REFCOUNT_OVERFLOW);
    P(HSA_STATUS_ERROR_RESOURCE_FREE);
    P(HSA_STATUS_INFO_BREAK);
    P(HSA_STATUS_SUCCESS);
    P(HSA_SYSTEM_INFO_VERSION_MAJOR);
    P(HSA_SYSTEM_INFO_VERSION_MINOR);
    S(hsa_agent_t);
    S(hsa_amd_memory_pool_t);
    S(hsa_amd_ipc_memory_t);
    S(hsa_amd_pointer_info_t);
    O(hsa_amd_pointer_info_t, size);
    O(hsa_amd_pointer_info_t, type);
    O(hsa_amd_pointer_info_t, agentBaseAddress);
    O(hsa_amd_pointer_info_t, hostBaseAddress);
    O(hsa_amd_pointer_info_t, sizeInBytes);
    O(hsa_amd_pointer_info_t, agentOwner);
    printf("HSA_AMD_INTERFACE_VERSION %d.%d\n", HSA_AMD_INTERFACE_VERSION_MAJOR, HSA_AMD_INTERFACE_VERSION_MINOR);
    return 0;
}
