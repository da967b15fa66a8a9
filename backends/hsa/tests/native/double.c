/*
 * HSA "driver double": a stand-in for libhsa-runtime64.so.1 used by the aml-hsa tests.
 *
 * One source, two builds (see hsa_double.py and README.md in this folder):
 *
 *   host mode (default)     agents, memory pools and every hsa_amd_vmem_* call over ordinary
 *                           host memory with real bookkeeping: reservations are PROT_NONE
 *                           mmaps, physical memory is a memfd, set_access changes the page
 *                           protection (mprotect) so a read-only mapping really faults on
 *                           write, exported handles are real fds another process can import,
 *                           pool memory is shared with other processes through IPC handles.
 *   forward mode            -DHSADOUBLE_FORWARD_CUDA: the same bookkeeping and checks, with
 *                           the memory operations forwarded to the CUDA driver's virtual
 *                           memory calls (cuMemAddressReserve, cuMemCreate with POSIX-fd
 *                           handles, cuMemMap, cuMemSetAccess, cuMemExportToShareableHandle,
 *                           cuMemImportFromShareableHandle...) on an NVIDIA GPU.
 *
 * The behaviour follows ROCr's documented contract for hsa_amd_vmem_* (interface 1.4/1.6)
 * and the sequence of rocrtst's functional virtual_memory test: get_access is NONE before
 * any set_access and INVALID_ALLOCATION on an unmapped range; releasing twice fails; unmap
 * or free with the wrong size fails; overlapping maps fail; free of a range still mapped is
 * RESOURCE_FREE. Values are those of hsa.h / hsa_ext_amd.h; this file includes no HSA
 * header (the ABI probe checks the values against Debian's headers).
 *
 * dma-buf export (hsa_amd_portable_export_dmabuf / _close_dmabuf, interface 1.1+): host mode
 * hands out a dup of the pool allocation's memfd with the pointer's offset in it; forward
 * mode the CUDA driver's dma-buf of the allocation (cuMemGetHandleForAddressRange).
 *
 * Variants: -DHSADOUBLE_NO_VMEM exports no hsa_amd_vmem_* and no dma-buf export (ROCr 5.2,
 * interface 1.0);
 * -DHSADOUBLE_NO_ALIGN exports no hsa_amd_vmem_address_reserve_align (interface 1.4).
 *
 * Control API (exported, used through ctypes): hsadouble_inject, hsadouble_reset,
 * hsadouble_calls, hsadouble_live, hsadouble_set_gpus, hsadouble_mode, hsadouble_interface,
 * hsadouble_pointer_info_size.
 * Environment: HSADOUBLE_GPUS (GPU agents, default 1), HSADOUBLE_NO_KFD=1 (hsa_init fails
 * with OUT_OF_RESOURCES, as ROCr does without /dev/kfd), HSADOUBLE_FAULTS
 * ("function=status[:skip[:times]],...").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef HSADOUBLE_FORWARD_CUDA
#include <cuda.h>
#endif

#define API __attribute__((visibility("default")))
#ifdef HSADOUBLE_NO_VMEM
#define VMEM_API static __attribute__((unused))
#define DMABUF_API static __attribute__((unused))
#else
#define VMEM_API API
#define DMABUF_API API
#endif
#if defined(HSADOUBLE_NO_VMEM) || defined(HSADOUBLE_NO_ALIGN)
#define ALIGN_API static __attribute__((unused))
#else
#define ALIGN_API API
#endif

/* ---------------------------------------------------------------------------------------- */
/* HSA ABI (x86-64 LP64)                                                                     */
/* ---------------------------------------------------------------------------------------- */
typedef int hsa_status_t;
typedef uint64_t handle_t; /* hsa_agent_t, hsa_amd_memory_pool_t, hsa_amd_vmem_alloc_handle_t */

typedef struct {
    int permissions;
    uint64_t agent_handle;
} hsa_amd_memory_access_desc_t;
typedef struct {
    uint32_t handle[8];
} hsa_amd_ipc_memory_t;
_Static_assert(sizeof(hsa_amd_memory_access_desc_t) == 16, "access desc");
_Static_assert(offsetof(hsa_amd_memory_access_desc_t, agent_handle) == 8, "access desc agent");
_Static_assert(sizeof(hsa_amd_ipc_memory_t) == 32, "ipc handle");
/* hsa_amd_pointer_info_t of the 5.2 header: the caller sets size; the runtime answers the
 * size it filled when smaller, and leaves the members past it untouched. */
typedef struct {
    uint32_t size;
    int type;
    void *agentBaseAddress;
    void *hostBaseAddress;
    size_t sizeInBytes;
    void *userData;
    uint64_t agentOwner;
    uint32_t global_flags;
} hsa_amd_pointer_info_t;
_Static_assert(sizeof(hsa_amd_pointer_info_t) == 56, "pointer info");
_Static_assert(offsetof(hsa_amd_pointer_info_t, sizeInBytes) == 24, "pointer info size");
_Static_assert(offsetof(hsa_amd_pointer_info_t, agentOwner) == 40, "pointer info owner");
enum { POINTER_UNKNOWN = 0, POINTER_HSA = 1, POINTER_IPC = 4 };

enum {
    HSA_STATUS_SUCCESS = 0x0,
    HSA_STATUS_INFO_BREAK = 0x1,
    HSA_STATUS_ERROR = 0x1000,
    HSA_STATUS_ERROR_INVALID_ARGUMENT = 0x1001,
    HSA_STATUS_ERROR_INVALID_ALLOCATION = 0x1003,
    HSA_STATUS_ERROR_INVALID_AGENT = 0x1004,
    HSA_STATUS_ERROR_OUT_OF_RESOURCES = 0x1008,
    HSA_STATUS_ERROR_RESOURCE_FREE = 0x100A,
    HSA_STATUS_ERROR_NOT_INITIALIZED = 0x100B,
    HSA_STATUS_ERROR_INVALID_MEMORY_POOL = 40,
};
enum { SYS_VERSION_MAJOR = 0, SYS_VERSION_MINOR = 1 };
enum {
    AGENT_NAME = 0,
    AGENT_VENDOR = 1,
    AGENT_NODE = 16,
    AGENT_DEVICE = 17,
    AGENT_CHIP_ID = 0xA000,
    AGENT_BDFID = 0xA006,
    AGENT_PRODUCT = 0xA009,
    AGENT_DOMAIN = 0xA00F,
    AGENT_UUID = 0xA011,
    AGENT_MEMORY_AVAIL = 0xA015
};
enum { DEVICE_CPU = 0, DEVICE_GPU = 1 };
enum {
    POOL_SEGMENT = 0,
    POOL_FLAGS = 1,
    POOL_SIZE = 2,
    POOL_ALLOWED = 5,
    POOL_GRANULE = 6,
    POOL_ALIGNMENT = 7,
    POOL_BY_ALL = 15,
    POOL_MAX = 16,
    POOL_LOCATION = 17,
    POOL_REC_GRANULE = 18
};
enum { SEG_GLOBAL = 0, SEG_GROUP = 3 };
enum { FLAG_KERNARG = 1, FLAG_FINE = 2, FLAG_COARSE = 4 };
enum { PERM_NONE = 0, PERM_RO = 1, PERM_WO = 2, PERM_RW = 3 };

