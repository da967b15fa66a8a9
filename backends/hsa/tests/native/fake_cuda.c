/*
 * A host-memory stand-in for libcuda.so.1, only for checking the HSA double's forward mode
 * on a machine without an NVIDIA GPU (backends/hsa/tests/test_hsa_forward.py). It implements the driver calls the forward double makes,
 * for one device with a 2 MiB granule: reservations are PROT_NONE mmaps, allocations memfds,
 * exported handles dup'ed memfds. It checks the arguments the forward double must pass
 * (POSIX-fd handle type, device locations, whole-allocation maps, the fd value cast to void*
 * on import). It is not CUDA: the real run is run_forward.sh on a GPU.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GRANULE ((size_t)2 << 20)
#define API __attribute__((visibility("default")))

typedef struct alloc {
    unsigned long long id;
    int fd;
    size_t size;
    struct alloc *next;
} alloc_t;
typedef struct mapping {
    uintptr_t va;
    size_t size;
    unsigned long long flags;
    struct mapping *next;
} mapping_t;

static alloc_t *allocs;
static mapping_t *mappings;
static unsigned long long next_id = 100;

static alloc_t *find(unsigned long long id)
{
    for (alloc_t *a = allocs; a; a = a->next)
        if (a->id == id)
            return a;
    return NULL;
}

static alloc_t *add(int fd, size_t size)
{
    alloc_t *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->fd = fd;
    a->size = size;
    a->id = next_id++;
    a->next = allocs;
    allocs = a;
    return a;
}

API CUresult cuInit(unsigned flags) { return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS; }
API CUresult cuDeviceGetCount(int *count)
{
    *count = 1;
    return CUDA_SUCCESS;
}
API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (ordinal != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device)
{
    (void)device;
    *ctx = (CUcontext)(uintptr_t)0x1234;
    return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) { return device ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS; }
API CUresult cuCtxSetCurrent(CUcontext ctx) { return ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }
API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device)
{
    (void)device;
    *bytes = (size_t)8 << 30;
    return CUDA_SUCCESS;
}

API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                           CUmemAllocationGranularity_flags option)
{
    (void)option;
    if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = GRANULE;
    return CUDA_SUCCESS;
}

API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                 unsigned long long flags)
{
    (void)addr;
    if (size % GRANULE || flags)
        return CUDA_ERROR_INVALID_VALUE;
    size_t align = alignment > GRANULE ? alignment : GRANULE;
    void *p = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    return CUDA_SUCCESS;
}

API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) { return ptr && size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                         unsigned long long flags)
{
    if (size % GRANULE || flags || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id != 0 ||
        prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = memfd_create("fakecuda", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    alloc_t *a = add(fd, size);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *handle = a->id;
    return CUDA_SUCCESS;
}

API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    for (alloc_t **l = &allocs; *l; l = &(*l)->next) {
        if ((*l)->id == handle) {
            alloc_t *a = *l;
            *l = a->next;
            close(a->fd);
            free(a);
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                      unsigned long long flags)
{
    alloc_t *a = find(handle);
    if (!a || offset || flags || size != a->size)
        return CUDA_ERROR_INVALID_VALUE;
    if (mmap((void *)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, 0) == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    mapping_t *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->va = ptr;
    m->size = size;
    m->next = mappings;
    mappings = m;
    return CUDA_SUCCESS;
}

API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    for (mapping_t **l = &mappings; *l; l = &(*l)->next) {
        mapping_t *m = *l;
        if (m->va == ptr && m->size == size) {
            *l = m->next;
            free(m);
            mmap((void *)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    if (count != 1 || desc->location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc->location.id != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (mapping_t *m = mappings; m; m = m->next) {
        if (m->va == ptr && m->size == size) {
            m->flags = desc->flags;
            int prot = desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE : PROT_READ;
            return mprotect((void *)ptr, size, prot) == 0 ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    if (location->type != CU_MEM_LOCATION_TYPE_DEVICE || location->id != 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (mapping_t *m = mappings; m; m = m->next) {
        if (m->va <= ptr && ptr < m->va + m->size) {
            *flags = m->flags;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

API CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
                                          CUmemAllocationHandleType type, unsigned long long flags)
{
    alloc_t *a = find(handle);
    if (!a || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    *(int *)shareable = fcntl(a->fd, F_DUPFD_CLOEXEC, 0);
    return CUDA_SUCCESS;
}

API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os_handle,
                                            CUmemAllocationHandleType type)
{
    int fd = (int)(uintptr_t)os_handle; /* CUDA takes the fd value cast to void* */
    char path[64], link[256];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n <= 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    link[n] = 0;
    struct stat st;
    if (!strstr(link, "fakecuda") || fstat(fd, &st) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    alloc_t *a = add(fcntl(fd, F_DUPFD_CLOEXEC, 0), (size_t)st.st_size);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *handle = a->id;
    return CUDA_SUCCESS;
}

