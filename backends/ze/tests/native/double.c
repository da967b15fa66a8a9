/*
 * A Level Zero driver double for aml-ze's tests: a shared library that exports the loader's
 * symbols (the ze* functions aml-ze declares) and is selected with AML_ZE_LIBRARY.
 *
 * Host mode (default): real semantics over host memory.
 *   - device, shared and host allocations are memfd-backed mappings, aligned as asked;
 *     device and shared memory count against a per-device budget (OUT_OF_DEVICE_MEMORY);
 *   - zeMemGetAllocProperties reports the type, an id, the page size and the device, and
 *     exports a device allocation made with ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF as a dma-buf
 *     fd (ze_external_memory_export_fd_t chained to it): a dup of its memfd (forward mode:
 *     the CUDA driver's dma-buf, cuMemGetHandleForAddressRange); an allocation made without
 *     the flag is refused with INVALID_ARGUMENT (the double's choice: the spec names none);
 *   - an IPC handle carries a real file descriptor (a dup of the allocation's memfd) in its
 *     first 4 bytes: another process that duplicates it (pidfd_getfd) maps the same pages;
 *   - virtual memory: a reservation is a PROT_NONE mapping, physical memory a memfd,
 *     zeVirtualMemMap maps it MAP_FIXED with the access attribute's protection;
 *   - arguments are checked as the validation layer checks them (NULL handles and
 *     pointers, unknown flag bits, size 0, alignment), plus what the layer cannot know
 *     (unknown pointers, maps outside a reservation, destroying a context still in use).
 * Forward mode (-DZEDOUBLE_FORWARD_CUDA): device -> cuMemAlloc, host -> cuMemHostAlloc,
 *   shared -> cuMemAllocManaged, IPC -> cuMem VMM allocations exported as POSIX fds,
 *   virtual memory -> cuMemAddressReserve/cuMemCreate/cuMemMap/cuMemSetAccess.
 *
 * Sysman (zes*, the free-memory query): each device has two memory modules, the first in
 *   system memory (the host's RAM: sysconf) and the second on the device (host mode: the
 *   device's memory less what its device and shared allocations and physical memory hold;
 *   forward mode: cuMemGetInfo in the device's primary context). Sysman device handles come
 *   from zesInit + zesDriverGet + zesDeviceGet, listed in the reverse order of zeDeviceGet's
 *   (as a real loader may: only a match by UUID finds the right one), or, when
 *   ZES_ENABLE_SYSMAN=1 was set at zeInit (the legacy way), are the core device handles.
 *   A handle of a way not initialised is ZE_RESULT_ERROR_UNINITIALIZED, as in Intel's driver.
 *
 * Control (zedouble_*): inject any ze_result_t into any function (after `skip` calls, for
 * `times` calls, -1 forever), count calls, read live objects, emulate devices, reset.
 * -DZEDOUBLE_NO_PUT leaves zeMemPutIpcHandle out (as Debian's 1.8.12 loader, spec < 1.6).
 * -DZEDOUBLE_SYSMAN_LEGACY leaves zesInit, zesDriverGet and zesDeviceGet out (as Debian's
 * 1.8.12 loader, spec 1.4: Sysman only through ZES_ENABLE_SYSMAN=1 and core handles);
 * -DZEDOUBLE_NO_SYSMAN leaves every zes* function out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef ZEDOUBLE_FORWARD_CUDA
#include <cuda.h>
#endif

#define API __attribute__((visibility("default")))

#include "double_abi.h"

#define MAX_DEVICES 8
#define PAGE ((size_t)65536)   /* virtual-memory page size below 2 MiB */
#define BIG_PAGE ((size_t)2 << 20)
#define IPC_MAGIC 0x4244455au /* "ZEDB" */

/* -- functions, counters, injections -------------------------------------------------- */
#define FUNCS(X) X(zeInit) X(zeDriverGet) X(zeDriverGetApiVersion) X(zeDeviceGet) \
    X(zeDeviceGetProperties) X(zeDeviceGetMemoryProperties) X(zeContextCreate) X(zeContextDestroy) \
    X(zeMemAllocDevice) X(zeMemAllocHost) X(zeMemAllocShared) X(zeMemFree) X(zeMemGetAllocProperties) X(zeMemGetAddressRange) \
    X(zeMemGetIpcHandle) X(zeMemPutIpcHandle) X(zeMemOpenIpcHandle) X(zeMemCloseIpcHandle) \
    X(zeVirtualMemReserve) X(zeVirtualMemFree) X(zeVirtualMemQueryPageSize) X(zePhysicalMemCreate) \
    X(zePhysicalMemDestroy) X(zeVirtualMemMap) X(zeVirtualMemUnmap) X(zeVirtualMemSetAccessAttribute) \
    X(zeVirtualMemGetAccessAttribute) X(zesInit) X(zesDriverGet) X(zesDeviceGet) X(zesDeviceGetProperties) \
    X(zesDeviceEnumMemoryModules) X(zesMemoryGetProperties) X(zesMemoryGetState)
#define ENUM(n) F_##n,
#define NAME(n) #n,
enum { FUNCS(ENUM) NFUNCS };
static const char *const g_names[] = { FUNCS(NAME) };

struct inject { int fn; ze_result_t err; long skip, times; };
#define MAX_INJECT 32
static struct inject g_inject[MAX_INJECT];
static int g_ninject;
static long g_calls[NFUNCS];

enum { L_CONTEXT, L_DEVICE, L_HOST, L_SHARED, L_IPC_HANDLE, L_IPC_OPEN, L_PHYSICAL, L_RESERVATION,
       L_MAPPING, NLIVE };
static const char *const g_live_names[] = { "context", "device", "host", "shared", "ipc_handle",
                                            "ipc_open", "physical", "reservation", "mapping" };
static long g_live[NLIVE];

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_initialized;
static int g_ndev = 1;
static size_t g_budget = (size_t)1 << 30;
static size_t g_used[MAX_DEVICES];
static uint64_t g_next_id = 1;

struct driver { uint32_t magic; };
struct device { uint32_t magic; int index; };
static struct driver g_driver = { 0x44524956u };
static struct device g_devices[MAX_DEVICES];

/* Sysman: its own driver and devices (zesInit), and two memory modules per device. */
#define MODULES 2 /* module 0: system memory, module 1: the device's own */
struct sysman_module { uint32_t magic; int device, index; };
__attribute__((unused)) static struct driver g_sysman_driver = { 0x53594d44u };
__attribute__((unused)) static struct device g_sysman_devices[MAX_DEVICES];
static struct sysman_module g_modules[MAX_DEVICES][MODULES];
static int g_sysman_init;   /* zesInit succeeded */
static int g_sysman_legacy; /* ZES_ENABLE_SYSMAN=1 at zeInit: core handles are Sysman handles */

#define CTX_MAGIC 0x43545821u
#define PHYS_MAGIC 0x50485953u
struct context { uint32_t magic; struct context *next; };
struct alloc {
    struct alloc *next;
    struct context *ctx;
    int kind;            /* L_DEVICE, L_HOST, L_SHARED, L_IPC_OPEN */
    int device;          /* -1 for host memory */
    void *ptr;           /* what the caller got */
    void *base;          /* what to unmap */
    size_t len, size;
    int fd;              /* the memfd (-1: none) */
    uint32_t export_flags; /* ze_external_memory_type_flags_t asked at allocation */
    uint64_t id;
    int ipc_fds[16];     /* handles given out (dups of fd) */
    int n_ipc;
#ifdef ZEDOUBLE_FORWARD_CUDA
    CUmemGenericAllocationHandle cu_handle;
#endif
};
struct physical {
    uint32_t magic;
    struct physical *next;
    struct context *ctx;
    int device, fd, maps;
    size_t size;
#ifdef ZEDOUBLE_FORWARD_CUDA
    CUmemGenericAllocationHandle cu_handle;
#endif
};
struct reservation { struct reservation *next; struct context *ctx; char *ptr; size_t size; };
struct mapping { struct mapping *next; struct context *ctx; char *ptr; size_t size; struct physical *phys;
                 uint32_t access; };