/* ---------------------------------------------------------------------------------------- */
/* functions, call counters, fault injection                                                 */
/* ---------------------------------------------------------------------------------------- */
#define FUNCTIONS(X)                                                                          \
    X(hsa_init)                                                                               \
    X(hsa_shut_down)                                                                          \
    X(hsa_status_string)                                                                      \
    X(hsa_system_get_info)                                                                    \
    X(hsa_iterate_agents)                                                                     \
    X(hsa_agent_get_info)                                                                     \
    X(hsa_amd_agent_iterate_memory_pools)                                                     \
    X(hsa_amd_memory_pool_get_info)                                                           \
    X(hsa_amd_agent_memory_pool_get_info)                                                     \
    X(hsa_amd_memory_pool_allocate)                                                           \
    X(hsa_amd_memory_pool_free)                                                               \
    X(hsa_amd_agents_allow_access)                                                            \
    X(hsa_memory_copy)                                                                        \
    X(hsa_amd_ipc_memory_create)                                                              \
    X(hsa_amd_ipc_memory_attach)                                                              \
    X(hsa_amd_ipc_memory_detach)                                                              \
    X(hsa_amd_pointer_info)                                                                   \
    X(hsa_amd_portable_export_dmabuf)                                                         \
    X(hsa_amd_portable_close_dmabuf)                                                          \
    X(hsa_amd_vmem_address_reserve)                                                           \
    X(hsa_amd_vmem_address_reserve_align)                                                     \
    X(hsa_amd_vmem_address_free)                                                              \
    X(hsa_amd_vmem_handle_create)                                                             \
    X(hsa_amd_vmem_handle_release)                                                            \
    X(hsa_amd_vmem_map)                                                                       \
    X(hsa_amd_vmem_unmap)                                                                     \
    X(hsa_amd_vmem_set_access)                                                                \
    X(hsa_amd_vmem_get_access)                                                                \
    X(hsa_amd_vmem_export_shareable_handle)                                                   \
    X(hsa_amd_vmem_import_shareable_handle)                                                   \
    X(hsa_amd_vmem_retain_alloc_handle)                                                       \
    X(hsa_amd_vmem_get_alloc_properties_from_handle)

#define ENUM_FN(name) FN_##name,
enum { FUNCTIONS(ENUM_FN) FN_COUNT };
#define NAME_FN(name) #name,
static const char *const fn_names[FN_COUNT] = {FUNCTIONS(NAME_FN)};

#define MAX_FAULTS 64
typedef struct {
    int fn, status, skip, times; /* times -1: forever */
} fault_t;

#define MAX_GPUS 8
#define MAX_AGENTS (MAX_GPUS + 1)

typedef struct reservation {
    uintptr_t va;
    size_t size, mapped_len; /* mapped_len: what was mmapped (host mode, alignment slack) */
    uintptr_t map_base;
    struct reservation *next;
} reservation_t;

typedef struct vhandle {
    uint64_t id;
    uint64_t pool;
    size_t size;
    int type;
    int refs, maps;
    int fd; /* host mode: the memfd */
#ifdef HSADOUBLE_FORWARD_CUDA
    CUmemGenericAllocationHandle cu;
#endif
    struct vhandle *next;
} vhandle_t;

typedef struct vmapping {
    uintptr_t va;
    size_t size;
    vhandle_t *handle;
    int perms[MAX_AGENTS];
    struct vmapping *next;
} vmapping_t;

typedef struct pool_alloc {
    uintptr_t ptr;
    size_t size, mapped;
    uint64_t pool;
    int fd;
    int host; /* forward mode: cuMemHostAlloc rather than cuMemAlloc */
    struct pool_alloc *next;
} pool_alloc_t;

typedef struct attachment {
    uintptr_t ptr;
    size_t mapped, size; /* size: the exported allocation's (what pointer info reports) */
    uint64_t agent;
    struct attachment *next;
} attachment_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
static int gpus = 1;
static size_t gpu_memory = (size_t)1 << 30;
static long calls[FN_COUNT];
static fault_t faults[MAX_FAULTS];
static int nfaults;
static uint64_t next_id = 1;
static uint32_t ipc_serial;
static reservation_t *reservations;
static vhandle_t *vhandles;
static vmapping_t *vmappings;
static pool_alloc_t *pool_allocs;
static attachment_t *attachments;
static int env_read;
static uint32_t pointer_info_size; /* hsadouble_pointer_info_size: 0 reports the whole struct */

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* ---------------------------------------------------------------------------------------- */
/* agents and pools                                                                          */
/* ---------------------------------------------------------------------------------------- */
#define CPU_AGENT 0x1000u
#define GPU_AGENT(i) (0x2000u + 0x100u * (unsigned)(i))
#define SYS_FINE_POOL 0x10000u
#define SYS_COARSE_POOL 0x10001u
#define GPU_POOL(i) (0x20000u + 0x10u * (unsigned)(i))
#define GPU_GROUP_POOL(i) (0x20001u + 0x10u * (unsigned)(i))

/* agent index: 0 the CPU, 1 + i GPU i; -1 unknown */
static int agent_index(uint64_t agent)
{
    if (agent == CPU_AGENT)
        return 0;
    for (int i = 0; i < gpus; i++)
        if (agent == GPU_AGENT(i))
            return 1 + i;
    return -1;
}

typedef struct {
    uint64_t handle;
    int agent; /* agent index */
    int segment, flags, allowed;
    size_t size, granule, rec_granule, alignment;
    int location, by_all;
} pool_t;

#ifdef HSADOUBLE_FORWARD_CUDA
static size_t forward_granule(int device, int recommended);
static size_t forward_memory(int device);
#endif

static int pool_of(uint64_t handle, pool_t *out)
{
    pool_t p;
    memset(&p, 0, sizeof p);
    p.handle = handle;
    if (handle == SYS_FINE_POOL || handle == SYS_COARSE_POOL) {
        p.agent = 0;
        p.segment = SEG_GLOBAL;
        p.flags = handle == SYS_FINE_POOL ? (FLAG_FINE | FLAG_KERNARG) : FLAG_COARSE;
        p.allowed = 1;
        p.size = (size_t)4 << 30;
        p.granule = page_size();
        p.rec_granule = page_size();
#ifdef HSADOUBLE_FORWARD_CUDA
        p.alignment = 256; /* what cuMemHostAlloc guarantees (it sub-allocates small sizes) */
#else
        p.alignment = page_size();
#endif
        p.location = 0;
        p.by_all = handle == SYS_FINE_POOL;
        *out = p;
        return 0;
    }
    for (int i = 0; i < gpus; i++) {
        if (handle == GPU_POOL(i)) {
            p.agent = 1 + i;
            p.segment = SEG_GLOBAL;
            p.flags = FLAG_COARSE;
            p.allowed = 1;
#ifdef HSADOUBLE_FORWARD_CUDA
            p.size = forward_memory(i);
            p.granule = forward_granule(i, 0);
            p.rec_granule = forward_granule(i, 1);
#else
            p.size = gpu_memory;
            p.granule = page_size();
            p.rec_granule = (size_t)2 << 20; /* VRAM's recommended granule: 2 MiB */
#endif
#ifdef HSADOUBLE_FORWARD_CUDA
            p.alignment = 256; /* what cuMemAlloc guarantees */
#else
            p.alignment = p.granule;
#endif
            p.location = 1;
            *out = p;
            return 0;
        }
        if (handle == GPU_GROUP_POOL(i)) {
            p.agent = 1 + i;
            p.segment = SEG_GROUP;
            p.size = 64 << 10;
            p.location = 1;
            *out = p;
            return 0;
        }
    }
    return -1;
}

/* ---------------------------------------------------------------------------------------- */
/* control API                                                                               */
/* ---------------------------------------------------------------------------------------- */
static int fn_index(const char *name)
{
    for (int i = 0; i < FN_COUNT; i++)
        if (name && strcmp(name, fn_names[i]) == 0)
            return i;
    return -1;
}

static int add_fault(int fn, int status, int skip, int times)
{
    if (skip < 0 || times == 0 || times < -1)
        return -2;
    if (nfaults >= MAX_FAULTS)
        return -3;
    faults[nfaults++] = (fault_t){fn, status, skip, times};
    return 0;
}