API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
    if (!find(handle))
        return CUDA_ERROR_INVALID_VALUE;
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = 0;
    return CUDA_SUCCESS;
}

/* cuMemAlloc'ed bytes, so that cuMemGetInfo's free memory follows what the double takes. */
typedef struct dev_alloc {
    uintptr_t ptr;
    size_t size;
    struct dev_alloc *next;
} dev_alloc_t;
static dev_alloc_t *dev_allocs;

API CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size)
{
    dev_alloc_t *d = calloc(1, sizeof *d);
    if (!d)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        free(d);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->ptr = (uintptr_t)p;
    d->size = size;
    d->next = dev_allocs;
    dev_allocs = d;
    *ptr = (uintptr_t)p;
    return CUDA_SUCCESS;
}
/* A memfd of the range's length stands for the dma-buf (the range must be inside one
 * allocation, page-aligned as the driver wants). */
API CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr ptr, size_t size, CUmemRangeHandleType type,
                                           unsigned long long flags)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (!handle || type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || flags || ptr % (CUdeviceptr)pg ||
        size % (size_t)pg || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (dev_alloc_t *d = dev_allocs; d; d = d->next)
        if (d->ptr <= ptr && ptr + size <= d->ptr + (d->size + (size_t)pg - 1) / (size_t)pg * (size_t)pg) {
            int fd = memfd_create("fakecuda-dmabuf", MFD_CLOEXEC);
            if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
                if (fd >= 0)
                    close(fd);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            *(int *)handle = fd;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuMemFree_v2(CUdeviceptr ptr)
{
    for (dev_alloc_t **l = &dev_allocs; *l; l = &(*l)->next)
        if ((*l)->ptr == (uintptr_t)ptr) {
            dev_alloc_t *d = *l;
            *l = d->next;
            munmap((void *)d->ptr, d->size);
            free(d);
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuCtxPushCurrent_v2(CUcontext ctx) { return ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }
API CUresult cuCtxPopCurrent_v2(CUcontext *ctx)
{
    if (ctx)
        *ctx = (CUcontext)(uintptr_t)0x1234;
    return CUDA_SUCCESS;
}
/* 8 GiB less what cuMemAlloc and cuMemCreate hold. */
API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    size_t used = 0;
    for (dev_alloc_t *d = dev_allocs; d; d = d->next)
        used += d->size;
    for (alloc_t *a = allocs; a; a = a->next)
        used += a->size;
    *total = (size_t)8 << 30;
    *free_bytes = used >= *total ? 0 : *total - used;
    return CUDA_SUCCESS;
}
API CUresult cuMemHostAlloc(void **ptr, size_t size, unsigned flags)
{
    (void)flags;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = p;
    return CUDA_SUCCESS;
}
API CUresult cuMemFreeHost(void *ptr) { return ptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t size)
{
    memmove((void *)dst, (void *)src, size);
    return CUDA_SUCCESS;
}