static struct context *g_contexts;
static struct alloc *g_allocs;
static struct physical *g_physicals;
static struct reservation *g_reservations;
static struct mapping *g_mappings;

#ifdef ZEDOUBLE_FORWARD_CUDA
static CUcontext g_primary; /* device 0's primary context, made current on every call */
#endif

#ifdef ZEDOUBLE_FORWARD_CUDA
/* A pinned device allocation's properties, exportable as a POSIX fd or not. */
static CUmemAllocationProp cu_prop(int device, int exportable)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    if (exportable)
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return prop;
}
#endif

static int fn_index(const char *name)
{
    for (int i = 0; i < NFUNCS; i++)
        if (strcmp(g_names[i], name) == 0)
            return i;
    return -1;
}

/* Count the call; return an injected result, or -1 to run the call. An injected 0 makes the
 * call return ZE_RESULT_SUCCESS without doing anything (out-parameters untouched): the
 * "success with an impossible result" case. Lock held. */
static long long enter(int fn)
{
    g_calls[fn]++;
#ifdef ZEDOUBLE_FORWARD_CUDA
    if (g_primary)
        cuCtxSetCurrent(g_primary);
#endif
    for (int i = 0; i < g_ninject; i++) {
        struct inject *in = &g_inject[i];
        if (in->fn != fn || in->times == 0)
            continue;
        if (in->skip > 0) {
            in->skip--;
            continue;
        }
        if (in->times > 0)
            in->times--;
        return in->err;
    }
    return -1;
}

#define BEGIN(name)                                   \
    pthread_mutex_lock(&g_lock);                      \
    long long rc_ = enter(F_##name);                  \
    if (rc_ >= 0) {                                   \
        pthread_mutex_unlock(&g_lock);                \
        return (ze_result_t)rc_;                      \
    }
#define RETURN(v)                                     \
    do {                                              \
        ze_result_t r_ = (v);                         \
        pthread_mutex_unlock(&g_lock);                \
        return r_;                                    \
    } while (0)

static int ctx_ok(const void *c)
{
    for (struct context *x = g_contexts; x; x = x->next)
        if (x == c)
            return 1;
    return 0;
}

static int dev_index(const void *d)
{
    for (int i = 0; i < g_ndev; i++)
        if (d == &g_devices[i])
            return i;
    return -1;
}

static struct physical *phys_find(const void *h)
{
    for (struct physical *p = g_physicals; p; p = p->next)
        if (p == h)
            return p;
    return NULL;
}

static struct alloc *alloc_find(const struct context *c, const void *p, int containing)
{
    for (struct alloc *a = g_allocs; a; a = a->next) {
        if (a->ctx != c)
            continue;
        if (a->ptr == p)
            return a;
        if (containing && (const char *)p > (char *)a->ptr && (const char *)p < (char *)a->ptr + a->size)
            return a;
    }
    return NULL;
}

/* -- memory -------------------------------------------------------------------------------- */
__attribute__((unused)) static int new_memfd(size_t size)
{
    int fd = memfd_create("zedouble", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A MAP_SHARED mapping of fd aligned to `align` (a power of two): returns the aligned address
 * and sets *base / *len to what must be unmapped. */
__attribute__((unused)) static void *map_aligned(int fd, size_t size, size_t align, void **base, size_t *len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (align <= page) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            return NULL;
        *base = p;
        *len = size;
        return p;
    }
    size_t span = size + align;
    char *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        return NULL;
    char *a = (char *)(((uintptr_t)r + align - 1) & ~(uintptr_t)(align - 1));
    if (mmap(a, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        munmap(r, span);
        return NULL;
    }
    *base = r;
    *len = span;
    return a;
}

static ze_result_t do_alloc(struct context *c, int kind, int device, size_t size, size_t align, void **pptr)
{
    if (size == 0)
        return E_UNSUPPORTED_SIZE;
    if (align & (align - 1))
        return E_UNSUPPORTED_ALIGNMENT;
    if (size > ((size_t)1 << 44))
        return kind == L_HOST ? E_OUT_OF_HOST_MEMORY : E_OUT_OF_DEVICE_MEMORY;
#ifndef ZEDOUBLE_FORWARD_CUDA /* forward mode: CUDA says when the device is full */
    if (kind != L_HOST && g_used[device] + size > g_budget)
        return E_OUT_OF_DEVICE_MEMORY;
#endif
    struct alloc *a = calloc(1, sizeof *a);
    if (!a)
        return E_OUT_OF_HOST_MEMORY;
    a->fd = -1;
#ifdef ZEDOUBLE_FORWARD_CUDA
    CUresult cr;
    CUdeviceptr dp = 0;
    void *hp = NULL;
    if (kind == L_DEVICE) {
        /* a VMM allocation, so that zeMemGetIpcHandle can export it as a POSIX fd */
        CUmemAllocationProp prop = cu_prop(device, 1);
        size_t gran = 0;
        cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (!gran)
            gran = BIG_PAGE;
        size_t n = (size + gran - 1) / gran * gran;
        size_t al = align > gran ? align : 0;
        cr = cuMemCreate(&a->cu_handle, n, &prop, 0);
        if (cr == CUDA_SUCCESS) {
            cr = cuMemAddressReserve(&dp, n, al, 0, 0);
            if (cr == CUDA_SUCCESS) {
                cr = cuMemMap(dp, n, 0, a->cu_handle, 0);
                if (cr == CUDA_SUCCESS) {
                    CUmemAccessDesc acc;
                    memset(&acc, 0, sizeof acc);
                    acc.location = prop.location;
                    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
                    cr = cuMemSetAccess(dp, n, &acc, 1);
                    if (cr != CUDA_SUCCESS)
                        cuMemUnmap(dp, n);
                }
                if (cr != CUDA_SUCCESS)
                    cuMemAddressFree(dp, n);
            }
            if (cr != CUDA_SUCCESS)
                cuMemRelease(a->cu_handle);
        }
        a->len = n;
        a->ptr = (void *)dp;
        a->base = a->ptr;
    } else {
        /* cuMemAllocManaged / cuMemHostAlloc take no alignment: over-allocate and align inside */
        size_t extra = align > 1 ? align - 1 : 0;
        if (kind == L_SHARED) {
            cr = cuMemAllocManaged(&dp, size + extra, CU_MEM_ATTACH_GLOBAL);
            a->base = (void *)dp;
        } else {
            cr = cuMemHostAlloc(&hp, size + extra, CU_MEMHOSTALLOC_PORTABLE);
            a->base = hp;
        }
        if (cr == CUDA_SUCCESS) {
            uintptr_t al = align ? align : 1;
            a->ptr = (void *)(((uintptr_t)a->base + al - 1) & ~(al - 1));
        }
    }
    if (cr != CUDA_SUCCESS) {
        free(a);
        return cr == CUDA_ERROR_OUT_OF_MEMORY ? (kind == L_HOST ? E_OUT_OF_HOST_MEMORY : E_OUT_OF_DEVICE_MEMORY)
                                              : E_UNKNOWN;
    }
#else
    a->fd = new_memfd(size);
    if (a->fd < 0) {
        free(a);
        return E_OUT_OF_HOST_MEMORY;
    }
    a->ptr = map_aligned(a->fd, size, align ? align : 1, &a->base, &a->len);
    if (!a->ptr) {
        close(a->fd);
        free(a);
        return E_OUT_OF_HOST_MEMORY;
    }
#endif
    a->ctx = c;
    a->kind = kind;
    a->device = device;
    a->size = size;
    a->id = g_next_id++;
    a->next = g_allocs;
    g_allocs = a;
    if (kind != L_HOST)
        g_used[device] += size;
    g_live[kind]++;
    *pptr = a->ptr;
    return OK;
}

static void alloc_release(struct alloc *a)
{
    for (int i = 0; i < a->n_ipc; i++) {
        close(a->ipc_fds[i]);
        g_live[L_IPC_HANDLE]--;
    }
    a->n_ipc = 0;
#ifdef ZEDOUBLE_FORWARD_CUDA
    if (a->kind == L_DEVICE) {
        cuMemUnmap((CUdeviceptr)a->ptr, a->len);
        cuMemAddressFree((CUdeviceptr)a->ptr, a->len);
        cuMemRelease(a->cu_handle);
    } else if (a->kind == L_SHARED) {
        cuMemFree((CUdeviceptr)a->base);
    } else if (a->kind == L_HOST) {
        cuMemFreeHost(a->base);
    } else { /* L_IPC_OPEN */
        cuMemUnmap((CUdeviceptr)a->ptr, a->len);
        cuMemAddressFree((CUdeviceptr)a->ptr, a->len);
        cuMemRelease(a->cu_handle);
    }
#else
    munmap(a->base, a->len);
    if (a->fd >= 0)
        close(a->fd);
#endif
    if (a->kind == L_DEVICE || a->kind == L_SHARED)
        g_used[a->device] -= a->size;
    g_live[a->kind]--;
}

static void alloc_unlink(struct alloc *a)
{
    for (struct alloc **pp = &g_allocs; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            return;
        }
}

/* -- loader API ------------------------------------------------------------------------------ */
API ze_result_t zeInit(uint32_t flags)
{
    BEGIN(zeInit);
    if (flags > 0x3)
        RETURN(E_INVALID_ENUMERATION);
    const char *none = getenv("ZEDOUBLE_NO_DRIVER");
    if (none && strcmp(none, "1") == 0)
        RETURN(E_UNINITIALIZED);
    const char *sysman = getenv("ZES_ENABLE_SYSMAN");
    g_sysman_legacy = sysman && strcmp(sysman, "1") == 0;
#ifdef ZEDOUBLE_FORWARD_CUDA
    if (cuInit(0) != CUDA_SUCCESS)
        RETURN(E_UNINITIALIZED);
    int n = 0;
    cuDeviceGetCount(&n);
    g_ndev = n > MAX_DEVICES ? MAX_DEVICES : n;
    /* device 0's primary context, current on every thread that calls the double */
    if (!g_primary && g_ndev > 0) {
        CUdevice d;
        cuDeviceGet(&d, 0);
        cuDevicePrimaryCtxRetain(&g_primary, d);
    }
    if (g_primary)
        cuCtxSetCurrent(g_primary);
    CUdevice d0;
    size_t total = 0;
    if (g_ndev > 0 && cuDeviceGet(&d0, 0) == CUDA_SUCCESS && cuDeviceTotalMem(&total, d0) == CUDA_SUCCESS)
        g_budget = total;
#endif
    g_initialized = 1;
    RETURN(OK);
}

API ze_result_t zeDriverGet(uint32_t *pCount, void **phDrivers)
{
    BEGIN(zeDriverGet);
    if (!g_initialized)
        RETURN(E_UNINITIALIZED);
    if (!pCount)
        RETURN(E_INVALID_NULL_POINTER);
    if (phDrivers && *pCount >= 1)
        phDrivers[0] = &g_driver;
    *pCount = 1;
    RETURN(OK);
}

API ze_result_t zeDriverGetApiVersion(void *hDriver, uint32_t *version)
{
    BEGIN(zeDriverGetApiVersion);
    if (hDriver != &g_driver)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!version)
        RETURN(E_INVALID_NULL_POINTER);
    *version = 0x10004u;
    RETURN(OK);
}

API ze_result_t zeDeviceGet(void *hDriver, uint32_t *pCount, void **phDevices)
{
    BEGIN(zeDeviceGet);
    if (hDriver != &g_driver)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!pCount)
        RETURN(E_INVALID_NULL_POINTER);
    if (phDevices) {
        uint32_t n = *pCount < (uint32_t)g_ndev ? *pCount : (uint32_t)g_ndev;
        for (uint32_t i = 0; i < n; i++) {
            g_devices[i].magic = 0x44455649u;
            g_devices[i].index = (int)i;
            phDevices[i] = &g_devices[i];
        }
        *pCount = n;
    } else {
        *pCount = (uint32_t)g_ndev;
    }
    RETURN(OK);
}

/* Device d's core properties (zeDeviceGetProperties, and Sysman's `core`). Lock held. */
static void fill_properties(int d, dev_props_t *p)
{
    uint32_t stype = p->stype;
    void *next = p->pNext;
    memset(p, 0, sizeof *p);
    p->stype = stype;
    p->pNext = next;
    p->type = 1; /* GPU */
    p->vendorId = 0x8086;
    p->deviceId = 0x0bd5;
    p->maxMemAllocSize = g_budget;
#ifdef ZEDOUBLE_FORWARD_CUDA
    char cuname[200] = "";
    CUdevice cd;
    if (cuDeviceGet(&cd, d) == CUDA_SUCCESS)
        cuDeviceGetName(cuname, sizeof cuname, cd);
    snprintf(p->name, sizeof p->name, "ze double %d -> %s", d, cuname);
#else
    snprintf(p->name, sizeof p->name, "ze double %d", d);
#endif
    /* a UUID per device: Sysman's devices are matched to the core ones by it */
    memcpy(p->uuid, "ZEDOUBLE-UUID-", 14);
    p->uuid[14] = 0xd0;
    p->uuid[15] = (uint8_t)d;
}

API ze_result_t zeDeviceGetProperties(void *hDevice, dev_props_t *p)
{
    BEGIN(zeDeviceGetProperties);
    int d = dev_index(hDevice);
    if (d < 0)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!p)
        RETURN(E_INVALID_NULL_POINTER);
    fill_properties(d, p);
    RETURN(OK);
}