static void read_env(void)
{
    if (env_read)
        return;
    env_read = 1;
    const char *g = getenv("HSADOUBLE_GPUS");
    if (g && *g) {
        int n = atoi(g);
        if (n >= 0 && n <= MAX_GPUS)
            gpus = n;
    }
    const char *f = getenv("HSADOUBLE_FAULTS");
    if (f && *f) {
        char *copy = strdup(f), *save = NULL;
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            char name[128];
            int status = 0, skip = 0, times = 1;
            if (sscanf(tok, "%127[^=]=%i:%i:%i", name, &status, &skip, &times) >= 2) {
                int fn = fn_index(name);
                if (fn >= 0)
                    add_fault(fn, status, skip, times);
            }
        }
        free(copy);
    }
}

API int hsadouble_inject(const char *function, int status, int skip, int times)
{
    int fn = fn_index(function);
    if (fn < 0)
        return -1;
    pthread_mutex_lock(&lock);
    int rc = add_fault(fn, status, skip, times);
    pthread_mutex_unlock(&lock);
    return rc;
}

API long hsadouble_calls(const char *function)
{
    int fn = fn_index(function);
    if (fn < 0)
        return -1;
    pthread_mutex_lock(&lock);
    long n = calls[fn];
    pthread_mutex_unlock(&lock);
    return n;
}

#define COUNT_LIST(head, type)                                                                \
    ({                                                                                        \
        long n_ = 0;                                                                          \
        for (type *x_ = (head); x_; x_ = x_->next)                                            \
            n_++;                                                                             \
        n_;                                                                                   \
    })

/* Live objects: init, reservation, handle, mapping, pool_alloc, ipc_attach. */
API long hsadouble_live(const char *kind)
{
    long n = -1;
    pthread_mutex_lock(&lock);
    if (!kind)
        n = -1;
    else if (strcmp(kind, "init") == 0)
        n = init_count;
    else if (strcmp(kind, "reservation") == 0)
        n = COUNT_LIST(reservations, reservation_t);
    else if (strcmp(kind, "handle") == 0)
        n = COUNT_LIST(vhandles, vhandle_t);
    else if (strcmp(kind, "mapping") == 0)
        n = COUNT_LIST(vmappings, vmapping_t);
    else if (strcmp(kind, "pool_alloc") == 0)
        n = COUNT_LIST(pool_allocs, pool_alloc_t);
    else if (strcmp(kind, "ipc_attach") == 0)
        n = COUNT_LIST(attachments, attachment_t);
    pthread_mutex_unlock(&lock);
    return n;
}

API const char *hsadouble_mode(void)
{
#ifdef HSADOUBLE_FORWARD_CUDA
    return "forward";
#else
    return "host";
#endif
}

/* The AMD interface version this build emulates, as major * 100 + minor. */
API int hsadouble_interface(void)
{
#if defined(HSADOUBLE_NO_VMEM)
    return 100;
#elif defined(HSADOUBLE_NO_ALIGN)
    return 104;
#else
    return 106;
#endif
}

/* Emulate a runtime whose hsa_amd_pointer_info_t is `size` bytes (0: the whole struct): it
 * answers that size and fills no member past it (an impossible answer below 32 bytes). */
API void hsadouble_pointer_info_size(uint32_t size)
{
    pthread_mutex_lock(&lock);
    pointer_info_size = size;
    pthread_mutex_unlock(&lock);
}

API int hsadouble_set_gpus(int count, size_t memory)
{
    if (count < 0 || count > MAX_GPUS)
        return -1;
    pthread_mutex_lock(&lock);
    read_env();
    gpus = count;
    if (memory)
        gpu_memory = memory;
    pthread_mutex_unlock(&lock);
    return 0;
}

static void free_all(void);

/* Forget injections and counters and free every object; hsa_init's count goes to 0. */
API void hsadouble_reset(void)
{
    pthread_mutex_lock(&lock);
    free_all();
    memset(calls, 0, sizeof calls);
    nfaults = 0;
    init_count = 0;
    gpus = 1;
    gpu_memory = (size_t)1 << 30;
    pointer_info_size = 0;
    env_read = 0;
    read_env();
    pthread_mutex_unlock(&lock);
}

/* Count the call and apply an injected fault (returns the status, or NO_FAULT). */
#define NO_FAULT INT_MIN
static int enter(int fn)
{
    read_env();
    calls[fn]++;
    for (int i = 0; i < nfaults; i++) {
        fault_t *f = &faults[i];
        if (f->fn != fn || f->times == 0)
            continue;
        if (f->skip > 0) {
            f->skip--;
            continue;
        }
        if (f->times > 0)
            f->times--;
        return f->status;
    }
    return NO_FAULT;
}

#define BEGIN(fn)                                                                             \
    pthread_mutex_lock(&lock);                                                                \
    int injected_ = enter(FN_##fn);                                                           \
    if (injected_ != NO_FAULT) {                                                                     \
        pthread_mutex_unlock(&lock);                                                          \
        return injected_;                                                                     \
    }
#define BEGIN_INIT(fn)                                                                        \
    BEGIN(fn)                                                                                 \
    if (init_count <= 0) {                                                                    \
        pthread_mutex_unlock(&lock);                                                          \
        return HSA_STATUS_ERROR_NOT_INITIALIZED;                                              \
    }                                                                                         \
    forward_current();
#define RETURN(status)                                                                        \
    do {                                                                                      \
        pthread_mutex_unlock(&lock);                                                          \
        return (status);                                                                      \
    } while (0)

/* ---------------------------------------------------------------------------------------- */
/* the memory operations: host memory, or the CUDA driver                                    */
/* ---------------------------------------------------------------------------------------- */
#ifdef HSADOUBLE_FORWARD_CUDA
static CUcontext cu_ctx;

static void forward_current(void)
{
    if (cu_ctx)
        cuCtxSetCurrent(cu_ctx);
}

static int forward_init(void)
{
    if (cuInit(0) != CUDA_SUCCESS)
        return -1;
    int n = 0;
    if (cuDeviceGetCount(&n) != CUDA_SUCCESS || n <= 0)
        return -1;
    gpus = n > MAX_GPUS ? MAX_GPUS : n;
    CUdevice dev;
    if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&cu_ctx, dev) != CUDA_SUCCESS)
        return -1;
    cuCtxSetCurrent(cu_ctx);
    return 0;
}

static void forward_fini(void)
{
    if (cu_ctx) {
        CUdevice dev;
        if (cuDeviceGet(&dev, 0) == CUDA_SUCCESS)
            cuDevicePrimaryCtxRelease(dev);
        cu_ctx = NULL;
    }
}

static CUmemAllocationProp cu_prop(int device)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    return prop;
}

