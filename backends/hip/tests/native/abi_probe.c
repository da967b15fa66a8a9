/*
 * ABI probe for aml-hip: prints every HIP constant, enum value, struct size and offset that
 * aml_hip.constants uses, as "NAME VALUE" lines, from the vendor header.
 *
 * Built and compared one by one by tests/native/hip/test_abi.py:
 *
 *     gcc -D__HIP_PLATFORM_AMD__ -o abi_probe abi_probe.c   (Debian: libamdhip64-dev)
 *
 * Version-dependent items are selected with HIP_VERSION, so the same probe compiles against
 * the 5.2 header Debian ships and against 5.3+ / 6.x / 7.x headers (ROCm) where a CI has them.
 * Keep the set of printed names equal to aml_hip.constants.probe_expectations(): the test
 * fails on any name printed here and not expected there, or the other way round.
 */
#include <stddef.h>
#include <stdio.h>

#include <hip/hip_runtime_api.h>

#define VALUE(name) printf("%s %lld\n", #name, (long long)(name))
#define SIZE(type) printf("sizeof(%s) %zu\n", #type, sizeof(type))
#define OFFSET(type, field) printf("offsetof(%s,%s) %zu\n", #type, #field, offsetof(type, field))

int main(void)
{
    printf("HIP_VERSION %lld\n", (long long)HIP_VERSION);

    /* hipError_t */
    VALUE(hipSuccess);
    VALUE(hipErrorInvalidValue);
    VALUE(hipErrorOutOfMemory);
    VALUE(hipErrorMemoryAllocation);
    VALUE(hipErrorNotInitialized);
    VALUE(hipErrorInitializationError);
    VALUE(hipErrorInsufficientDriver);
    VALUE(hipErrorNoDevice);
    VALUE(hipErrorInvalidDevice);
    VALUE(hipErrorContextAlreadyInUse);
    VALUE(hipErrorNotReady);
    VALUE(hipErrorPeerAccessUnsupported);
    VALUE(hipErrorPeerAccessAlreadyEnabled);
    VALUE(hipErrorPeerAccessNotEnabled);
    VALUE(hipErrorHostMemoryAlreadyRegistered);
    VALUE(hipErrorNotSupported);
    VALUE(hipErrorUnknown);

    /* device ids, streams, copies */
    VALUE(hipCpuDeviceId);
    VALUE(hipInvalidDeviceId);
    VALUE(hipStreamDefault);
    VALUE(hipStreamNonBlocking);
    VALUE(hipEventDisableTiming);
    VALUE(hipMemcpyDefault);

    /* host allocation / registration */
    VALUE(hipHostMallocDefault);
    VALUE(hipHostMallocPortable);
    VALUE(hipHostMallocMapped);
    VALUE(hipHostRegisterDefault);
    VALUE(hipHostRegisterPortable);
    VALUE(hipHostRegisterMapped);

    /* managed memory */
    VALUE(hipMemAttachGlobal);
    VALUE(hipMemAttachHost);
    VALUE(hipMemAttachSingle);
    VALUE(hipMemAdviseSetReadMostly);
    VALUE(hipMemAdviseUnsetReadMostly);
    VALUE(hipMemAdviseSetPreferredLocation);
    VALUE(hipMemAdviseUnsetPreferredLocation);
    VALUE(hipMemAdviseSetAccessedBy);
    VALUE(hipMemAdviseUnsetAccessedBy);
    VALUE(hipMemAdviseSetCoarseGrain);
    VALUE(hipMemAdviseUnsetCoarseGrain);
    VALUE(hipMemRangeAttributeReadMostly);
    VALUE(hipMemRangeAttributePreferredLocation);
    VALUE(hipMemRangeAttributeAccessedBy);
    VALUE(hipMemRangeAttributeLastPrefetchLocation);
    VALUE(hipMemRangeAttributeCoherencyMode);
    VALUE(hipMemRangeCoherencyModeFineGrain);
    VALUE(hipMemRangeCoherencyModeCoarseGrain);
    VALUE(hipMemRangeCoherencyModeIndeterminate);

    /* IPC */
    VALUE(HIP_IPC_HANDLE_SIZE);
    VALUE(hipIpcMemLazyEnablePeerAccess);

    /* device attributes */
    VALUE(hipDeviceAttributeCanMapHostMemory);
    VALUE(hipDeviceAttributeConcurrentManagedAccess);
    VALUE(hipDeviceAttributeComputeCapabilityMajor);
    VALUE(hipDeviceAttributeManagedMemory);
    VALUE(hipDeviceAttributeComputeCapabilityMinor);
    VALUE(hipDeviceAttributeMultiprocessorCount);
    VALUE(hipDeviceAttributePageableMemoryAccess);
    VALUE(hipDeviceAttributePciBusId);
    VALUE(hipDeviceAttributePciDeviceId);
    VALUE(hipDeviceAttributePciDomainID);
    VALUE(hipDeviceAttributeUnifiedAddressing);
#if HIP_VERSION >= 60000000
    VALUE(hipDeviceAttributeVirtualMemoryManagementSupported);
#endif

    /* hipMemoryType: renumbered in 6.0; Managed added in 5.3 */
#if HIP_VERSION >= 60000000
    VALUE(hipMemoryTypeUnregistered);
#endif
    VALUE(hipMemoryTypeHost);
    VALUE(hipMemoryTypeDevice);
#if HIP_VERSION >= 50300000
    VALUE(hipMemoryTypeManaged);
#endif
    VALUE(hipMemoryTypeArray);
    VALUE(hipMemoryTypeUnified);

    /* virtual memory enums */
    VALUE(hipMemAllocationTypePinned);
    VALUE(hipMemHandleTypeNone);
    VALUE(hipMemHandleTypePosixFileDescriptor);
    VALUE(hipMemLocationTypeDevice);
    VALUE(hipMemAccessFlagsProtNone);
    VALUE(hipMemAccessFlagsProtRead);
    VALUE(hipMemAccessFlagsProtReadWrite);
    VALUE(hipMemAllocationGranularityMinimum);
    VALUE(hipMemAllocationGranularityRecommended);

    /* structs */
    SIZE(hipMemLocation);
    OFFSET(hipMemLocation, type);
    OFFSET(hipMemLocation, id);
    SIZE(hipMemAccessDesc);
    OFFSET(hipMemAccessDesc, location);
    OFFSET(hipMemAccessDesc, flags);
    SIZE(hipIpcMemHandle_t);
    OFFSET(hipIpcMemHandle_t, reserved);
    SIZE(hipPointerAttribute_t);
#if HIP_VERSION >= 60000000
    OFFSET(hipPointerAttribute_t, type);
#else
    OFFSET(hipPointerAttribute_t, memoryType);
#endif
    OFFSET(hipPointerAttribute_t, device);
    OFFSET(hipPointerAttribute_t, devicePointer);
    OFFSET(hipPointerAttribute_t, hostPointer);
    OFFSET(hipPointerAttribute_t, isManaged);
    OFFSET(hipPointerAttribute_t, allocationFlags);
    SIZE(hipMemAllocationProp);
#if HIP_VERSION >= 50300000
    OFFSET(hipMemAllocationProp, type);
    OFFSET(hipMemAllocationProp, requestedHandleType);
    OFFSET(hipMemAllocationProp, location);
    OFFSET(hipMemAllocationProp, win32HandleMetaData);
    OFFSET(hipMemAllocationProp, allocFlags);
    OFFSET(hipMemAllocationProp, allocFlags.compressionType);
    OFFSET(hipMemAllocationProp, allocFlags.gpuDirectRDMACapable);
    OFFSET(hipMemAllocationProp, allocFlags.usage);
#else
    OFFSET(hipMemAllocationProp, compressionType);
    OFFSET(hipMemAllocationProp, location);
    OFFSET(hipMemAllocationProp, requestedHandleType);
    OFFSET(hipMemAllocationProp, type);
    OFFSET(hipMemAllocationProp, usage);
    OFFSET(hipMemAllocationProp, win32HandleMetaData);
#endif

    /* enum and handle sizes the ctypes prototypes rely on */
    SIZE(hipError_t);
    SIZE(hipDeviceAttribute_t);
    SIZE(hipMemoryAdvise);
    SIZE(hipMemRangeAttribute);
    SIZE(hipMemcpyKind);
    SIZE(hipMemAllocationHandleType);
    SIZE(hipMemAllocationGranularity_flags);
    SIZE(hipStream_t);
    SIZE(hipEvent_t);
    SIZE(hipMemGenericAllocationHandle_t);
    return 0;
}