API ze_result_t zeDeviceGetMemoryProperties(void *hDevice, uint32_t *pCount, mem_props_t *p)
{
    BEGIN(zeDeviceGetMemoryProperties);
    int d = dev_index(hDevice);
    if (d < 0)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!pCount)
        RETURN(E_INVALID_NULL_POINTER);
    if (p && *pCount >= 1) {
        p[0].flags = 0;
        p[0].maxClockRate = 1000;
        p[0].maxBusWidth = 64;
        p[0].totalSize = g_budget;
#ifdef ZEDOUBLE_FORWARD_CUDA
        CUdevice cd;
        size_t total = 0;
        if (cuDeviceGet(&cd, d) == CUDA_SUCCESS && cuDeviceTotalMem(&total, cd) == CUDA_SUCCESS)
            p[0].totalSize = total;
#endif
        snprintf(p[0].name, sizeof p[0].name, "HBM");
        *pCount = 1;
    } else if (!p) {
        *pCount = 1;
    }
    RETURN(OK);
}

API ze_result_t zeContextCreate(void *hDriver, const ctx_desc_t *desc, void **phContext)
{
    BEGIN(zeContextCreate);
    if (hDriver != &g_driver)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!desc || !phContext)
        RETURN(E_INVALID_NULL_POINTER);
    if (desc->flags > 0x1)
        RETURN(E_INVALID_ENUMERATION);
    struct context *c = calloc(1, sizeof *c);
    if (!c)
        RETURN(E_OUT_OF_HOST_MEMORY);
    c->magic = CTX_MAGIC;
    c->next = g_contexts;
    g_contexts = c;
    g_live[L_CONTEXT]++;
    *phContext = c;
    RETURN(OK);
}