static size_t forward_granule(int device, int recommended)
{
    CUmemAllocationProp prop = cu_prop(device);
    size_t g = 0;
    if (cuMemGetAllocationGranularity(&g, &prop,
                                      recommended ? CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
                                                  : CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
        return 2u << 20;
    return g;
}

static size_t forward_memory(int device)
{
    size_t total = 0;
    CUdevice dev;
    if (cuDeviceGet(&dev, device) != CUDA_SUCCESS || cuDeviceTotalMem(&total, dev) != CUDA_SUCCESS)
        return 0;
    return total;
}

/* cuMemGetInfo answers for the current context: device `device`'s primary context, pushed
   for the question (the double keeps device 0's current otherwise). */
static int forward_available(int device, uint64_t *avail)
{
    CUdevice dev;
    CUcontext ctx;
    size_t free_b = 0, total = 0;
    if (cuDeviceGet(&dev, device) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
        return -1;
    int rc = -1;
    if (cuCtxPushCurrent(ctx) == CUDA_SUCCESS) {
        rc = cuMemGetInfo(&free_b, &total) == CUDA_SUCCESS ? 0 : -1;
        cuCtxPopCurrent(&ctx);
    }
    cuDevicePrimaryCtxRelease(dev);
    *avail = (uint64_t)free_b;
    return rc;
}

static int backing_reserve(size_t size, size_t align, uintptr_t hint, reservation_t *r)
{
    CUdeviceptr p = 0;
    if (cuMemAddressReserve(&p, size, align, (CUdeviceptr)hint, 0) != CUDA_SUCCESS)
        return -1;
    r->va = (uintptr_t)p;
    r->map_base = r->va;
    r->mapped_len = size;
    return 0;
}

static void backing_unreserve(reservation_t *r) { cuMemAddressFree((CUdeviceptr)r->va, r->size); }

static int backing_create(const pool_t *p, vhandle_t *h)
{
    if (p->agent == 0)
        return -2; /* CUDA VMM here makes device memory only */
    CUmemAllocationProp prop = cu_prop(p->agent - 1);
    return cuMemCreate(&h->cu, h->size, &prop, 0) == CUDA_SUCCESS ? 0 : -1;
}

static void backing_destroy(vhandle_t *h) { cuMemRelease(h->cu); }

static int backing_map(uintptr_t va, vhandle_t *h)
{
    return cuMemMap((CUdeviceptr)va, h->size, 0, h->cu, 0) == CUDA_SUCCESS ? 0 : -1;
}

static void backing_unmap(uintptr_t va, size_t size) { cuMemUnmap((CUdeviceptr)va, size); }

static int backing_protect(vmapping_t *m)
{
    CUmemAccessDesc desc[MAX_GPUS];
    int n = 0;
    for (int i = 0; i < gpus; i++) {
        int perm = m->perms[1 + i];
        if (perm == PERM_WO)
            return -2;
        if (perm == PERM_NONE)
            continue;
        desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        desc[n].location.id = i;
        desc[n].flags = perm == PERM_RW ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
        n++;
    }
    if (n == 0)
        return 0;
    return cuMemSetAccess((CUdeviceptr)m->va, m->size, desc, (size_t)n) == CUDA_SUCCESS ? 0 : -1;
}

static int backing_gpu_access(vmapping_t *m, int gpu, int *perm)
{
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = gpu};
    unsigned long long flags = 0;
    if (cuMemGetAccess(&flags, &loc, (CUdeviceptr)m->va) != CUDA_SUCCESS)
        return -1;
    *perm = flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PERM_RW
            : flags == CU_MEM_ACCESS_FLAGS_PROT_READ    ? PERM_RO
                                                        : PERM_NONE;
    return 0;
}

static int backing_export(vhandle_t *h)
{
    int fd = -1;
    if (cuMemExportToShareableHandle(&fd, h->cu, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS)
        return -1;
    return fd;
}

static int backing_import(int fd, vhandle_t *h)
{
    if (cuMemImportFromShareableHandle(&h->cu, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) !=
        CUDA_SUCCESS)
        return -2; /* not an exported allocation: INVALID_ALLOCATION, as ROCr */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    if (cuMemGetAllocationPropertiesFromHandle(&prop, h->cu) == CUDA_SUCCESS)
        h->pool = GPU_POOL(prop.location.id);
    h->type = 1;
    h->size = 0; /* CUDA does not say: map then takes any granule multiple */
    return 0;
}

static int backing_pool_alloc(const pool_t *p, pool_alloc_t *a)
{
    if (p->agent == 0) {
        void *ptr = NULL;
        if (cuMemHostAlloc(&ptr, a->size, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) != CUDA_SUCCESS)
            return -1;
        a->ptr = (uintptr_t)ptr;
        a->host = 1;
        return 0;
    }
    CUdeviceptr d = 0;
    if (cuMemAlloc(&d, a->size) != CUDA_SUCCESS)
        return -1;
    a->ptr = (uintptr_t)d;
    return 0;
}

static void backing_pool_free(pool_alloc_t *a)
{
    if (a->host)
        cuMemFreeHost((void *)a->ptr);
    else
        cuMemFree((CUdeviceptr)a->ptr);
}

/* The dma-buf of the whole allocation (whole pages, as the driver takes): fd, or -1. */
static int backing_dmabuf(const pool_alloc_t *a, uintptr_t *base)
{
    size_t pg = page_size();
    uintptr_t start = a->ptr / pg * pg;
    size_t len = (a->ptr + a->size - start + pg - 1) / pg * pg;
    int fd = -1;
    if (a->host || cuMemGetHandleForAddressRange(&fd, (CUdeviceptr)start, len, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                                                 0) != CUDA_SUCCESS)
        return -1;
    *base = start;
    return fd;
}

static int backing_copy(void *dst, const void *src, size_t size)
{
    return cuMemcpy((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, size) == CUDA_SUCCESS ? 0 : -1;
}

#else /* host mode */

static void forward_current(void) {}
static int forward_init(void) { return 0; }
static void forward_fini(void) {}

static int backing_reserve(size_t size, size_t align, uintptr_t hint, reservation_t *r)
{
    size_t len = size + (align > page_size() ? align : 0);
    void *p = mmap((void *)hint, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    uintptr_t base = (uintptr_t)p, va = base;
    if (align > page_size())
        va = (base + align - 1) & ~(uintptr_t)(align - 1);
    r->va = va;
    r->map_base = base;
    r->mapped_len = len;
    return 0;
}

static void backing_unreserve(reservation_t *r) { munmap((void *)r->map_base, r->mapped_len); }

static int backing_create(const pool_t *p, vhandle_t *h)
{
    char name[64];
    snprintf(name, sizeof name, "hsadouble-vmem:%llx:%d", (unsigned long long)p->handle, h->type);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)h->size) != 0) {
        close(fd);
        return -1;
    }
    h->fd = fd;
    return 0;
}

static void backing_destroy(vhandle_t *h)
{
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
}

static int backing_map(uintptr_t va, vhandle_t *h)
{
    void *p = mmap((void *)va, h->size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, 0);
    return p == MAP_FAILED ? -1 : 0;
}

static void backing_unmap(uintptr_t va, size_t size)
{
    /* Back to a reserved, inaccessible range. */
    mmap((void *)va, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

/* Every agent sees host memory: the page protection is the widest permission granted. */
static int backing_protect(vmapping_t *m)
{
    int prot = PROT_NONE;
    for (int i = 0; i < 1 + gpus; i++) {
        if (m->perms[i] == PERM_RO)
            prot |= PROT_READ;
        else if (m->perms[i] == PERM_WO)
            prot |= PROT_WRITE;
        else if (m->perms[i] == PERM_RW)
            prot |= PROT_READ | PROT_WRITE;
    }
    return mprotect((void *)m->va, m->size, prot) == 0 ? 0 : -1;
}

static int backing_gpu_access(vmapping_t *m, int gpu, int *perm)
{
    *perm = m->perms[1 + gpu];
    return 0;
}

static int backing_export(vhandle_t *h) { return fcntl(h->fd, F_DUPFD_CLOEXEC, 0); }

static int backing_import(int fd, vhandle_t *h)
{
    char path[64], link[256];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0)
        return -2;
    link[n] = 0;
    unsigned long long pool = 0;
    int type = 0;
    if (sscanf(link, "/memfd:hsadouble-vmem:%llx:%d", &pool, &type) != 2)
        return -2;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0)
        return -2;
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0)
        return -1;
    h->fd = own;
    h->pool = pool;
    h->type = type;
    h->size = (size_t)st.st_size;
    return 0;
}

static int backing_pool_alloc(const pool_t *p, pool_alloc_t *a)
{
    (void)p;
    int fd = memfd_create("hsadouble-pool", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t pg = page_size();
    a->mapped = (a->size + pg - 1) / pg * pg;
    if (ftruncate(fd, (off_t)a->mapped) != 0) {
        close(fd);
        return -1;
    }
    void *ptr = mmap(NULL, a->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ptr == MAP_FAILED) {
        close(fd);
        return -1;
    }
    a->fd = fd;
    a->ptr = (uintptr_t)ptr;
    return 0;
}

static void backing_pool_free(pool_alloc_t *a)
{
    munmap((void *)a->ptr, a->mapped);
    close(a->fd);
}

/* The dma-buf stand-in: a new fd of the allocation's memfd (an fd of the same file). */
static int backing_dmabuf(const pool_alloc_t *a, uintptr_t *base)
{
    *base = a->ptr;
    return fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
}

static int backing_copy(void *dst, const void *src, size_t size)
{
    memmove(dst, src, size);
    return 0;
}
#endif

/* ---------------------------------------------------------------------------------------- */
/* core API                                                                                  */
/* ---------------------------------------------------------------------------------------- */
API hsa_status_t hsa_init(void)
{
    BEGIN(hsa_init)
    const char *nokfd = getenv("HSADOUBLE_NO_KFD");
    if (nokfd && strcmp(nokfd, "1") == 0)
        RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    if (init_count == 0 && forward_init() != 0)
        RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    init_count++;
    RETURN(HSA_STATUS_SUCCESS);
}

API hsa_status_t hsa_shut_down(void)
{
    BEGIN(hsa_shut_down)
    if (init_count <= 0)
        RETURN(HSA_STATUS_ERROR_NOT_INITIALIZED);
    if (--init_count == 0)
        forward_fini();
    RETURN(HSA_STATUS_SUCCESS);
}

static const char *status_text(int status)
{
    switch (status) {
    case HSA_STATUS_SUCCESS: return "HSA_STATUS_SUCCESS: The function has been executed successfully.";
    case HSA_STATUS_INFO_BREAK: return "HSA_STATUS_INFO_BREAK: A traversal over a list of elements has been interrupted.";
    case HSA_STATUS_ERROR: return "HSA_STATUS_ERROR: A generic error has occurred.";
    case HSA_STATUS_ERROR_INVALID_ARGUMENT: return "HSA_STATUS_ERROR_INVALID_ARGUMENT: One of the actual arguments does not meet a precondition stated in the documentation of the corresponding formal argument.";
    case HSA_STATUS_ERROR_INVALID_ALLOCATION: return "HSA_STATUS_ERROR_INVALID_ALLOCATION: The requested allocation is not valid.";
    case HSA_STATUS_ERROR_INVALID_AGENT: return "HSA_STATUS_ERROR_INVALID_AGENT: The agent is invalid.";
    case HSA_STATUS_ERROR_OUT_OF_RESOURCES: return "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary resources.";
    case HSA_STATUS_ERROR_RESOURCE_FREE: return "HSA_STATUS_ERROR_RESOURCE_FREE: The resource is still in use.";
    case HSA_STATUS_ERROR_NOT_INITIALIZED: return "HSA_STATUS_ERROR_NOT_INITIALIZED: An API other than hsa_init has been invoked while the reference count of the HSA runtime is zero.";
    default: return NULL;
    }
}

API hsa_status_t hsa_status_string(hsa_status_t status, const char **text)
{
    BEGIN(hsa_status_string)
    if (!text)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    const char *s = status_text(status);
    if (!s)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    *text = s;
    RETURN(HSA_STATUS_SUCCESS);
}

API hsa_status_t hsa_system_get_info(int attribute, void *value)
{
    BEGIN_INIT(hsa_system_get_info)
    if (!value)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    if (attribute == SYS_VERSION_MAJOR || attribute == SYS_VERSION_MINOR) {
        *(uint16_t *)value = 1;
        RETURN(HSA_STATUS_SUCCESS);
    }
    RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
}

typedef hsa_status_t (*iterate_cb)(uint64_t, void *);

API hsa_status_t hsa_iterate_agents(iterate_cb callback, void *data)
{
    BEGIN_INIT(hsa_iterate_agents)
    if (!callback)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    uint64_t list[MAX_AGENTS];
    int n = 0;
    list[n++] = CPU_AGENT;
    for (int i = 0; i < gpus; i++)
        list[n++] = GPU_AGENT(i);
    pthread_mutex_unlock(&lock); /* callbacks may call back into the runtime */
    for (int i = 0; i < n; i++) {
        hsa_status_t rc = callback(list[i], data);
        if (rc != HSA_STATUS_SUCCESS)
            return rc;
    }
    return HSA_STATUS_SUCCESS;
}

#ifndef HSADOUBLE_FORWARD_CUDA
/* GPU i's VRAM not held by its pool's allocations or its virtual-memory handles (lock held). */
static size_t gpu_available(int i)
{
    size_t used = 0;
    for (pool_alloc_t *a = pool_allocs; a; a = a->next)
        if (a->pool == GPU_POOL(i))
            used += a->size;
    for (vhandle_t *h = vhandles; h; h = h->next)
        if (h->pool == GPU_POOL(i))
            used += h->size;
    return used >= gpu_memory ? 0 : gpu_memory - used;
}
#endif

static void put_string(void *value, const char *s, size_t cap)
{
    memset(value, 0, cap);
    strncpy((char *)value, s, cap - 1);
}

API hsa_status_t hsa_agent_get_info(uint64_t agent, int attribute, void *value)
{
    BEGIN_INIT(hsa_agent_get_info)
    int idx = agent_index(agent);
    if (idx < 0)
        RETURN(HSA_STATUS_ERROR_INVALID_AGENT);
    if (!value)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    char text[64];
    switch (attribute) {
    case AGENT_NAME:
        put_string(value, idx == 0 ? "hsadouble-cpu" : "gfx90a", 64);
        break;
    case AGENT_VENDOR:
        put_string(value, idx == 0 ? "CPU" : "AMD", 64);
        break;
    case AGENT_PRODUCT:
        snprintf(text, sizeof text, idx == 0 ? "HSA double CPU" : "HSA double GPU %d", idx - 1);
        put_string(value, text, 64);
        break;
    case AGENT_UUID:
        snprintf(text, sizeof text, idx == 0 ? "CPU-XX" : "GPU-%016d", idx - 1);
        put_string(value, text, 21);
        break;
    case AGENT_NODE:
        *(uint32_t *)value = (uint32_t)idx;
        break;
    case AGENT_DEVICE:
        *(int *)value = idx == 0 ? DEVICE_CPU : DEVICE_GPU;
        break;
    case AGENT_CHIP_ID:
        *(uint32_t *)value = idx == 0 ? 0 : 0x740c;
        break;
    case AGENT_BDFID:
        *(uint32_t *)value = idx == 0 ? 0 : (uint32_t)(0x0300 + (idx << 8));
        break;
    case AGENT_DOMAIN:
        *(uint32_t *)value = 0;
        break;
    case AGENT_MEMORY_AVAIL:
#ifdef HSADOUBLE_NO_VMEM
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT); /* ROCr 5.2 has no such attribute */
#endif
        if (idx == 0)
            RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT); /* a GPU agent's attribute */
#ifdef HSADOUBLE_FORWARD_CUDA
        if (forward_available(idx - 1, (uint64_t *)value) != 0)
            RETURN(HSA_STATUS_ERROR);
#else
        *(uint64_t *)value = (uint64_t)gpu_available(idx - 1);
#endif
        break;
    default:
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    RETURN(HSA_STATUS_SUCCESS);
}

API hsa_status_t hsa_amd_agent_iterate_memory_pools(uint64_t agent, iterate_cb callback, void *data)
{
    BEGIN_INIT(hsa_amd_agent_iterate_memory_pools)
    int idx = agent_index(agent);
    if (idx < 0)
        RETURN(HSA_STATUS_ERROR_INVALID_AGENT);
    if (!callback)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    uint64_t list[2];
    if (idx == 0) {
        list[0] = SYS_FINE_POOL;
        list[1] = SYS_COARSE_POOL;
    } else {
        list[0] = GPU_POOL(idx - 1);
        list[1] = GPU_GROUP_POOL(idx - 1);
    }
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < 2; i++) {
        hsa_status_t rc = callback(list[i], data);
        if (rc != HSA_STATUS_SUCCESS)
            return rc;
    }
    return HSA_STATUS_SUCCESS;
}

