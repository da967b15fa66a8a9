/*
 * The Level Zero values and struct layouts the driver double (double.c) uses, declared
 * without Level Zero's header (the double builds where libze-dev is absent).
 * abi_check.c compiles them against the header: test_ze_abi.py checks they are the same.
 */
#ifndef ZEDOUBLE_ABI_H
#define ZEDOUBLE_ABI_H
#include <stdint.h>

#ifndef _ZE_API_H /* the check includes Level Zero's header first */
typedef uint32_t ze_result_t;
#endif
#define OK 0u
#define E_DEVICE_LOST 0x70000001u
#define E_OUT_OF_HOST_MEMORY 0x70000002u
#define E_OUT_OF_DEVICE_MEMORY 0x70000003u
#define E_UNINITIALIZED 0x78000001u
#define E_INVALID_ARGUMENT 0x78000004u
#define E_INVALID_NULL_HANDLE 0x78000005u
#define E_HANDLE_OBJECT_IN_USE 0x78000006u
#define E_INVALID_NULL_POINTER 0x78000007u
#define E_UNSUPPORTED_SIZE 0x78000009u
#define E_UNSUPPORTED_ALIGNMENT 0x7800000Au
#define E_INVALID_ENUMERATION 0x7800000Cu
#define E_OVERLAPPING_REGIONS 0x7800001Au
#define E_UNKNOWN 0x7FFFFFFEu


/* -- structures (API 1.4 layouts) ------------------------------------------------------- */
typedef struct { uint32_t stype; const void *pNext; uint32_t flags; } ctx_desc_t;
typedef struct { uint32_t stype; const void *pNext; uint32_t flags; uint32_t ordinal; } dev_desc_t;
typedef struct { uint32_t stype; const void *pNext; uint32_t flags; } host_desc_t;
typedef struct { uint32_t stype; void *pNext; uint32_t type; uint64_t id; uint64_t pageSize; } alloc_props_t;
typedef struct { uint32_t stype; const void *pNext; uint32_t flags; size_t size; } phys_desc_t;
/* dma-buf export: chained to a device allocation's descriptor, and to its properties */
#define STYPE_EXT_EXPORT_DESC 0x18u
#define STYPE_EXT_EXPORT_FD 0x1Au
#define EXT_MEM_DMA_BUF 0x2u
typedef struct { uint32_t stype; const void *pNext; } chain_t;
typedef struct { uint32_t stype; const void *pNext; uint32_t flags; } ext_export_desc_t;
typedef struct { uint32_t stype; const void *pNext; uint32_t flags; int fd; } ext_export_fd_t;
typedef struct { char data[64]; } ipc_handle_t;
typedef struct {
    uint32_t stype; void *pNext; uint32_t type, vendorId, deviceId, flags, subdeviceId, coreClockRate;
    uint64_t maxMemAllocSize;
    uint32_t maxHardwareContexts, maxCommandQueuePriority, numThreadsPerEU, physicalEUSimdWidth,
        numEUsPerSubslice, numSubslicesPerSlice, numSlices;
    uint64_t timerResolution;
    uint32_t timestampValidBits, kernelTimestampValidBits;
    uint8_t uuid[16];
    char name[256];
} dev_props_t;
typedef struct {
    uint32_t stype; void *pNext; uint32_t flags, maxClockRate, maxBusWidth; uint64_t totalSize; char name[256];
} mem_props_t;

/* -- Sysman (zes_api.h, API 1.4 layouts; the same in 1.17) ------------------------------- */
#define ZES_STYPE_DEVICE_PROPERTIES 0x1u
#define ZES_STYPE_MEM_PROPERTIES 0xBu
#define ZES_STYPE_MEM_STATE 0x1Eu
#define MEM_LOC_SYSTEM 0u
#define MEM_LOC_DEVICE 1u
#define MEM_TYPE_HBM 0u
#define MEM_TYPE_DDR 1u
#define MEM_HEALTH_OK 1u
typedef struct {
    uint32_t stype; void *pNext; dev_props_t core; uint32_t numSubdevices;
    char serialNumber[64], boardNumber[64], brandName[64], modelName[64], vendorName[64], driverVersion[64];
} sys_dev_props_t;
typedef struct {
    uint32_t stype; void *pNext; uint32_t type; uint8_t onSubdevice; uint32_t subdeviceId, location;
    uint64_t physicalSize; int32_t busWidth, numChannels;
} sys_mem_props_t;
typedef struct { uint32_t stype; const void *pNext; uint32_t health; uint64_t free, size; } sys_mem_state_t;

#endif