API ze_result_t zeContextDestroy(void *hContext)
{
    BEGIN(zeContextDestroy);
    if (!hContext || !ctx_ok(hContext))
        RETURN(E_INVALID_NULL_HANDLE);
    for (struct alloc *a = g_allocs; a; a = a->next)
        if (a->ctx == hContext)
            RETURN(E_HANDLE_OBJECT_IN_USE);
    for (struct physical *p = g_physicals; p; p = p->next)
        if (p->ctx == hContext)
            RETURN(E_HANDLE_OBJECT_IN_USE);
    for (struct reservation *r = g_reservations; r; r = r->next)
        if (r->ctx == hContext)
            RETURN(E_HANDLE_OBJECT_IN_USE);
    for (struct context **pp = &g_contexts; *pp; pp = &(*pp)->next)
        if (*pp == hContext) {
            *pp = (*pp)->next;
            break;
        }
    free(hContext);
    g_live[L_CONTEXT]--;
    RETURN(OK);
}

API ze_result_t zeMemAllocDevice(void *hContext, const dev_desc_t *desc, size_t size, size_t alignment,
                                 void *hDevice, void **pptr)
{
    BEGIN(zeMemAllocDevice);
    int d = dev_index(hDevice);
    if (!hContext || !hDevice || !ctx_ok(hContext) || d < 0)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!desc || !pptr)
        RETURN(E_INVALID_NULL_POINTER);
    if (desc->flags > 0x7)
        RETURN(E_INVALID_ENUMERATION);
    if (desc->ordinal >= 1)
        RETURN(E_INVALID_ARGUMENT);
    uint32_t export_flags = 0;
    for (const chain_t *c = desc->pNext; c; c = c->pNext)
        if (c->stype == STYPE_EXT_EXPORT_DESC)
            export_flags |= ((const ext_export_desc_t *)c)->flags;
    if (export_flags & ~(uint32_t)0x3) /* OPAQUE_FD 0x1 | DMA_BUF 0x2 */
        RETURN(E_INVALID_ENUMERATION);
    ze_result_t rc = do_alloc(hContext, L_DEVICE, d, size, alignment, pptr);
    if (rc == OK)
        g_allocs->export_flags = export_flags; /* do_alloc put it first */
    RETURN(rc);
}

API ze_result_t zeMemAllocHost(void *hContext, const host_desc_t *desc, size_t size, size_t alignment,
                               void **pptr)
{
    BEGIN(zeMemAllocHost);
    if (!hContext || !ctx_ok(hContext))
        RETURN(E_INVALID_NULL_HANDLE);
    if (!desc || !pptr)
        RETURN(E_INVALID_NULL_POINTER);
    if (desc->flags > 0xf)
        RETURN(E_INVALID_ENUMERATION);
    RETURN(do_alloc(hContext, L_HOST, -1, size, alignment, pptr));
}

API ze_result_t zeMemAllocShared(void *hContext, const dev_desc_t *ddesc, const host_desc_t *hdesc,
                                 size_t size, size_t alignment, void *hDevice, void **pptr)
{
    BEGIN(zeMemAllocShared);
    int d = hDevice ? dev_index(hDevice) : 0;
    if (!hContext || !ctx_ok(hContext) || d < 0)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!ddesc || !hdesc || !pptr)
        RETURN(E_INVALID_NULL_POINTER);
    if (ddesc->flags > 0x7 || hdesc->flags > 0xf)
        RETURN(E_INVALID_ENUMERATION);
    if (ddesc->ordinal >= 1)
        RETURN(E_INVALID_ARGUMENT);
    RETURN(do_alloc(hContext, L_SHARED, d, size, alignment, pptr));
}

API ze_result_t zeMemFree(void *hContext, void *ptr)
{
    BEGIN(zeMemFree);
    if (!hContext || !ctx_ok(hContext))
        RETURN(E_INVALID_NULL_HANDLE);
    if (!ptr)
        RETURN(E_INVALID_NULL_POINTER);
    struct alloc *a = alloc_find(hContext, ptr, 0);
    if (!a || a->kind == L_IPC_OPEN)
        RETURN(E_INVALID_ARGUMENT);
    alloc_unlink(a);
    alloc_release(a);
    free(a);
    RETURN(OK);
}

/* The allocation containing ptr (device, host, shared memory, or an opened IPC handle):
   its base and size, each optional. ZE_RESULT_ERROR_INVALID_ARGUMENT for an address no
   allocation of this context contains. */
API ze_result_t zeMemGetAddressRange(void *hContext, const void *ptr, void **pBase, size_t *pSize)
{
    BEGIN(zeMemGetAddressRange);
    if (!hContext || !ctx_ok(hContext))
        RETURN(E_INVALID_NULL_HANDLE);
    if (!ptr)
        RETURN(E_INVALID_NULL_POINTER);
    struct alloc *a = alloc_find(hContext, ptr, 1);
    if (!a)
        RETURN(E_INVALID_ARGUMENT);
    if (pBase)
        *pBase = a->ptr;
    if (pSize)
        *pSize = a->size;
    RETURN(OK);
}

/* A new dma-buf fd of a device allocation: a dup of its memfd, or (forward mode) the CUDA
   driver's dma-buf of its mapped range; -1 on failure. */
static int export_dmabuf(const struct alloc *a)
{
#ifdef ZEDOUBLE_FORWARD_CUDA
    int fd = -1;
    if (cuMemGetHandleForAddressRange(&fd, (CUdeviceptr)a->ptr, a->len, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) !=
        CUDA_SUCCESS)
        return -1;
    return fd;
#else
    return fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
#endif
}

API ze_result_t zeMemGetAllocProperties(void *hContext, const void *ptr, alloc_props_t *p, void **phDevice)
{
    BEGIN(zeMemGetAllocProperties);
    if (!hContext || !ctx_ok(hContext))
        RETURN(E_INVALID_NULL_HANDLE);
    if (!ptr || !p)
        RETURN(E_INVALID_NULL_POINTER);
    struct alloc *a = alloc_find(hContext, ptr, 1);
    for (const chain_t *c = p->pNext; c; c = c->pNext)
        if (c->stype == STYPE_EXT_EXPORT_FD) {
            ext_export_fd_t *e = (ext_export_fd_t *)(uintptr_t)c;
            if (!a || e->flags != EXT_MEM_DMA_BUF || !(a->export_flags & EXT_MEM_DMA_BUF))
                RETURN(E_INVALID_ARGUMENT);
            int fd = export_dmabuf(a);
            if (fd < 0)
                RETURN(E_OUT_OF_HOST_MEMORY);
            e->fd = fd;
        }
    p->type = 0;
    p->id = 0;
    p->pageSize = 0;
    if (phDevice)
        *phDevice = NULL;
    if (a) {
        static const uint32_t types[NLIVE] = { [L_DEVICE] = 2, [L_HOST] = 1, [L_SHARED] = 3, [L_IPC_OPEN] = 2 };
        p->type = types[a->kind];
        p->id = a->id;
        p->pageSize = (uint64_t)sysconf(_SC_PAGESIZE);
        if (phDevice && a->device >= 0)
            *phDevice = &g_devices[a->device];
    }
    RETURN(OK);
}