API hsa_status_t hsa_amd_memory_pool_get_info(uint64_t pool, int attribute, void *value)
{
    BEGIN_INIT(hsa_amd_memory_pool_get_info)
    pool_t p;
    if (pool_of(pool, &p) != 0)
        RETURN(HSA_STATUS_ERROR_INVALID_MEMORY_POOL);
    if (!value)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    switch (attribute) {
    case POOL_SEGMENT: *(int *)value = p.segment; break;
    case POOL_FLAGS:
        if (p.segment != SEG_GLOBAL)
            RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
        *(uint32_t *)value = (uint32_t)p.flags;
        break;
    case POOL_SIZE: *(size_t *)value = p.size; break;
    case POOL_ALLOWED: *(bool *)value = p.allowed; break;
    case POOL_GRANULE: *(size_t *)value = p.granule; break;
    case POOL_ALIGNMENT: *(size_t *)value = p.alignment; break;
    case POOL_BY_ALL: *(bool *)value = p.by_all; break;
    case POOL_MAX: *(size_t *)value = p.size; break;
#ifndef HSADOUBLE_NO_VMEM
    case POOL_LOCATION: *(int *)value = p.location; break;
    case POOL_REC_GRANULE: *(size_t *)value = p.rec_granule; break;
#endif
    default: RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    }
    RETURN(HSA_STATUS_SUCCESS);
}