API ze_result_t zeMemGetIpcHandle(void *hContext, const void *ptr, ipc_handle_t *h)
{
    BEGIN(zeMemGetIpcHandle);
    if (!hContext || !ctx_ok(hContext))
        RETURN(E_INVALID_NULL_HANDLE);
    if (!ptr || !h)
        RETURN(E_INVALID_NULL_POINTER);
    struct alloc *a = alloc_find(hContext, ptr, 0);
    if (!a || a->kind != L_DEVICE)
        RETURN(E_INVALID_ARGUMENT);
    if (a->n_ipc >= (int)(sizeof a->ipc_fds / sizeof a->ipc_fds[0]))
        RETURN(E_OUT_OF_HOST_MEMORY);
#ifdef ZEDOUBLE_FORWARD_CUDA
    int fd = -1;
    if (cuMemExportToShareableHandle(&fd, a->cu_handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
        CUDA_SUCCESS)
        RETURN(E_UNKNOWN);
#else
    int fd = fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        RETURN(E_OUT_OF_HOST_MEMORY);
#endif
    a->ipc_fds[a->n_ipc++] = fd;
    g_live[L_IPC_HANDLE]++;
    memset(h, 0, sizeof *h);
    int32_t fd32 = fd;
#ifdef ZEDOUBLE_FORWARD_CUDA
    uint64_t size = a->len; /* the granularity-rounded VMM allocation */
#else
    uint64_t size = a->size;
#endif
    uint32_t magic = IPC_MAGIC;
    uint32_t dev = (uint32_t)a->device;
    memcpy(h->data, &fd32, 4);
    memcpy(h->data + 8, &size, 8);
    memcpy(h->data + 16, &magic, 4);
    memcpy(h->data + 20, &dev, 4);
    RETURN(OK);
}

#ifndef ZEDOUBLE_NO_PUT
API ze_result_t zeMemPutIpcHandle(void *hContext, ipc_handle_t h)
{
    BEGIN(zeMemPutIpcHandle);
    if (!hContext || !ctx_ok(hContext))
        RETURN(E_INVALID_NULL_HANDLE);
    int32_t fd;
    memcpy(&fd, h.data, 4);
    for (struct alloc *a = g_allocs; a; a = a->next) {
        if (a->ctx != hContext)
            continue;
        for (int i = 0; i < a->n_ipc; i++)
            if (a->ipc_fds[i] == fd) {
                close(fd);
                a->ipc_fds[i] = a->ipc_fds[--a->n_ipc];
                g_live[L_IPC_HANDLE]--;
                RETURN(OK);
            }
    }
    RETURN(E_INVALID_ARGUMENT);
}
#endif

API ze_result_t zeMemOpenIpcHandle(void *hContext, void *hDevice, ipc_handle_t h, uint32_t flags, void **pptr)
{
    BEGIN(zeMemOpenIpcHandle);
    int d = dev_index(hDevice);
    if (!hContext || !ctx_ok(hContext) || d < 0)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!pptr)
        RETURN(E_INVALID_NULL_POINTER);
    if (flags > 0x3)
        RETURN(E_INVALID_ENUMERATION);
    int32_t fd;
    uint64_t size;
    uint32_t magic;
    memcpy(&fd, h.data, 4);
    memcpy(&size, h.data + 8, 8);
    memcpy(&magic, h.data + 16, 4);
    struct stat st;
    if (magic != IPC_MAGIC || fd < 0 || fstat(fd, &st) != 0 || size == 0)
        RETURN(E_INVALID_ARGUMENT);
    struct alloc *a = calloc(1, sizeof *a);
    if (!a)
        RETURN(E_OUT_OF_HOST_MEMORY);
    a->fd = -1;
#ifdef ZEDOUBLE_FORWARD_CUDA
    CUdeviceptr dp = 0;
    if (cuMemImportFromShareableHandle(&a->cu_handle, (void *)(uintptr_t)fd,
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS) {
        free(a);
        RETURN(E_INVALID_ARGUMENT);
    }
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = d;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (cuMemAddressReserve(&dp, size, 0, 0, 0) != CUDA_SUCCESS) {
        cuMemRelease(a->cu_handle);
        free(a);
        RETURN(E_OUT_OF_DEVICE_MEMORY);
    }
    if (cuMemMap(dp, size, 0, a->cu_handle, 0) != CUDA_SUCCESS || cuMemSetAccess(dp, size, &acc, 1) != CUDA_SUCCESS) {
        cuMemAddressFree(dp, size);
        cuMemRelease(a->cu_handle);
        free(a);
        RETURN(E_UNKNOWN);
    }
    a->ptr = (void *)dp;
    a->len = size;
#else
    if ((uint64_t)st.st_size < size) {
        free(a);
        RETURN(E_INVALID_ARGUMENT);
    }
    a->ptr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (a->ptr == MAP_FAILED) {
        free(a);
        RETURN(E_OUT_OF_HOST_MEMORY);
    }
    a->base = a->ptr;
    a->len = size;
#endif
    a->ctx = hContext;
    a->kind = L_IPC_OPEN;
    a->device = d;
    a->size = size;
    a->id = g_next_id++;
    a->next = g_allocs;
    g_allocs = a;
    g_live[L_IPC_OPEN]++;
    *pptr = a->ptr;
    RETURN(OK);
}

API ze_result_t zeMemCloseIpcHandle(void *hContext, const void *ptr)
{
    BEGIN(zeMemCloseIpcHandle);
    if (!hContext || !ctx_ok(hContext))
        RETURN(E_INVALID_NULL_HANDLE);
    if (!ptr)
        RETURN(E_INVALID_NULL_POINTER);
    struct alloc *a = alloc_find(hContext, ptr, 0);
    if (!a || a->kind != L_IPC_OPEN)
        RETURN(E_INVALID_ARGUMENT);
    alloc_unlink(a);
    alloc_release(a);
    free(a);
    RETURN(OK);
}

/* The checks every range call starts with (the validation layer's order). Lock held. */
static ze_result_t check_range(const void *ctx, const void *ptr, size_t size)
{
    if (!ctx || !ctx_ok(ctx))
        return E_INVALID_NULL_HANDLE;
    if (!ptr)
        return E_INVALID_NULL_POINTER;
    return size == 0 ? E_UNSUPPORTED_SIZE : OK;
}

/* -- virtual memory ---------------------------------------------------------------------------- */
__attribute__((unused)) static size_t page_for(size_t size) { return size >= BIG_PAGE ? BIG_PAGE : PAGE; }

API ze_result_t zeVirtualMemQueryPageSize(void *hContext, void *hDevice, size_t size, size_t *pagesize)
{
    BEGIN(zeVirtualMemQueryPageSize);
    if (!hContext || !ctx_ok(hContext) || dev_index(hDevice) < 0)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!pagesize)
        RETURN(E_INVALID_NULL_POINTER);
    if (size == 0)
        RETURN(E_UNSUPPORTED_SIZE);
#ifdef ZEDOUBLE_FORWARD_CUDA
    CUmemAllocationProp prop = cu_prop(dev_index(hDevice), 0);
    size_t g = 0;
    cuMemGetAllocationGranularity(&g, &prop, size >= BIG_PAGE ? CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
                                                              : CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    *pagesize = g;
#else
    *pagesize = page_for(size);
#endif
    RETURN(OK);
}

static size_t min_page(void)
{
#ifdef ZEDOUBLE_FORWARD_CUDA
    CUmemAllocationProp prop = cu_prop(0, 0);
    size_t g = 0;
    cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    return g ? g : BIG_PAGE;
#else
    return PAGE;
#endif
}

API ze_result_t zeVirtualMemReserve(void *hContext, const void *pStart, size_t size, void **pptr)
{
    BEGIN(zeVirtualMemReserve);
    if (!hContext || !ctx_ok(hContext))
        RETURN(E_INVALID_NULL_HANDLE);
    if (!pptr)
        RETURN(E_INVALID_NULL_POINTER);
    if (size == 0 || size % min_page())
        RETURN(E_UNSUPPORTED_SIZE);
    struct reservation *r = calloc(1, sizeof *r);
    if (!r)
        RETURN(E_OUT_OF_HOST_MEMORY);
#ifdef ZEDOUBLE_FORWARD_CUDA
    CUdeviceptr dp = 0;
    if (cuMemAddressReserve(&dp, size, 0, (CUdeviceptr)pStart, 0) != CUDA_SUCCESS) {
        free(r);
        RETURN(E_OUT_OF_DEVICE_MEMORY);
    }
    r->ptr = (char *)dp;
#else
    size_t span = size + PAGE;
    char *m = mmap((void *)pStart, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        free(r);
        RETURN(E_OUT_OF_HOST_MEMORY);
    }
    char *a = (char *)(((uintptr_t)m + PAGE - 1) & ~(uintptr_t)(PAGE - 1));
    if (a > m)
        munmap(m, (size_t)(a - m));
    if (a + size < m + span)
        munmap(a + size, (size_t)(m + span - (a + size)));
    r->ptr = a;
#endif
    r->size = size;
    r->ctx = hContext;
    r->next = g_reservations;
    g_reservations = r;
    g_live[L_RESERVATION]++;
    *pptr = r->ptr;
    RETURN(OK);
}

API ze_result_t zeVirtualMemFree(void *hContext, const void *ptr, size_t size)
{
    BEGIN(zeVirtualMemFree);
    ze_result_t bad_ = check_range(hContext, ptr, size);
    if (bad_ != OK)
        RETURN(bad_);
    for (struct reservation **pp = &g_reservations; *pp; pp = &(*pp)->next) {
        struct reservation *r = *pp;
        if (r->ctx != hContext || r->ptr != ptr)
            continue;
        if (r->size != size)
            RETURN(E_INVALID_ARGUMENT);
        for (struct mapping *m = g_mappings; m; m = m->next)
            if (m->ptr >= r->ptr && m->ptr < r->ptr + r->size)
                RETURN(E_HANDLE_OBJECT_IN_USE);
#ifdef ZEDOUBLE_FORWARD_CUDA
        cuMemAddressFree((CUdeviceptr)r->ptr, r->size);
#else
        munmap(r->ptr, r->size);
#endif
        *pp = r->next;
        free(r);
        g_live[L_RESERVATION]--;
        RETURN(OK);
    }
    RETURN(E_INVALID_ARGUMENT);
}

API ze_result_t zePhysicalMemCreate(void *hContext, void *hDevice, const phys_desc_t *desc, void **ph)
{
    BEGIN(zePhysicalMemCreate);
    int d = dev_index(hDevice);
    if (!hContext || !ctx_ok(hContext) || d < 0)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!desc || !ph)
        RETURN(E_INVALID_NULL_POINTER);
    if (desc->flags > 0x1)
        RETURN(E_INVALID_ENUMERATION);
    if (desc->size == 0)
        RETURN(E_UNSUPPORTED_SIZE);
    if (desc->size % min_page())
        RETURN(E_UNSUPPORTED_ALIGNMENT);
#ifndef ZEDOUBLE_FORWARD_CUDA
    if (g_used[d] + desc->size > g_budget)
        RETURN(E_OUT_OF_DEVICE_MEMORY);
#endif
    struct physical *p = calloc(1, sizeof *p);
    if (!p)
        RETURN(E_OUT_OF_HOST_MEMORY);
    p->fd = -1;
#ifdef ZEDOUBLE_FORWARD_CUDA
    CUmemAllocationProp prop = cu_prop(d, 0);
    CUresult cr = cuMemCreate(&p->cu_handle, desc->size, &prop, 0);
    if (cr != CUDA_SUCCESS) {
        free(p);
        RETURN(cr == CUDA_ERROR_OUT_OF_MEMORY ? E_OUT_OF_DEVICE_MEMORY : E_UNKNOWN);
    }
#else
    p->fd = new_memfd(desc->size);
    if (p->fd < 0) {
        free(p);
        RETURN(E_OUT_OF_HOST_MEMORY);
    }
#endif
    p->magic = PHYS_MAGIC;
    p->ctx = hContext;
    p->device = d;
    p->size = desc->size;
    p->next = g_physicals;
    g_physicals = p;
    g_used[d] += desc->size;
    g_live[L_PHYSICAL]++;
    *ph = p;
    RETURN(OK);
}

API ze_result_t zePhysicalMemDestroy(void *hContext, void *h)
{
    BEGIN(zePhysicalMemDestroy);
    struct physical *p = phys_find(h);
    if (!hContext || !ctx_ok(hContext) || !p)
        RETURN(E_INVALID_NULL_HANDLE);
    if (p->maps > 0)
        RETURN(E_HANDLE_OBJECT_IN_USE);
    for (struct physical **pp = &g_physicals; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
#ifdef ZEDOUBLE_FORWARD_CUDA
    cuMemRelease(p->cu_handle);
#else
    close(p->fd);
#endif
    g_used[p->device] -= p->size;
    free(p);
    g_live[L_PHYSICAL]--;
    RETURN(OK);
}

__attribute__((unused)) static int prot_of(uint32_t access)
{
    return access == 1 ? PROT_READ | PROT_WRITE : access == 2 ? PROT_READ : PROT_NONE;
}

#ifdef ZEDOUBLE_FORWARD_CUDA
static ze_result_t cu_access(char *ptr, size_t size, int device, uint32_t access)
{
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof acc);
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = device;
    /* CUDA has no "no access" after a grant: NONE keeps the mapping without a new grant */
    if (access == 0)
        return OK;
    acc.flags = access == 1 ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
    return cuMemSetAccess((CUdeviceptr)ptr, size, &acc, 1) == CUDA_SUCCESS ? OK : E_UNKNOWN;
}
#endif

API ze_result_t zeVirtualMemMap(void *hContext, const void *ptr, size_t size, void *hPhys, size_t offset,
                                uint32_t access)
{
    BEGIN(zeVirtualMemMap);
    struct physical *p = phys_find(hPhys);
    if (!hContext || !ctx_ok(hContext) || !p)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!ptr)
        RETURN(E_INVALID_NULL_POINTER);
    if (access > 2)
        RETURN(E_INVALID_ENUMERATION);
    if (size == 0)
        RETURN(E_UNSUPPORTED_SIZE);
    size_t pg = min_page();
    if ((uintptr_t)ptr % pg || size % pg || offset % pg)
        RETURN(E_UNSUPPORTED_ALIGNMENT);
    if (offset + size > p->size)
        RETURN(E_INVALID_ARGUMENT);
    const char *c = ptr;
    struct reservation *r = g_reservations;
    for (; r; r = r->next)
        if (r->ctx == hContext && c >= r->ptr && c + size <= r->ptr + r->size)
            break;
    if (!r)
        RETURN(E_INVALID_ARGUMENT);
    for (struct mapping *m = g_mappings; m; m = m->next)
        if (m->ptr < c + size && c < m->ptr + m->size)
            RETURN(E_OVERLAPPING_REGIONS);
    struct mapping *m = calloc(1, sizeof *m);
    if (!m)
        RETURN(E_OUT_OF_HOST_MEMORY);
#ifdef ZEDOUBLE_FORWARD_CUDA
    if (cuMemMap((CUdeviceptr)ptr, size, offset, p->cu_handle, 0) != CUDA_SUCCESS) {
        free(m);
        RETURN(E_UNKNOWN);
    }
    if (cu_access((char *)ptr, size, p->device, access) != OK) {
        cuMemUnmap((CUdeviceptr)ptr, size);
        free(m);
        RETURN(E_UNKNOWN);
    }
#else
    if (mmap((void *)ptr, size, prot_of(access), MAP_SHARED | MAP_FIXED, p->fd, (off_t)offset) == MAP_FAILED) {
        free(m);
        RETURN(E_OUT_OF_HOST_MEMORY);
    }
#endif
    m->ctx = hContext;
    m->ptr = (char *)ptr;
    m->size = size;
    m->phys = p;
    m->access = access;
    m->next = g_mappings;
    g_mappings = m;
    p->maps++;
    g_live[L_MAPPING]++;
    RETURN(OK);
}