API hsa_status_t hsa_amd_agent_memory_pool_get_info(uint64_t agent, uint64_t pool, int attribute, void *value)
{
    BEGIN_INIT(hsa_amd_agent_memory_pool_get_info)
    pool_t p;
    int idx = agent_index(agent);
    if (idx < 0)
        RETURN(HSA_STATUS_ERROR_INVALID_AGENT);
    if (pool_of(pool, &p) != 0)
        RETURN(HSA_STATUS_ERROR_INVALID_MEMORY_POOL);
    if (!value || attribute != 0)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    /* ALLOWED_BY_DEFAULT 1 for the owner and fine-grained system memory, else DISALLOWED 2. */
    *(int *)value = (idx == p.agent || p.by_all) ? 1 : (p.segment == SEG_GLOBAL ? 2 : 0);
    RETURN(HSA_STATUS_SUCCESS);
}

API hsa_status_t hsa_amd_memory_pool_allocate(uint64_t pool, size_t size, uint32_t flags, void **ptr)
{
    BEGIN_INIT(hsa_amd_memory_pool_allocate)
    pool_t p;
    if (pool_of(pool, &p) != 0)
        RETURN(HSA_STATUS_ERROR_INVALID_MEMORY_POOL);
    if (!ptr || size == 0 || flags != 0)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    if (!p.allowed || size > p.size)
        RETURN(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    pool_alloc_t *a = calloc(1, sizeof *a);
    if (!a)
        RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    a->size = size;
    a->pool = pool;
    a->fd = -1;
    if (backing_pool_alloc(&p, a) != 0) {
        free(a);
        RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    a->next = pool_allocs;
    pool_allocs = a;
    *ptr = (void *)a->ptr;
    RETURN(HSA_STATUS_SUCCESS);
}

static pool_alloc_t *find_pool_alloc(uintptr_t ptr, pool_alloc_t ***link)
{
    for (pool_alloc_t **l = &pool_allocs; *l; l = &(*l)->next)
        if ((*l)->ptr == ptr) {
            if (link)
                *link = l;
            return *l;
        }
    return NULL;
}

API hsa_status_t hsa_amd_memory_pool_free(void *ptr)
{
    BEGIN_INIT(hsa_amd_memory_pool_free)
    pool_alloc_t **link = NULL;
    pool_alloc_t *a = find_pool_alloc((uintptr_t)ptr, &link);
    if (!a)
        RETURN(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    *link = a->next;
    backing_pool_free(a);
    free(a);
    RETURN(HSA_STATUS_SUCCESS);
}

API hsa_status_t hsa_amd_agents_allow_access(uint32_t n, const uint64_t *agents, const uint32_t *flags,
                                             const void *ptr)
{
    BEGIN_INIT(hsa_amd_agents_allow_access)
    if (n == 0 || !agents || flags)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    for (uint32_t i = 0; i < n; i++)
        if (agent_index(agents[i]) < 0)
            RETURN(HSA_STATUS_ERROR_INVALID_AGENT);
    if (!find_pool_alloc((uintptr_t)ptr, NULL))
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    RETURN(HSA_STATUS_SUCCESS);
}

API hsa_status_t hsa_memory_copy(void *dst, const void *src, size_t size)
{
    BEGIN_INIT(hsa_memory_copy)
    if (!dst || !src)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    if (size && backing_copy(dst, src, size) != 0)
        RETURN(HSA_STATUS_ERROR);
    RETURN(HSA_STATUS_SUCCESS);
}

/* IPC: {magic, pid, memfd number, size lo, size hi, serial, 0, 0}. Host mode only. */
#define IPC_MAGIC 0x48534144u /* "HSAD" */

API hsa_status_t hsa_amd_ipc_memory_create(void *ptr, size_t len, hsa_amd_ipc_memory_t *handle)
{
    BEGIN_INIT(hsa_amd_ipc_memory_create)
    if (!handle)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    pool_alloc_t *a = find_pool_alloc((uintptr_t)ptr, NULL);
    if (!a || a->size != len)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    if (a->fd < 0)
        RETURN(HSA_STATUS_ERROR); /* forward mode: no CUDA equivalent of a 32-byte handle */
    memset(handle, 0, sizeof *handle);
    handle->handle[0] = IPC_MAGIC;
    handle->handle[1] = (uint32_t)getpid();
    handle->handle[2] = (uint32_t)a->fd;
    handle->handle[3] = (uint32_t)(len & 0xffffffffu);
    handle->handle[4] = (uint32_t)((uint64_t)len >> 32);
    handle->handle[5] = ++ipc_serial;
    RETURN(HSA_STATUS_SUCCESS);
}

API hsa_status_t hsa_amd_ipc_memory_attach(const hsa_amd_ipc_memory_t *handle, size_t len, uint32_t n,
                                           const uint64_t *agents, void **mapped)
{
    BEGIN_INIT(hsa_amd_ipc_memory_attach)
    if (!handle || !mapped || handle->handle[0] != IPC_MAGIC)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    for (uint32_t i = 0; i < n; i++)
        if (!agents || agent_index(agents[i]) < 0)
            RETURN(HSA_STATUS_ERROR_INVALID_AGENT);
    size_t size = (size_t)handle->handle[3] | ((size_t)handle->handle[4] << 32);
    /* ROCr's Runtime::IPCAttach maps the whole shared allocation (hsaKmtRegisterSharedHandle's
     * importSize) and never compares len with it (ROCR-Runtime src/core/runtime/runtime.cpp;
     * docs/native-abi.md): a pooled block's importer asks for its offset + size, less than
     * the slab, and a tampered handle for more than was exported; both are mapped here too.
     * The importer learns the exported size from hsa_amd_pointer_info (sizeInBytes). */
    (void)len;
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/fd/%u", handle->handle[1], handle->handle[2]);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    size_t pg = page_size(), mlen = (size + pg - 1) / pg * pg;
    void *p = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    attachment_t *at = calloc(1, sizeof *at);
    if (!at) {
        munmap(p, mlen);
        RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    at->ptr = (uintptr_t)p;
    at->mapped = mlen;
    at->size = size;
    at->agent = n ? agents[0] : GPU_AGENT(0);
    at->next = attachments;
    attachments = at;
    *mapped = p;
    RETURN(HSA_STATUS_SUCCESS);
}

API hsa_status_t hsa_amd_ipc_memory_detach(void *mapped)
{
    BEGIN_INIT(hsa_amd_ipc_memory_detach)
    for (attachment_t **l = &attachments; *l; l = &(*l)->next) {
        attachment_t *at = *l;
        if (at->ptr == (uintptr_t)mapped) {
            *l = at->next;
            munmap((void *)at->ptr, at->mapped);
            free(at);
            RETURN(HSA_STATUS_SUCCESS);
        }
    }
    RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
}

/* dma-buf export: ptr and ptr + size inside one pool allocation; offset is ptr's in the fd. */
static pool_alloc_t *pool_alloc_containing(uintptr_t ptr)
{
    for (pool_alloc_t *a = pool_allocs; a; a = a->next)
        if (a->ptr <= ptr && ptr < a->ptr + a->size)
            return a;
    return NULL;
}

static uint64_t pool_agent(uint64_t pool)
{
    pool_t p;
    if (pool_of(pool, &p) != 0 || p.agent == 0)
        return CPU_AGENT;
    return GPU_AGENT(p.agent - 1);
}

/* ROCr's Runtime::PtrInfo: pool memory is HSA (its allocation), attached IPC memory is IPC
 * (the whole exported allocation: the thunk's SizeInBytes); any other address UNKNOWN with
 * no range, and success. No list of accessible agents (aml-hsa asks none). */
API hsa_status_t hsa_amd_pointer_info(const void *ptr, hsa_amd_pointer_info_t *info, void *(*alloc)(size_t),
                                      uint32_t *num_agents_accessible, uint64_t **accessible)
{
    BEGIN_INIT(hsa_amd_pointer_info)
    if (!ptr || !info || info->size == 0)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    if (alloc && num_agents_accessible && accessible)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT); /* the double does not make the list */
    hsa_amd_pointer_info_t out;
    memset(&out, 0, sizeof out);
    out.type = POINTER_UNKNOWN;
    uintptr_t p = (uintptr_t)ptr;
    pool_alloc_t *a = pool_alloc_containing(p);
    if (a) {
        out.type = POINTER_HSA;
        out.agentBaseAddress = out.hostBaseAddress = (void *)a->ptr;
        out.sizeInBytes = a->size;
        out.agentOwner = pool_agent(a->pool);
    }
    for (attachment_t *at = attachments; !a && at; at = at->next)
        if (at->ptr <= p && p < at->ptr + at->size) {
            out.type = POINTER_IPC;
            out.agentBaseAddress = out.hostBaseAddress = (void *)at->ptr;
            out.sizeInBytes = at->size;
            out.agentOwner = at->agent;
            break;
        }
    uint32_t size = info->size < sizeof out ? info->size : (uint32_t)sizeof out;
    if (pointer_info_size && pointer_info_size < size)
        size = pointer_info_size;
    out.size = size;
    memcpy(info, &out, size < sizeof out.size ? sizeof out.size : size);
    RETURN(HSA_STATUS_SUCCESS);
}

DMABUF_API hsa_status_t hsa_amd_portable_export_dmabuf(const void *ptr, size_t size, int *dmabuf, uint64_t *offset)
{
    BEGIN_INIT(hsa_amd_portable_export_dmabuf)
    if (!ptr || !dmabuf || !offset || size == 0)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    pool_alloc_t *a = pool_alloc_containing((uintptr_t)ptr);
    if (!a || (uintptr_t)ptr + size > a->ptr + a->size)
        RETURN(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    uintptr_t base = 0;
    int fd = backing_dmabuf(a, &base);
    if (fd < 0)
        RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    *dmabuf = fd;
    *offset = (uint64_t)((uintptr_t)ptr - base);
    RETURN(HSA_STATUS_SUCCESS);
}

DMABUF_API hsa_status_t hsa_amd_portable_close_dmabuf(int dmabuf)
{
    BEGIN_INIT(hsa_amd_portable_close_dmabuf)
    if (dmabuf < 0 || close(dmabuf) != 0)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    RETURN(HSA_STATUS_SUCCESS);
}

/* ---------------------------------------------------------------------------------------- */
/* hsa_amd_vmem_*                                                                            */
/* ---------------------------------------------------------------------------------------- */
static reservation_t *find_reservation(uintptr_t va, reservation_t ***link)
{
    for (reservation_t **l = &reservations; *l; l = &(*l)->next)
        if ((*l)->va == va) {
            if (link)
                *link = l;
            return *l;
        }
    return NULL;
}

static vhandle_t *find_handle(uint64_t id)
{
    for (vhandle_t *h = vhandles; h; h = h->next)
        if (h->id == id)
            return h;
    return NULL;
}

static void drop_handle_if_unused(vhandle_t *h)
{
    if (h->refs > 0 || h->maps > 0)
        return;
    for (vhandle_t **l = &vhandles; *l; l = &(*l)->next)
        if (*l == h) {
            *l = h->next;
            break;
        }
    backing_destroy(h);
    free(h);
}

static vmapping_t *mapping_containing(uintptr_t va)
{
    for (vmapping_t *m = vmappings; m; m = m->next)
        if (m->va <= va && va < m->va + m->size)
            return m;
    return NULL;
}

static hsa_status_t reserve(void **va, size_t size, uint64_t address, uint64_t align, uint64_t flags)
{
    if (!va || size == 0 || size % page_size() || flags != 0)
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    if (align && ((align & (align - 1)) || align < page_size()))
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    reservation_t *r = calloc(1, sizeof *r);
    if (!r)
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    r->size = size;
    if (backing_reserve(size, align, (uintptr_t)address, r) != 0) {
        free(r);
        return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
    }
    r->next = reservations;
    reservations = r;
    *va = (void *)r->va;
    return HSA_STATUS_SUCCESS;
}

VMEM_API hsa_status_t hsa_amd_vmem_address_reserve(void **va, size_t size, uint64_t address, uint64_t flags)
{
    BEGIN_INIT(hsa_amd_vmem_address_reserve)
    RETURN(reserve(va, size, address, 0, flags));
}

ALIGN_API hsa_status_t hsa_amd_vmem_address_reserve_align(void **va, size_t size, uint64_t address,
                                                          uint64_t alignment, uint64_t flags)
{
    BEGIN_INIT(hsa_amd_vmem_address_reserve_align)
    RETURN(reserve(va, size, address, alignment, flags));
}

VMEM_API hsa_status_t hsa_amd_vmem_address_free(void *va, size_t size)
{
    BEGIN_INIT(hsa_amd_vmem_address_free)
    reservation_t **link = NULL;
    reservation_t *r = find_reservation((uintptr_t)va, &link);
    if (!r)
        RETURN(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    if (r->size != size)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    for (vmapping_t *m = vmappings; m; m = m->next)
        if (m->va < r->va + r->size && r->va < m->va + m->size)
            RETURN(HSA_STATUS_ERROR_RESOURCE_FREE);
    *link = r->next;
    backing_unreserve(r);
    free(r);
    RETURN(HSA_STATUS_SUCCESS);
}

VMEM_API hsa_status_t hsa_amd_vmem_handle_create(uint64_t pool, size_t size, int type, uint64_t flags,
                                                 uint64_t *memory_handle)
{
    BEGIN_INIT(hsa_amd_vmem_handle_create)
    pool_t p;
    if (!memory_handle || pool_of(pool, &p) != 0 || flags != 0 || (type != 0 && type != 1))
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    if (!p.allowed || p.segment != SEG_GLOBAL)
        RETURN(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    if (size == 0 || size % p.granule)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    if (size > p.size)
        RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    vhandle_t *h = calloc(1, sizeof *h);
    if (!h)
        RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    h->pool = pool;
    h->size = size;
    h->type = type;
    h->refs = 1;
    h->fd = -1;
    int rc = backing_create(&p, h);
    if (rc != 0) {
        free(h);
        RETURN(rc == -2 ? HSA_STATUS_ERROR_INVALID_ALLOCATION : HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    h->id = 0xA11C000000000000ull | next_id++;
    h->next = vhandles;
    vhandles = h;
    *memory_handle = h->id;
    RETURN(HSA_STATUS_SUCCESS);
}

VMEM_API hsa_status_t hsa_amd_vmem_handle_release(uint64_t memory_handle)
{
    BEGIN_INIT(hsa_amd_vmem_handle_release)
    vhandle_t *h = find_handle(memory_handle);
    if (!h || h->refs <= 0)
        RETURN(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    h->refs--;
    drop_handle_if_unused(h);
    RETURN(HSA_STATUS_SUCCESS);
}

VMEM_API hsa_status_t hsa_amd_vmem_map(void *va, size_t size, size_t in_offset, uint64_t memory_handle,
                                       uint64_t flags)
{
    BEGIN_INIT(hsa_amd_vmem_map)
    uintptr_t v = (uintptr_t)va;
    vhandle_t *h = find_handle(memory_handle);
    if (!h || h->refs <= 0 || in_offset != 0 || flags != 0 || size == 0)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    if (h->size ? size != h->size : size % page_size())
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    int inside = 0;
    for (reservation_t *r = reservations; r; r = r->next)
        if (r->va <= v && v + size <= r->va + r->size)
            inside = 1;
    if (!inside)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    for (vmapping_t *m = vmappings; m; m = m->next)
        if (m->va < v + size && v < m->va + m->size)
            RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    vmapping_t *m = calloc(1, sizeof *m);
    if (!m)
        RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    if (h->size == 0)
        h->size = size; /* forward mode import: the first map tells the size */
    if (backing_map(v, h) != 0) {
        free(m);
        RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    m->va = v;
    m->size = size;
    m->handle = h;
    h->maps++;
    m->next = vmappings;
    vmappings = m;
    RETURN(HSA_STATUS_SUCCESS);
}

VMEM_API hsa_status_t hsa_amd_vmem_unmap(void *va, size_t size)
{
    BEGIN_INIT(hsa_amd_vmem_unmap)
    for (vmapping_t **l = &vmappings; *l; l = &(*l)->next) {
        vmapping_t *m = *l;
        if (m->va != (uintptr_t)va)
            continue;
        if (m->size != size)
            RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
        *l = m->next;
        backing_unmap(m->va, m->size);
        m->handle->maps--;
        drop_handle_if_unused(m->handle);
        free(m);
        RETURN(HSA_STATUS_SUCCESS);
    }
    RETURN(HSA_STATUS_ERROR_INVALID_ALLOCATION);
}

VMEM_API hsa_status_t hsa_amd_vmem_set_access(void *va, size_t size, const hsa_amd_memory_access_desc_t *desc,
                                              size_t desc_cnt)
{
    BEGIN_INIT(hsa_amd_vmem_set_access)
    if (!desc || desc_cnt == 0)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    vmapping_t *m = mapping_containing((uintptr_t)va);
    if (!m || m->va != (uintptr_t)va || m->size != size)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    int perms[MAX_AGENTS] = {0};
    for (size_t i = 0; i < desc_cnt; i++) {
        int idx = agent_index(desc[i].agent_handle);
        if (idx < 0)
            RETURN(HSA_STATUS_ERROR_INVALID_AGENT);
        if (desc[i].permissions < PERM_NONE || desc[i].permissions > PERM_RW)
            RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
        perms[idx] = desc[i].permissions;
    }
    int saved[MAX_AGENTS];
    memcpy(saved, m->perms, sizeof saved);
    memcpy(m->perms, perms, sizeof perms); /* replaces what was set before, for every agent */
    int rc = backing_protect(m);
    if (rc != 0) {
        memcpy(m->perms, saved, sizeof saved);
        RETURN(rc == -2 ? HSA_STATUS_ERROR_INVALID_ARGUMENT : HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    RETURN(HSA_STATUS_SUCCESS);
}

VMEM_API hsa_status_t hsa_amd_vmem_get_access(void *va, int *perms, uint64_t agent)
{
    BEGIN_INIT(hsa_amd_vmem_get_access)
    int idx = agent_index(agent);
    if (idx < 0)
        RETURN(HSA_STATUS_ERROR_INVALID_AGENT);
    if (!perms)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    vmapping_t *m = mapping_containing((uintptr_t)va);
    if (!m)
        RETURN(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    if (idx == 0) {
        *perms = m->perms[0];
        RETURN(HSA_STATUS_SUCCESS);
    }
    if (backing_gpu_access(m, idx - 1, perms) != 0)
        RETURN(HSA_STATUS_ERROR);
    RETURN(HSA_STATUS_SUCCESS);
}

VMEM_API hsa_status_t hsa_amd_vmem_export_shareable_handle(int *dmabuf_fd, uint64_t handle, uint64_t flags)
{
    BEGIN_INIT(hsa_amd_vmem_export_shareable_handle)
    if (!dmabuf_fd || flags != 0)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    vhandle_t *h = find_handle(handle);
    if (!h || h->refs <= 0)
        RETURN(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    int fd = backing_export(h);
    if (fd < 0)
        RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    *dmabuf_fd = fd;
    RETURN(HSA_STATUS_SUCCESS);
}

VMEM_API hsa_status_t hsa_amd_vmem_import_shareable_handle(int dmabuf_fd, uint64_t *handle)
{
    BEGIN_INIT(hsa_amd_vmem_import_shareable_handle)
    if (!handle)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    struct stat st;
    if (dmabuf_fd < 0 || fstat(dmabuf_fd, &st) != 0)
        RETURN(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    vhandle_t *h = calloc(1, sizeof *h);
    if (!h)
        RETURN(HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    h->fd = -1;
    int rc = backing_import(dmabuf_fd, h);
    if (rc != 0) {
        free(h);
        RETURN(rc == -2 ? HSA_STATUS_ERROR_INVALID_ALLOCATION : HSA_STATUS_ERROR_OUT_OF_RESOURCES);
    }
    h->refs = 1;
    h->id = 0xA11C000000000000ull | next_id++;
    h->next = vhandles;
    vhandles = h;
    *handle = h->id;
    RETURN(HSA_STATUS_SUCCESS);
}

VMEM_API hsa_status_t hsa_amd_vmem_retain_alloc_handle(uint64_t *memory_handle, void *addr)
{
    BEGIN_INIT(hsa_amd_vmem_retain_alloc_handle)
    if (!memory_handle)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    vmapping_t *m = mapping_containing((uintptr_t)addr);
    if (!m)
        RETURN(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    m->handle->refs++;
    *memory_handle = m->handle->id;
    RETURN(HSA_STATUS_SUCCESS);
}

VMEM_API hsa_status_t hsa_amd_vmem_get_alloc_properties_from_handle(uint64_t memory_handle, uint64_t *pool,
                                                                     int *type)
{
    BEGIN_INIT(hsa_amd_vmem_get_alloc_properties_from_handle)
    if (!pool || !type)
        RETURN(HSA_STATUS_ERROR_INVALID_ARGUMENT);
    vhandle_t *h = find_handle(memory_handle);
    if (!h || h->refs <= 0)
        RETURN(HSA_STATUS_ERROR_INVALID_ALLOCATION);
    *pool = h->pool;
    *type = h->type;
    RETURN(HSA_STATUS_SUCCESS);
}

/* ---------------------------------------------------------------------------------------- */
static void free_all(void)
{
    while (vmappings) {
        vmapping_t *m = vmappings;
        vmappings = m->next;
        backing_unmap(m->va, m->size);
        free(m);
    }
    while (vhandles) {
        vhandle_t *h = vhandles;
        vhandles = h->next;
        backing_destroy(h);
        free(h);
    }
    while (reservations) {
        reservation_t *r = reservations;
        reservations = r->next;
        backing_unreserve(r);
        free(r);
    }
    while (pool_allocs) {
        pool_alloc_t *a = pool_allocs;
        pool_allocs = a->next;
        backing_pool_free(a);
        free(a);
    }
    while (attachments) {
        attachment_t *at = attachments;
        attachments = at->next;
        munmap((void *)at->ptr, at->mapped);
        free(at);
    }
}