API ze_result_t zeVirtualMemUnmap(void *hContext, const void *ptr, size_t size)
{
    BEGIN(zeVirtualMemUnmap);
    ze_result_t bad_ = check_range(hContext, ptr, size);
    if (bad_ != OK)
        RETURN(bad_);
    for (struct mapping **pp = &g_mappings; *pp; pp = &(*pp)->next) {
        struct mapping *m = *pp;
        if (m->ctx != hContext || m->ptr != ptr)
            continue;
        if (m->size != size)
            RETURN(E_INVALID_ARGUMENT);
#ifdef ZEDOUBLE_FORWARD_CUDA
        cuMemUnmap((CUdeviceptr)ptr, size);
#else
        mmap((void *)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
#endif
        m->phys->maps--;
        *pp = m->next;
        free(m);
        g_live[L_MAPPING]--;
        RETURN(OK);
    }
    RETURN(E_INVALID_ARGUMENT);
}

API ze_result_t zeVirtualMemSetAccessAttribute(void *hContext, const void *ptr, size_t size, uint32_t access)
{
    BEGIN(zeVirtualMemSetAccessAttribute);
    if (!hContext || !ctx_ok(hContext))
        RETURN(E_INVALID_NULL_HANDLE);
    if (!ptr)
        RETURN(E_INVALID_NULL_POINTER);
    if (access > 2)
        RETURN(E_INVALID_ENUMERATION);
    if (size == 0)
        RETURN(E_UNSUPPORTED_SIZE);
    if ((uintptr_t)ptr % min_page() || size % min_page())
        RETURN(E_UNSUPPORTED_ALIGNMENT);
    const char *c = ptr;
    size_t covered = 0;
    for (struct mapping *m = g_mappings; m; m = m->next)
        if (m->ctx == hContext && m->ptr >= c && m->ptr + m->size <= c + size)
            covered += m->size;
    if (covered != size)
        RETURN(E_INVALID_ARGUMENT);
    for (struct mapping *m = g_mappings; m; m = m->next)
        if (m->ctx == hContext && m->ptr >= c && m->ptr + m->size <= c + size) {
#ifdef ZEDOUBLE_FORWARD_CUDA
            if (cu_access(m->ptr, m->size, m->phys->device, access) != OK)
                RETURN(E_UNKNOWN);
#else
            mprotect(m->ptr, m->size, prot_of(access));
#endif
            m->access = access;
        }
    RETURN(OK);
}

API ze_result_t zeVirtualMemGetAccessAttribute(void *hContext, const void *ptr, size_t size, uint32_t *access,
                                               size_t *outSize)
{
    BEGIN(zeVirtualMemGetAccessAttribute);
    if (!hContext || !ctx_ok(hContext))
        RETURN(E_INVALID_NULL_HANDLE);
    if (!ptr || !access || !outSize)
        RETURN(E_INVALID_NULL_POINTER);
    if (size == 0)
        RETURN(E_UNSUPPORTED_SIZE);
    const char *c = ptr;
    for (struct mapping *m = g_mappings; m; m = m->next)
        if (m->ctx == hContext && c >= m->ptr && c < m->ptr + m->size) {
            *access = m->access;
            size_t left = (size_t)(m->ptr + m->size - c);
            *outSize = left < size ? left : size;
            RETURN(OK);
        }
    RETURN(E_INVALID_ARGUMENT);
}

/* -- Sysman ------------------------------------------------------------------------------------ */
#ifndef ZEDOUBLE_NO_SYSMAN
/* The device index of a Sysman device handle: -1 not a device, -2 a device of a way that was
 * not initialised (zesInit's handles before zesInit, core handles without ZES_ENABLE_SYSMAN). */
static int sysman_index(const void *h)
{
    for (int i = 0; i < g_ndev; i++)
        if (h == &g_sysman_devices[i])
            return g_sysman_init ? i : -2;
    int d = dev_index(h);
    if (d >= 0)
        return g_sysman_legacy ? d : -2;
    return -1;
}

static struct sysman_module *module_of(const void *h)
{
    for (int d = 0; d < g_ndev; d++)
        for (int m = 0; m < MODULES; m++)
            if (h == &g_modules[d][m])
                return &g_modules[d][m];
    return NULL;
}

#ifdef ZEDOUBLE_FORWARD_CUDA
/* cuMemGetInfo answers for the current context: device `device`'s primary context, pushed
   for the question (the double keeps device 0's current otherwise). */
static int forward_memory_info(int device, uint64_t *free_b, uint64_t *total_b)
{
    CUdevice dev;
    CUcontext ctx;
    size_t f = 0, t = 0;
    if (cuDeviceGet(&dev, device) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
        return -1;
    int rc = -1;
    if (cuCtxPushCurrent(ctx) == CUDA_SUCCESS) {
        rc = cuMemGetInfo(&f, &t) == CUDA_SUCCESS ? 0 : -1;
        cuCtxPopCurrent(&ctx);
    }
    cuDevicePrimaryCtxRelease(dev);
    *free_b = (uint64_t)f;
    *total_b = (uint64_t)t;
    return rc;
}
#endif

#ifndef ZEDOUBLE_SYSMAN_LEGACY
API ze_result_t zesInit(uint32_t flags)
{
    BEGIN(zesInit);
    if (flags > 0x1)
        RETURN(E_INVALID_ENUMERATION);
    const char *none = getenv("ZEDOUBLE_NO_DRIVER");
    if (none && strcmp(none, "1") == 0)
        RETURN(E_UNINITIALIZED);
    g_sysman_init = 1;
    RETURN(OK);
}

API ze_result_t zesDriverGet(uint32_t *pCount, void **phDrivers)
{
    BEGIN(zesDriverGet);
    if (!g_sysman_init)
        RETURN(E_UNINITIALIZED);
    if (!pCount)
        RETURN(E_INVALID_NULL_POINTER);
    if (phDrivers && *pCount >= 1)
        phDrivers[0] = &g_sysman_driver;
    *pCount = 1;
    RETURN(OK);
}

API ze_result_t zesDeviceGet(void *hDriver, uint32_t *pCount, void **phDevices)
{
    BEGIN(zesDeviceGet);
    if (!g_sysman_init)
        RETURN(E_UNINITIALIZED);
    if (hDriver != &g_sysman_driver)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!pCount)
        RETURN(E_INVALID_NULL_POINTER);
    if (phDevices) {
        uint32_t n = *pCount < (uint32_t)g_ndev ? *pCount : (uint32_t)g_ndev;
        for (uint32_t i = 0; i < n; i++) { /* the reverse of zeDeviceGet's order */
            int d = g_ndev - 1 - (int)i;
            g_sysman_devices[d].magic = 0x53444556u;
            g_sysman_devices[d].index = d;
            phDevices[i] = &g_sysman_devices[d];
        }
        *pCount = n;
    } else {
        *pCount = (uint32_t)g_ndev;
    }
    RETURN(OK);
}
#endif

API ze_result_t zesDeviceGetProperties(void *hDevice, sys_dev_props_t *p)
{
    BEGIN(zesDeviceGetProperties);
    int d = sysman_index(hDevice);
    if (d == -2)
        RETURN(E_UNINITIALIZED);
    if (d < 0)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!p)
        RETURN(E_INVALID_NULL_POINTER);
    uint32_t stype = p->stype;
    void *next = p->pNext;
    memset(p, 0, sizeof *p);
    p->stype = stype;
    p->pNext = next;
    fill_properties(d, &p->core);
    snprintf(p->serialNumber, sizeof p->serialNumber, "unknown");
    snprintf(p->boardNumber, sizeof p->boardNumber, "unknown");
    snprintf(p->brandName, sizeof p->brandName, "aml");
    snprintf(p->modelName, sizeof p->modelName, "ze double");
    snprintf(p->vendorName, sizeof p->vendorName, "aml");
    snprintf(p->driverVersion, sizeof p->driverVersion, "1.4");
    RETURN(OK);
}

API ze_result_t zesDeviceEnumMemoryModules(void *hDevice, uint32_t *pCount, void **phMemory)
{
    BEGIN(zesDeviceEnumMemoryModules);
    int d = sysman_index(hDevice);
    if (d == -2)
        RETURN(E_UNINITIALIZED);
    if (d < 0)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!pCount)
        RETURN(E_INVALID_NULL_POINTER);
    if (phMemory && *pCount > 0) {
        uint32_t n = *pCount < MODULES ? *pCount : MODULES;
        for (uint32_t m = 0; m < n; m++) {
            g_modules[d][m] = (struct sysman_module){ 0x4d454d4fu, d, (int)m };
            phMemory[m] = &g_modules[d][m];
        }
        *pCount = n;
    } else {
        *pCount = MODULES;
    }
    RETURN(OK);
}

API ze_result_t zesMemoryGetProperties(void *hMemory, sys_mem_props_t *p)
{
    BEGIN(zesMemoryGetProperties);
    struct sysman_module *m = module_of(hMemory);
    if (!m || !m->magic)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!p)
        RETURN(E_INVALID_NULL_POINTER);
    p->onSubdevice = 0;
    p->subdeviceId = 0;
    p->busWidth = -1;
    p->numChannels = -1;
    if (m->index == 0) {
        p->type = MEM_TYPE_DDR;
        p->location = MEM_LOC_SYSTEM;
        p->physicalSize = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    } else {
        p->type = MEM_TYPE_HBM;
        p->location = MEM_LOC_DEVICE;
        p->physicalSize = g_budget;
    }
    RETURN(OK);
}

API ze_result_t zesMemoryGetState(void *hMemory, sys_mem_state_t *s)
{
    BEGIN(zesMemoryGetState);
    struct sysman_module *m = module_of(hMemory);
    if (!m || !m->magic)
        RETURN(E_INVALID_NULL_HANDLE);
    if (!s)
        RETURN(E_INVALID_NULL_POINTER);
    s->health = MEM_HEALTH_OK;
    if (m->index == 0) {
        uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        s->size = (uint64_t)sysconf(_SC_PHYS_PAGES) * page;
        s->free = (uint64_t)sysconf(_SC_AVPHYS_PAGES) * page;
        RETURN(OK);
    }
#ifdef ZEDOUBLE_FORWARD_CUDA
    if (forward_memory_info(m->device, &s->free, &s->size) != 0)
        RETURN(E_UNKNOWN);
#else
    s->size = g_budget;
    s->free = g_used[m->device] >= g_budget ? 0 : g_budget - g_used[m->device];
#endif
    RETURN(OK);
}
#endif /* ZEDOUBLE_NO_SYSMAN */

/* -- control ------------------------------------------------------------------------------------ */
API int zedouble_inject(const char *name, uint32_t err, long skip, long times)
{
    int fn = fn_index(name);
    if (fn < 0)
        return -1;
    if (skip < 0 || times == 0 || times < -1)
        return -2;
    pthread_mutex_lock(&g_lock);
    if (g_ninject >= MAX_INJECT) {
        pthread_mutex_unlock(&g_lock);
        return -3;
    }
    g_inject[g_ninject++] = (struct inject){ fn, err, skip, times };
    pthread_mutex_unlock(&g_lock);
    return 0;
}

API long zedouble_calls(const char *name)
{
    int fn = fn_index(name);
    if (fn < 0)
        return -1;
    pthread_mutex_lock(&g_lock);
    long n = g_calls[fn];
    pthread_mutex_unlock(&g_lock);
    return n;
}

API long zedouble_live(const char *kind)
{
    for (int i = 0; i < NLIVE; i++)
        if (strcmp(g_live_names[i], kind) == 0) {
            pthread_mutex_lock(&g_lock);
            long n = g_live[i];
            pthread_mutex_unlock(&g_lock);
            return n;
        }
    return -1;
}

API int zedouble_set_devices(int count, size_t memory)
{
    if (count < 0 || count > MAX_DEVICES)
        return -1;
    pthread_mutex_lock(&g_lock);
    g_ndev = count;
    g_budget = memory;
    pthread_mutex_unlock(&g_lock);
    return 0;
}

#ifdef ZEDOUBLE_FORWARD_CUDA
/* The device whose memory holds `p`: a device allocation, an opened IPC handle or a virtual
 * memory mapping of the double; -1 for any other address (host, shared, unknown). Lock held. */
static int forward_device_at(const void *p)
{
    const char *c = p;
    for (struct alloc *a = g_allocs; a; a = a->next)
        if ((a->kind == L_DEVICE || a->kind == L_IPC_OPEN) && a->device >= 0 && c >= (char *)a->ptr &&
            c < (char *)a->ptr + a->size)
            return a->device;
    for (struct mapping *m = g_mappings; m; m = m->next)
        if (c >= m->ptr && c < m->ptr + m->size)
            return m->phys ? m->phys->device : -1;
    return -1;
}
#endif

/* Copy bytes between any two addresses (host, device or shared memory): the tests' way to
 * read and write device memory, which aml-ze (no command lists) does not touch.
 * Forward mode: the double's device memory is cuMem VMM memory whose access it grants to its
 * own device only (cuMemSetAccess), so a copy to or from device d's memory must run in device
 * d's primary context: in device 0's (current otherwise), cuMemcpy to device 1's memory
 * failed (issue 21, "the double could not write 20 bytes" on two GPUs). */
API int zedouble_memcpy(void *dst, const void *src, size_t n)
{
#ifdef ZEDOUBLE_FORWARD_CUDA
    if (g_primary)
        cuCtxSetCurrent(g_primary);
    pthread_mutex_lock(&g_lock);
    int device = forward_device_at(dst);
    if (device < 0)
        device = forward_device_at(src);
    pthread_mutex_unlock(&g_lock);
    if (device <= 0) /* device 0's context is current */
        return cuMemcpy((CUdeviceptr)dst, (CUdeviceptr)src, n) == CUDA_SUCCESS ? 0 : -1;
    CUdevice dev;
    CUcontext ctx;
    if (cuDeviceGet(&dev, device) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
        return -1;
    int rc = -1;
    if (cuCtxPushCurrent(ctx) == CUDA_SUCCESS) {
        rc = cuMemcpy((CUdeviceptr)dst, (CUdeviceptr)src, n) == CUDA_SUCCESS ? 0 : -1;
        cuCtxPopCurrent(&ctx);
    }
    cuDevicePrimaryCtxRelease(dev);
    return rc;
#else
    memcpy(dst, src, n);
    return 0;
#endif
}

API const char *zedouble_mode(void)
{
#ifdef ZEDOUBLE_FORWARD_CUDA
    return "forward";
#else
    return "host";
#endif
}

/* Free everything, clear injections and counters (the tests' leak check reads live first). */
API void zedouble_reset(void)
{
    pthread_mutex_lock(&g_lock);
#ifdef ZEDOUBLE_FORWARD_CUDA
    if (g_primary)
        cuCtxSetCurrent(g_primary);
#endif
    while (g_mappings) {
        struct mapping *m = g_mappings;
        g_mappings = m->next;
#ifdef ZEDOUBLE_FORWARD_CUDA
        cuMemUnmap((CUdeviceptr)m->ptr, m->size);
#else
        mmap(m->ptr, m->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
#endif
        free(m);
    }
    while (g_physicals) {
        struct physical *p = g_physicals;
        g_physicals = p->next;
#ifdef ZEDOUBLE_FORWARD_CUDA
        cuMemRelease(p->cu_handle);
#else
        close(p->fd);
#endif
        free(p);
    }
    while (g_reservations) {
        struct reservation *r = g_reservations;
        g_reservations = r->next;
#ifdef ZEDOUBLE_FORWARD_CUDA
        cuMemAddressFree((CUdeviceptr)r->ptr, r->size);
#else
        munmap(r->ptr, r->size);
#endif
        free(r);
    }
    while (g_allocs) {
        struct alloc *a = g_allocs;
        g_allocs = a->next;
        alloc_release(a);
        free(a);
    }
    while (g_contexts) {
        struct context *c = g_contexts;
        g_contexts = c->next;
        free(c);
    }
    memset(g_live, 0, sizeof g_live);
    memset(g_calls, 0, sizeof g_calls);
    memset(g_used, 0, sizeof g_used);
    memset(g_modules, 0, sizeof g_modules);
    g_sysman_init = 0;
    g_ninject = 0;
#ifndef ZEDOUBLE_FORWARD_CUDA
    g_ndev = 1;
    g_budget = (size_t)1 << 30;
#endif
    pthread_mutex_unlock(&g_lock);
}
