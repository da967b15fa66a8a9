/*
 * HIP "driver double": a small stand-in for libamdhip64 used by the aml-hip tests.
 *
 * One source, two builds (see build.py and README.md in this folder):
 *
 *   host mode (default)            every hip* call works over ordinary host memory with real
 *                                  bookkeeping (memfd-backed "device" memory, IPC between
 *                                  processes, VMM reservations/mappings, managed-memory advice).
 *   forward mode                   -DHIPDOUBLE_FORWARD_CUDA: every hip* call is forwarded to the
 *                                  CUDA runtime (libcudart) and, for VMM, the CUDA driver (libcuda),
 *                                  the way HIP's NVIDIA platform maps hip -> cuda.
 *
 * Both modes emulate one HIP version (HIP_VERSION encoding), which changes behaviour the way the
 * real libraries differ (IPC flag value, hipMemoryType numbering, hipMemAllocationProp layout,
 * VMM shareable-handle conventions, hipGetLastError).  Constants come from
 * docs/native-abi.md (sections HIP and CUDA); this file deliberately does NOT include
 * any HIP header.
 *
 * Control API (exported, used through ctypes by the tests): hipdouble_inject, hipdouble_reset,
 * hipdouble_set_version, hipdouble_get_version, hipdouble_set_devices, hipdouble_set_attribute,
 * hipdouble_calls, hipdouble_live, hipdouble_last_call_arg, hipdouble_last_call_nargs,
 * hipdouble_mode, hipdouble_set_peer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#ifdef HIPDOUBLE_FORWARD_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

#define API __attribute__((visibility("default")))
#define UNUSED __attribute__((unused))

/* ------------------------------------------------------------------------------------------ */
/* HIP ABI (docs/native-abi.md#hip; x86-64 LP64)                                               */
/* ------------------------------------------------------------------------------------------ */

typedef int hipError_t;
typedef void *hipStream_t;
typedef void *hipEvent_t;
typedef void *hipMemGenericAllocationHandle_t;
typedef struct {
    char reserved[64];
} hipIpcMemHandle_t;

/* 1.6: 32 bytes in every version. */
typedef struct {
    int type; /* memoryType in 5.2 */
    int device;
    void *devicePointer;
    void *hostPointer;
    int isManaged;
    unsigned allocationFlags;
} hipPointerAttribute_t;

typedef struct {
    int type;
    int id;
} hipMemLocation;

typedef struct {
    hipMemLocation location;
    int flags;
} hipMemAccessDesc;

/* 1.8: hipMemAllocationProp, HIP 5.2 layout. */
typedef struct {
    unsigned char compressionType;
    hipMemLocation location;
    int requestedHandleType;
    int type;
    unsigned short usage;
    void *win32HandleMetaData;
} hipMemAllocationProp_v5_2;

/* 1.8: hipMemAllocationProp, HIP >= 5.3 layout (= CUmemAllocationProp). */
typedef struct {
    int type;
    int requestedHandleType;
    hipMemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
    } allocFlags;
} hipMemAllocationProp_v5_3;

_Static_assert(sizeof(hipIpcMemHandle_t) == 64, "ipc handle");
_Static_assert(sizeof(hipPointerAttribute_t) == 32, "pointer attributes");
_Static_assert(offsetof(hipPointerAttribute_t, isManaged) == 24, "isManaged");
_Static_assert(offsetof(hipPointerAttribute_t, allocationFlags) == 28, "allocationFlags");
_Static_assert(sizeof(hipMemAccessDesc) == 12, "access desc");
_Static_assert(sizeof(hipMemAllocationProp_v5_2) == 32, "prop 5.2");
_Static_assert(offsetof(hipMemAllocationProp_v5_2, location) == 4, "prop 5.2 location");
_Static_assert(offsetof(hipMemAllocationProp_v5_2, requestedHandleType) == 12, "prop 5.2 rht");
_Static_assert(offsetof(hipMemAllocationProp_v5_2, type) == 16, "prop 5.2 type");
_Static_assert(offsetof(hipMemAllocationProp_v5_2, usage) == 20, "prop 5.2 usage");
_Static_assert(offsetof(hipMemAllocationProp_v5_2, win32HandleMetaData) == 24, "prop 5.2 w32");
_Static_assert(sizeof(hipMemAllocationProp_v5_3) == 32, "prop 5.3");
_Static_assert(offsetof(hipMemAllocationProp_v5_3, location) == 8, "prop 5.3 location");
_Static_assert(offsetof(hipMemAllocationProp_v5_3, allocFlags) == 24, "prop 5.3 allocFlags");

/* 1.2 error codes used by the double itself. */
enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorMemoryAllocation = 2,
    hipErrorNotInitialized = 3,
    hipErrorInvalidMemcpyDirection = 21,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
    hipErrorInvalidContext = 201,
    hipErrorMapFailed = 205,
    hipErrorPeerAccessUnsupported = 217,
    hipErrorInvalidHandle = 400,
    hipErrorNotFound = 500,
    hipErrorNotReady = 600,
    hipErrorContextIsDestroyed = 709,
    hipErrorPeerAccessAlreadyEnabled = 704,
    hipErrorPeerAccessNotEnabled = 705,
    hipErrorHostMemoryAlreadyRegistered = 712,
    hipErrorHostMemoryNotRegistered = 713,
    hipErrorNotSupported = 801,
    hipErrorUnknown = 999,
};

/* 1.3 / 1.4 / 1.5 / 1.8 constants. */
#define hipCpuDeviceId (-1)
#define hipInvalidDeviceId (-2)
#define HIP_STREAM_LEGACY ((void *)1)
#define HIP_STREAM_PER_THREAD ((void *)2)

#define hipHostMallocPortable 0x1u
#define hipHostMallocMapped 0x2u
#define hipHostMallocWriteCombined 0x4u
#define hipHostMallocUncached 0x10000000u /* 7.x */
#define hipHostMallocNumaUser 0x20000000u
#define hipHostMallocCoherent 0x40000000u
#define hipHostMallocNonCoherent 0x80000000u

#define hipHostRegisterPortable 0x1u
#define hipHostRegisterMapped 0x2u
#define hipHostRegisterIoMemory 0x4u
#define hipHostRegisterReadOnly 0x8u /* == hipExtHostRegisterCoarseGrained */
#define hipExtHostRegisterUncached 0x80000000u /* 7.x */

#define hipMemAttachGlobal 0x1u
#define hipMemAttachHost 0x2u
#define hipMemAttachSingle 0x4u

#define hipStreamNonBlocking 0x1u

/* hipEventCreateWithFlags flags (Debian 5.2 hip_runtime_api.h; CLR's check in hip_event.cpp):
 * DisableTiming is the one aml passes.  Release flags are no-ops on CUDA (the header says so). */
#define hipEventBlockingSync 0x1u
#define hipEventDisableTiming 0x2u
#define hipEventInterprocess 0x4u
#define hipEventDisableSystemFence 0x20000000u /* from 5.6 (ROCm/HIP headers) */
#define hipEventReleaseToDevice 0x40000000u
#define hipEventReleaseToSystem 0x80000000u

enum {
    hipMemAdviseSetReadMostly = 1,
    hipMemAdviseUnsetReadMostly = 2,
    hipMemAdviseSetPreferredLocation = 3,
    hipMemAdviseUnsetPreferredLocation = 4,
    hipMemAdviseSetAccessedBy = 5,
    hipMemAdviseUnsetAccessedBy = 6,
    hipMemAdviseSetCoarseGrain = 100,
    hipMemAdviseUnsetCoarseGrain = 101,
};

enum {
    hipMemRangeAttributeReadMostly = 1,
    hipMemRangeAttributePreferredLocation = 2,
    hipMemRangeAttributeAccessedBy = 3,
    hipMemRangeAttributeLastPrefetchLocation = 4,
    hipMemRangeAttributeCoherencyMode = 100,
};

enum { hipMemAllocationTypePinned = 1 };
enum { hipMemHandleTypeNone = 0, hipMemHandleTypePosixFileDescriptor = 1 };
enum { hipMemLocationTypeDevice = 1 };
enum { hipMemAccessFlagsProtNone = 0, hipMemAccessFlagsProtRead = 1, hipMemAccessFlagsProtReadWrite = 3 };

/* 1.7 device attributes. */
enum {
    hipDeviceAttributeClockRate = 5,
    hipDeviceAttributeCanMapHostMemory = 3,
    hipDeviceAttributeCanUseHostPointerForRegisteredMem = 4,
    hipDeviceAttributeConcurrentManagedAccess = 9,
    hipDeviceAttributeDirectManagedMemAccessFromHost = 13,
    hipDeviceAttributeHostNativeAtomicSupported = 15,
    hipDeviceAttributeIntegrated = 16,
    hipDeviceAttributeComputeCapabilityMajor = 23,
    hipDeviceAttributeManagedMemory = 24,
    hipDeviceAttributeMaxThreadsPerBlock = 56,
    hipDeviceAttributeComputeCapabilityMinor = 61,
    hipDeviceAttributeMultiprocessorCount = 63,
    hipDeviceAttributePageableMemoryAccess = 65,
    hipDeviceAttributePageableMemoryAccessUsesHostPageTables = 66,
    hipDeviceAttributePciBusId = 67,
    hipDeviceAttributePciDeviceId = 68,
    hipDeviceAttributePciDomainID = 69,
    hipDeviceAttributeTotalGlobalMem = 84,
    hipDeviceAttributeUnifiedAddressing = 85,
    hipDeviceAttributeWarpSize = 87,
    hipDeviceAttributeMemoryPoolsSupported = 88,
    hipDeviceAttributeVirtualMemoryManagementSupported = 89, /* 6.0+ */
    hipDeviceAttributeHostRegisterSupported = 90,            /* 6.0+ */
    hipDeviceAttributeIsLargeBar = 10011,
    hipDeviceAttributeFineGrainSupport = 10016,
};

#define HIPDOUBLE_MAX_DEVICES 32
#define HIPDOUBLE_DEFAULT_VERSION_RUNTIME 60200000
#define HIPDOUBLE_GRANULARITY ((size_t)2 << 20) /* 2 MiB, minimum == recommended */
#define HIPDOUBLE_PAGE ((size_t)4096)           /* managed-memory advice granule */
#define HIPDOUBLE_MAX_ARGS 6
#define HIPDOUBLE_MAX_INJECTIONS 64

#ifndef HIPDOUBLE_BUILD_VERSION
#define HIPDOUBLE_DEFAULT_VERSION HIPDOUBLE_DEFAULT_VERSION_RUNTIME
#else
#define HIPDOUBLE_DEFAULT_VERSION HIPDOUBLE_BUILD_VERSION
#endif

/* ------------------------------------------------------------------------------------------ */
/* Function table, call statistics, fault injection                                           */
/* ------------------------------------------------------------------------------------------ */

#define HIPDOUBLE_FUNCS(X)                                                                         \
    X(hipInit)                                                                                     \
    X(hipRuntimeGetVersion)                                                                        \
    X(hipDriverGetVersion)                                                                         \
    X(hipGetDeviceCount)                                                                           \
    X(hipSetDevice)                                                                                \
    X(hipGetDevice)                                                                                \
    X(hipDeviceGetAttribute)                                                                       \
    X(hipDeviceGetName)                                                                            \
    X(hipDeviceTotalMem)                                                                           \
    X(hipMemGetInfo)                                                                               \
    X(hipDeviceSynchronize)                                                                        \
    X(hipMalloc)                                                                                   \
    X(hipExtMallocWithFlags)                                                                       \
    X(hipFree)                                                                                     \
    X(hipHostMalloc)                                                                               \
    X(hipExtHostAlloc)                                                                             \
    X(hipHostAlloc)                                                                                \
    X(hipHostFree)                                                                                 \
    X(hipFreeHost)                                                                                 \
    X(hipHostRegister)                                                                             \
    X(hipHostUnregister)                                                                           \
    X(hipHostGetDevicePointer)                                                                     \
    X(hipHostGetFlags)                                                                             \
    X(hipMallocManaged)                                                                            \
    X(hipMemAdvise)                                                                                \
    X(hipMemPrefetchAsync)                                                                         \
    X(hipMemRangeGetAttribute)                                                                     \
    X(hipMemRangeGetAttributes)                                                                    \
    X(hipStreamAttachMemAsync)                                                                     \
    X(hipStreamCreate)                                                                             \
    X(hipStreamCreateWithFlags)                                                                    \
    X(hipStreamDestroy)                                                                            \
    X(hipStreamSynchronize)                                                                        \
    X(hipMallocAsync)                                                                              \
    X(hipFreeAsync)                                                                                \
    X(hipEventCreateWithFlags)                                                                     \
    X(hipEventDestroy)                                                                             \
    X(hipEventRecord)                                                                              \
    X(hipEventQuery)                                                                               \
    X(hipEventSynchronize)                                                                         \
    X(hipStreamWaitEvent)                                                                          \
    X(hipMemcpy)                                                                                   \
    X(hipMemcpyPeer)                                                                               \
    X(hipDeviceCanAccessPeer)                                                                      \
    X(hipDeviceEnablePeerAccess)                                                                   \
    X(hipDeviceDisablePeerAccess)                                                                  \
    X(hipMemset)                                                                                   \
    X(hipIpcGetMemHandle)                                                                          \
    X(hipIpcOpenMemHandle)                                                                         \
    X(hipIpcCloseMemHandle)                                                                        \
    X(hipMemGetAddressRange)                                                                       \
    X(hipPointerGetAttributes)                                                                     \
    X(hipGetErrorName)                                                                             \
    X(hipGetErrorString)                                                                           \
    X(hipGetLastError)                                                                             \
    X(hipPeekAtLastError)                                                                          \
    X(hipMemAddressReserve)                                                                        \
    X(hipMemAddressFree)                                                                           \
    X(hipMemCreate)                                                                                \
    X(hipMemRelease)                                                                               \
    X(hipMemMap)                                                                                   \
    X(hipMemUnmap)                                                                                 \
    X(hipMemSetAccess)                                                                             \
    X(hipMemGetAccess)                                                                             \
    X(hipMemExportToShareableHandle)                                                               \
    X(hipMemImportFromShareableHandle)                                                             \
    X(hipMemRetainAllocationHandle)                                                                \
    X(hipMemGetAllocationPropertiesFromHandle)                                                     \
    X(hipMemGetAllocationGranularity)

enum {
#define X(n) FN_##n,
    HIPDOUBLE_FUNCS(X)
#undef X
        FN_COUNT
};

static const char *const g_fn_names[FN_COUNT] = {
#define X(n) #n,
    HIPDOUBLE_FUNCS(X)
#undef X
};

struct fnstat {
    long calls;
    int nargs; /* -1: never called */
    long long args[HIPDOUBLE_MAX_ARGS];
};

struct injection {
    int active;
    int fn;
    int error;
    long skip;
    long times; /* -1: forever */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fnstat g_stats[FN_COUNT];
static struct injection g_inj[HIPDOUBLE_MAX_INJECTIONS];

/* configuration */
static int g_version = HIPDOUBLE_DEFAULT_VERSION;
static int g_ndev = 1;
static size_t g_devmem = (size_t)1 << 30;
static unsigned g_gen = 1; /* bumped on reset / set_devices: invalidates per-thread device */

struct attr_override {
    int attr;
    int value;
};
static struct attr_override g_attr_over[64];
static int g_nattr_over;

/* Peer access: pairs (device, peer) enabled through the double (the "peer" live count; reset
 * disables them), and, host mode, pairs without a peer path (hipdouble_set_peer). */
static unsigned char g_peer_on[HIPDOUBLE_MAX_DEVICES][HIPDOUBLE_MAX_DEVICES];
UNUSED static unsigned char g_peer_off[HIPDOUBLE_MAX_DEVICES][HIPDOUBLE_MAX_DEVICES];

UNUSED static __thread int t_dev;
UNUSED static __thread unsigned t_dev_gen;
static __thread int t_last_error;

static void dbl_lock(void) { pthread_mutex_lock(&g_lock); }
static void dbl_unlock(void) { pthread_mutex_unlock(&g_lock); }

static int version_get(void) { return __atomic_load_n(&g_version, __ATOMIC_RELAXED); }
static int ver_ge(int major, int minor) { return version_get() >= major * 10000000 + minor * 100000; }
static int ver_is_60_61(void) { return ver_ge(6, 0) && !ver_ge(6, 2); }

static int fn_index(const char *name)
{
    if (name == NULL)
        return -1;
    for (int i = 0; i < FN_COUNT; i++)
        if (strcmp(g_fn_names[i], name) == 0)
            return i;
    return -1;
}

/* Record the call; returns 1 (and *err) when an injection fires. */
static int dbl_enter(int fn, int nargs, const long long *args, int *err)
{
    int fired = 0;
    dbl_lock();
    struct fnstat *s = &g_stats[fn];
    s->calls++;
    if (nargs > HIPDOUBLE_MAX_ARGS)
        nargs = HIPDOUBLE_MAX_ARGS;
    s->nargs = nargs;
    memset(s->args, 0, sizeof s->args);
    for (int i = 0; i < nargs; i++)
        s->args[i] = args[i];
    for (int i = 0; i < HIPDOUBLE_MAX_INJECTIONS; i++) {
        struct injection *in = &g_inj[i];
        if (!in->active || in->fn != fn)
            continue;
        if (in->skip > 0) {
            in->skip--;
            continue;
        }
        if (fired)
            continue;
        fired = 1;
        *err = in->error;
        if (in->times > 0 && --in->times == 0)
            in->active = 0;
    }
    dbl_unlock();
    return fired;
}

/* Every hip* call that returns hipError_t returns through here (last-error bookkeeping). */
static hipError_t dbl_leave(hipError_t err)
{
    /* 1.10: up to 6.x hipGetLastError returns the last call's result; 7.x the last real error. */
    if (err != hipSuccess || !ver_ge(7, 0))
        t_last_error = err;
    return err;
}

#define A_P(x) ((long long)(intptr_t)(x))
#define A_U(x) ((long long)(x))
#define A_I(x) ((long long)(x))
#define A_UI(x) ((long long)(unsigned int)(x))

#define ENTER(fn, ...)                                                                             \
    do {                                                                                           \
        int inj_;                                                                                  \
        const long long a_[] = {__VA_ARGS__};                                                     \
        if (dbl_enter(FN_##fn, (int)(sizeof a_ / sizeof a_[0]), a_, &inj_))                        \
            return dbl_leave(inj_);                                                                \
    } while (0)

#define ENTER0(fn)                                                                                 \
    do {                                                                                           \
        int inj_;                                                                                  \
        if (dbl_enter(FN_##fn, 0, NULL, &inj_))                                                    \
            return dbl_leave(inj_);                                                                \
    } while (0)

#ifndef HIPDOUBLE_FORWARD_CUDA
/* host mode: the whole implementation runs under the table lock */
#define BODY(call)                                                                                 \
    do {                                                                                           \
        hipError_t r_;                                                                             \
        dbl_lock();                                                                                \
        r_ = (call);                                                                               \
        dbl_unlock();                                                                              \
        return dbl_leave(r_);                                                                      \
    } while (0)
#else
/* forward mode: implementations lock only around bookkeeping, never across CUDA calls */
#define BODY(call) return dbl_leave(call)
#endif

/* ------------------------------------------------------------------------------------------ */
/* Error names (1.2 and the 5.2 header enum)                                                   */
/* ------------------------------------------------------------------------------------------ */

struct errname {
    int code;
    const char *name;
    const char *text;
};

static const struct errname g_errors[] = {
    {0, "hipSuccess", "no error"},
    {1, "hipErrorInvalidValue", "invalid argument"},
    {2, "hipErrorOutOfMemory", "out of memory"},
    {3, "hipErrorNotInitialized", "initialization error"},
    {4, "hipErrorDeinitialized", "driver shutting down"},
    {5, "hipErrorProfilerDisabled", "profiler disabled while using external profiling tool"},
    {6, "hipErrorProfilerNotInitialized", "profiler is not initialized"},
    {7, "hipErrorProfilerAlreadyStarted", "profiler already started"},
    {8, "hipErrorProfilerAlreadyStopped", "profiler already stopped"},
    {9, "hipErrorInvalidConfiguration", "invalid configuration argument"},
    {12, "hipErrorInvalidPitchValue", "invalid pitch argument"},
    {13, "hipErrorInvalidSymbol", "invalid device symbol"},
    {17, "hipErrorInvalidDevicePointer", "invalid device pointer"},
    {21, "hipErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {35, "hipErrorInsufficientDriver", "driver version is insufficient for runtime version"},
    {52, "hipErrorMissingConfiguration", "__global__ function call is not configured"},
    {53, "hipErrorPriorLaunchFailure", "unspecified launch failure in prior launch"},
    {98, "hipErrorInvalidDeviceFunction", "invalid device function"},
    {100, "hipErrorNoDevice", "no ROCm-capable device is detected"},
    {101, "hipErrorInvalidDevice", "invalid device ordinal"},
    {200, "hipErrorInvalidImage", "device kernel image is invalid"},
    {201, "hipErrorInvalidContext", "invalid device context"},
    {202, "hipErrorContextAlreadyCurrent", "context is already current context"},
    {205, "hipErrorMapFailed", "mapping of buffer object failed"},
    {206, "hipErrorUnmapFailed", "unmapping of buffer object failed"},
    {207, "hipErrorArrayIsMapped", "array is mapped"},
    {208, "hipErrorAlreadyMapped", "resource already mapped"},
    {209, "hipErrorNoBinaryForGpu", "no kernel image is available for execution on the device"},
    {210, "hipErrorAlreadyAcquired", "resource already acquired"},
    {211, "hipErrorNotMapped", "resource not mapped"},
    {212, "hipErrorNotMappedAsArray", "resource not mapped as array"},
    {213, "hipErrorNotMappedAsPointer", "resource not mapped as pointer"},
    {214, "hipErrorECCNotCorrectable", "uncorrectable ECC error encountered"},
    {215, "hipErrorUnsupportedLimit", "limit is not supported on this architecture"},
    {216, "hipErrorContextAlreadyInUse", "exclusive-thread device already in use by a different thread"},
    {217, "hipErrorPeerAccessUnsupported", "peer access is not supported between these two devices"},
    {218, "hipErrorInvalidKernelFile", "invalid kernel file"},
    {219, "hipErrorInvalidGraphicsContext", "invalid OpenGL or DirectX context"},
    {300, "hipErrorInvalidSource", "device kernel image is invalid"},
    {301, "hipErrorFileNotFound", "file not found"},
    {302, "hipErrorSharedObjectSymbolNotFound", "shared object symbol not found"},
    {303, "hipErrorSharedObjectInitFailed", "shared object initialization failed"},
    {304, "hipErrorOperatingSystem", "OS call failed or operation not supported on this OS"},
    {400, "hipErrorInvalidHandle", "invalid resource handle"},
    {401, "hipErrorIllegalState", "the operation cannot be performed in the present state"},
    {500, "hipErrorNotFound", "named symbol not found"},
    {600, "hipErrorNotReady", "device not ready"},
    {700, "hipErrorIllegalAddress", "an illegal memory access was encountered"},
    {701, "hipErrorLaunchOutOfResources", "too many resources requested for launch"},
    {702, "hipErrorLaunchTimeOut", "the launch timed out and was terminated"},
    {704, "hipErrorPeerAccessAlreadyEnabled", "peer access is already enabled"},
    {705, "hipErrorPeerAccessNotEnabled", "peer access has not been enabled"},
    {708, "hipErrorSetOnActiveProcess", "cannot set while device is active in this process"},
    {709, "hipErrorContextIsDestroyed", "context is destroyed"},
    {710, "hipErrorAssert", "device-side assert triggered"},
    {712, "hipErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {713, "hipErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {719, "hipErrorLaunchFailure", "unspecified launch failure"},
    {720, "hipErrorCooperativeLaunchTooLarge", "too many blocks in cooperative launch"},
    {801, "hipErrorNotSupported", "operation not supported"},
    {900, "hipErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"},
    {901, "hipErrorStreamCaptureInvalidated", "operation failed due to a previous error during capture"},
    {902, "hipErrorStreamCaptureMerge", "operation would result in a merge of separate capture sequences"},
    {903, "hipErrorStreamCaptureUnmatched", "capture was not ended in the same stream as it began"},
    {904, "hipErrorStreamCaptureUnjoined", "capturing stream has unjoined work"},
    {905, "hipErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {906, "hipErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {907, "hipErrorCapturedEvent", "operation not permitted on an event last recorded in a capturing stream"},
    {908, "hipErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {910, "hipErrorGraphExecUpdateFailure", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"},
    {999, "hipErrorUnknown", "unknown error"},
    {1052, "hipErrorRuntimeMemory", "runtime memory call returned error"},
    {1053, "hipErrorRuntimeOther", "runtime call other than memory returned error"},
};

static const struct errname *err_lookup(int code)
{
    static const struct errname tbd = {1054, "hipErrorTbd", "marker that more error codes are needed"};
    static const struct errname cluster = {1054, "hipErrorInvalidClusterSize", "invalid cluster size"};
    static const struct errname tbd7 = {1055, "hipErrorTbd", "marker that more error codes are needed"};
    if (code == 1054)
        return ver_ge(7, 0) ? &cluster : &tbd;
    if (code == 1055 && ver_ge(7, 0))
        return &tbd7;
    for (size_t i = 0; i < sizeof g_errors / sizeof g_errors[0]; i++)
        if (g_errors[i].code == code)
            return &g_errors[i];
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Bookkeeping shared by both modes                                                           */
/* ------------------------------------------------------------------------------------------ */

enum akind { K_DEVICE = 0, K_HOST, K_MANAGED, K_REGISTERED, K_IPC, K_COUNT };
static const char *const g_kind_names[K_COUNT] = {"device", "host", "managed", "registered", "ipc"};

struct mstate {
    uint64_t accessed; /* bit 0: CPU (-1), bit d+1: device d */
    int preferred;     /* device, -1 CPU, -2 none */
    int prefetch;      /* last prefetch location, -2 none */
    unsigned char read_mostly;
    unsigned char coarse;
};

struct mseg { /* managed-memory state over pages [start, end) */
    size_t start, end;
    struct mstate st;
};

struct alloc {
    struct alloc *next;
    uintptr_t base;
    size_t size;
    size_t maplen;
    int kind;
    int device;
    unsigned flags;
    uint64_t id;
    int fd;       /* host mode device allocations: the memfd */
    long refs;    /* ipc imports opened more than once */
    pid_t ipc_pid;
    uint64_t ipc_id;
    struct mseg *segs; /* managed */
    size_t nsegs, capsegs;
    int async;   /* device memory of hipMallocAsync */
    int pending; /* host mode: a hipFreeAsync is queued on a stream, not run yet */
};

struct vhandle {
    struct vhandle *next;
    int fd; /* host mode */
    size_t size;
    int device;
    int htype;
    long refs;
    long maps;
    int imported;
    uint64_t id;
    unsigned long long cu; /* forward mode: CUmemGenericAllocationHandle */
};

struct vmap {
    struct vmap *next;
    uintptr_t addr;
    size_t size;
    struct vhandle *h;
    unsigned char access[HIPDOUBLE_MAX_DEVICES];
};

struct vres {
    struct vres *next;
    uintptr_t base;
    size_t size;
};

struct sop;

struct dstream {
    struct dstream *next;
    void *handle; /* value handed out: the struct itself (host) or the cudaStream_t (forward) */
    unsigned flags;
    int device;
    /* host mode: the stream's queue (see "Streams and events" in README.md) */
    unsigned long long submitted; /* operations enqueued so far */
    unsigned long long completed; /* of which this many ran */
    struct sop *ops;              /* queued, oldest first */
};

struct devent {
    struct devent *next;
    void *handle; /* value handed out: the struct itself (host) or the cudaEvent_t (forward) */
    unsigned flags;
    int device;
    /* host mode: where it was last recorded (NULL: never, or on a stream destroyed since) */
    struct dstream *stream;
    unsigned long long seq; /* the stream's `submitted` when recorded */
};

static struct alloc *g_allocs;
static struct vhandle *g_vhandles;
static struct vmap *g_vmaps;
static struct vres *g_vres;
static struct dstream *g_streams;
static struct devent *g_events;
UNUSED static size_t g_dev_used[HIPDOUBLE_MAX_DEVICES];
static uint64_t g_next_id = 1;

#ifdef HIPDOUBLE_FORWARD_CUDA
static int fw_ndev(void);
static int devid_ok(int d) { return d >= 0 && d < HIPDOUBLE_MAX_DEVICES && d < fw_ndev(); }
#else
static int devid_ok(int d) { return d >= 0 && d < g_ndev; }
#endif

UNUSED static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static struct alloc *alloc_find(const void *p) /* the allocation containing p */
{
    uintptr_t a = (uintptr_t)p;
    for (struct alloc *x = g_allocs; x; x = x->next)
        if (a >= x->base && a - x->base < x->size)
            return x;
    return NULL;
}

static struct alloc *alloc_new(int kind, uintptr_t base, size_t size)
{
    struct alloc *a = calloc(1, sizeof *a);
    if (a == NULL)
        return NULL;
    a->kind = kind;
    a->base = base;
    a->size = size;
    a->maplen = size;
    a->fd = -1;
    a->refs = 1;
    a->id = g_next_id++;
    a->next = g_allocs;
    g_allocs = a;
    return a;
}

static void alloc_unlink(struct alloc *a)
{
    for (struct alloc **pp = &g_allocs; *pp; pp = &(*pp)->next)
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    free(a->segs);
    free(a);
}

#ifndef HIPDOUBLE_FORWARD_CUDA
static int managed_init_segs(struct alloc *a)
{
    a->capsegs = 4;
    a->segs = calloc(a->capsegs, sizeof *a->segs);
    if (a->segs == NULL)
        return -1;
    a->nsegs = 1;
    a->segs[0].start = 0;
    a->segs[0].end = round_up(a->size, HIPDOUBLE_PAGE) / HIPDOUBLE_PAGE;
    a->segs[0].st.preferred = hipInvalidDeviceId;
    a->segs[0].st.prefetch = hipInvalidDeviceId;
    return 0;
}
#endif

static struct vhandle *vh_find(const void *h)
{
    for (struct vhandle *x = g_vhandles; x; x = x->next) {
#ifdef HIPDOUBLE_FORWARD_CUDA
        if ((uintptr_t)x->cu == (uintptr_t)h && x->refs > 0)
            return x;
#else
        if ((const void *)x == h && x->refs > 0)
            return x;
#endif
    }
    return NULL;
}

UNUSED static struct vmap *vmap_find(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    for (struct vmap *m = g_vmaps; m; m = m->next)
        if (a >= m->addr && a - m->addr < m->size)
            return m;
    return NULL;
}

UNUSED static struct vres *vres_find(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    for (struct vres *r = g_vres; r; r = r->next)
        if (a >= r->base && a - r->base < r->size)
            return r;
    return NULL;
}

static struct dstream *stream_find(const void *s)
{
    for (struct dstream *x = g_streams; x; x = x->next)
        if (x->handle == s)
            return x;
    return NULL;
}

static int stream_ok(const void *s) /* lock held */
{
    return s == NULL || s == HIP_STREAM_LEGACY || s == HIP_STREAM_PER_THREAD || stream_find(s) != NULL;
}

static struct devent *event_find(const void *e)
{
    if (e == NULL)
        return NULL;
    for (struct devent *x = g_events; x; x = x->next)
        if (x->handle == e)
            return x;
    return NULL;
}

static void event_unlink(struct devent *e)
{
    for (struct devent **pp = &g_events; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    free(e);
}

/* CLR (hip_event.cpp): known bits only, at most one of the release flags (DisableSystemFence
 * counts as one), Interprocess needs DisableTiming */
static int event_flags_ok(unsigned flags)
{
    unsigned release = hipEventReleaseToDevice | hipEventReleaseToSystem;
    if (ver_ge(5, 6))
        release |= hipEventDisableSystemFence;
    unsigned known = hipEventBlockingSync | hipEventDisableTiming | hipEventInterprocess | release;
    if (flags & ~known)
        return 0;
    unsigned r = flags & release;
    if (r & (r - 1))
        return 0;
    if ((flags & hipEventInterprocess) && !(flags & hipEventDisableTiming))
        return 0;
    return 1;
}

static void stream_unlink(struct dstream *s)
{
    for (struct dstream **pp = &g_streams; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    free(s);
}

static void vmap_unlink(struct vmap *m)
{
    for (struct vmap **pp = &g_vmaps; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    free(m);
}

static void vres_unlink(struct vres *r)
{
    for (struct vres **pp = &g_vres; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    free(r);
}

static void vh_destroy(struct vhandle *h); /* mode specific */

static void vh_maybe_free(struct vhandle *h)
{
    if (h->refs > 0 || h->maps > 0)
        return;
    for (struct vhandle **pp = &g_vhandles; *pp; pp = &(*pp)->next)
        if (*pp == h) {
            *pp = h->next;
            break;
        }
    vh_destroy(h);
    free(h);
}

/* memory-type numbering per emulated version (1.6) */
static int mt_host(void) { return ver_ge(6, 0) ? 1 : 0; }
static int mt_device(void) { return ver_ge(6, 0) ? 2 : 1; }
static int mt_managed(void)
{
    if (ver_ge(6, 0))
        return 3; /* hipMemoryTypeManaged */
    if (ver_ge(5, 3))
        return 4; /* 5.3 .. 5.7 hipMemoryTypeManaged */
    return 3;     /* 5.2: hipMemoryTypeUnified, isManaged = 1 */
}

/* hipMemAllocationProp in the emulated version's layout (1.8) */
struct pprop {
    int type;
    int htype;
    int loc_type;
    int loc_id;
};

static void prop_read(const void *p, struct pprop *o)
{
    if (!ver_ge(5, 3)) {
        const hipMemAllocationProp_v5_2 *q = p;
        o->type = q->type;
        o->htype = q->requestedHandleType;
        o->loc_type = q->location.type;
        o->loc_id = q->location.id;
    } else {
        const hipMemAllocationProp_v5_3 *q = p;
        o->type = q->type;
        o->htype = q->requestedHandleType;
        o->loc_type = q->location.type;
        o->loc_id = q->location.id;
    }
}

static void prop_write(void *p, const struct pprop *o)
{
    memset(p, 0, 32);
    if (!ver_ge(5, 3)) {
        hipMemAllocationProp_v5_2 *q = p;
        q->type = o->type;
        q->requestedHandleType = o->htype;
        q->location.type = o->loc_type;
        q->location.id = o->loc_id;
    } else {
        hipMemAllocationProp_v5_3 *q = p;
        q->type = o->type;
        q->requestedHandleType = o->htype;
        q->location.type = o->loc_type;
        q->location.id = o->loc_id;
    }
}

/* Host-mode and forward-mode validation of a VMM prop (CLR constraints, 1.8). */
static hipError_t prop_check(const struct pprop *pp)
{
    if (pp->type != hipMemAllocationTypePinned)
        return hipErrorInvalidValue;
    if (pp->loc_type != hipMemLocationTypeDevice || !devid_ok(pp->loc_id))
        return hipErrorInvalidValue;
    return hipSuccess;
}

static int host_flags_ok(unsigned flags)
{
    unsigned allowed = hipHostMallocPortable | hipHostMallocMapped | hipHostMallocWriteCombined |
                       hipHostMallocNumaUser | hipHostMallocCoherent | hipHostMallocNonCoherent;
    if (ver_ge(7, 0))
        allowed |= hipHostMallocUncached;
    if (flags & ~allowed)
        return 0;
    if ((flags & hipHostMallocCoherent) && (flags & hipHostMallocNonCoherent))
        return 0;
    return 1;
}

static int register_flags_ok(unsigned flags)
{
    unsigned allowed = hipHostRegisterPortable | hipHostRegisterMapped | hipHostRegisterIoMemory |
                       hipHostRegisterReadOnly;
    if (ver_ge(7, 0))
        allowed |= hipExtHostRegisterUncached;
    return (flags & ~allowed) == 0;
}

/* 1.4: hipIpcMemLazyEnablePeerAccess is 0 before 6.0 and 1 from 6.0 on. */
static int ipc_flags_ok(unsigned flags) { return ver_ge(6, 0) ? flags == 1u : flags == 0u; }

static int attr_override_get(int attr, int *value)
{
    for (int i = 0; i < g_nattr_over; i++)
        if (g_attr_over[i].attr == attr) {
            *value = g_attr_over[i].value;
            return 1;
        }
    return 0;
}

/* A 4-byte read that cannot fault (used to dereference caller-supplied int* handles). */
static int safe_read_int(const void *p, int *out)
{
    if ((uintptr_t)p < 4096)
        return -1;
    struct iovec local = {out, sizeof *out};
    struct iovec remote = {(void *)(uintptr_t)p, sizeof *out};
    ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (n == (ssize_t)sizeof *out)
        return 0;
    if (n < 0 && (errno == ENOSYS || errno == EPERM)) {
        /* fall back to checking that the page is mapped */
        uintptr_t pg = (uintptr_t)p & ~(uintptr_t)4095;
        if (msync((void *)pg, 4096, MS_ASYNC) != 0)
            return -1;
        memcpy(out, p, sizeof *out);
        return 0;
    }
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Managed-memory state (host mode keeps it; forward mode lets CUDA keep it)                   */
/* ------------------------------------------------------------------------------------------ */
#ifndef HIPDOUBLE_FORWARD_CUDA

static int mseg_split(struct alloc *a, size_t p)
{
    for (size_t i = 0; i < a->nsegs; i++) {
        struct mseg *s = &a->segs[i];
        if (s->start < p && p < s->end) {
            if (a->nsegs == a->capsegs) {
                size_t nc = a->capsegs * 2;
                struct mseg *n = realloc(a->segs, nc * sizeof *n);
                if (n == NULL)
                    return -1;
                a->segs = n;
                a->capsegs = nc;
                s = &a->segs[i];
            }
            memmove(&a->segs[i + 2], &a->segs[i + 1], (a->nsegs - i - 1) * sizeof *s);
            a->segs[i + 1] = *s;
            s->end = p;
            a->segs[i + 1].start = p;
            a->nsegs++;
            return 0;
        }
    }
    return 0;
}

static void mseg_merge(struct alloc *a)
{
    size_t w = 0;
    for (size_t i = 1; i < a->nsegs; i++) {
        if (memcmp(&a->segs[w].st, &a->segs[i].st, sizeof(struct mstate)) == 0)
            a->segs[w].end = a->segs[i].end;
        else
            a->segs[++w] = a->segs[i];
    }
    a->nsegs = a->nsegs ? w + 1 : 0;
}

/* Page range [*p0, *p1) of a managed allocation covering [ptr, ptr+count); rounded like CUDA. */
static hipError_t managed_range(const void *ptr, size_t count, struct alloc **out, size_t *p0,
                                size_t *p1)
{
    if (ptr == NULL || count == 0)
        return hipErrorInvalidValue;
    struct alloc *a = alloc_find(ptr);
    if (a == NULL || a->kind != K_MANAGED)
        return hipErrorInvalidValue;
    uintptr_t off = (uintptr_t)ptr - a->base;
    if (count > a->size - off)
        return hipErrorInvalidValue;
    *out = a;
    *p0 = off / HIPDOUBLE_PAGE;
    *p1 = round_up(off + count, HIPDOUBLE_PAGE) / HIPDOUBLE_PAGE;
    return hipSuccess;
}

static uint64_t loc_bit(int dev) { return (uint64_t)1 << (dev + 1); }

static hipError_t managed_advise(const void *ptr, size_t count, int advice, int device)
{
    struct alloc *a;
    size_t p0, p1;
    hipError_t e = managed_range(ptr, count, &a, &p0, &p1);
    if (e != hipSuccess)
        return e;
    switch (advice) {
    case hipMemAdviseSetReadMostly:
    case hipMemAdviseUnsetReadMostly:
    case hipMemAdviseSetPreferredLocation:
    case hipMemAdviseUnsetPreferredLocation:
    case hipMemAdviseSetAccessedBy:
    case hipMemAdviseUnsetAccessedBy:
    case hipMemAdviseSetCoarseGrain:
    case hipMemAdviseUnsetCoarseGrain:
        break;
    default:
        return hipErrorInvalidValue;
    }
    /* CLR (hip_hmm.cpp) rejects a device that is neither hipCpuDeviceId nor a valid ordinal,
     * whatever the advice. */
    if (device != hipCpuDeviceId && !devid_ok(device))
        return hipErrorInvalidValue;
    if (mseg_split(a, p0) != 0 || mseg_split(a, p1) != 0)
        return hipErrorOutOfMemory;
    for (size_t i = 0; i < a->nsegs; i++) {
        struct mseg *s = &a->segs[i];
        if (s->start < p0 || s->end > p1)
            continue;
        switch (advice) {
        case hipMemAdviseSetReadMostly: s->st.read_mostly = 1; break;
        case hipMemAdviseUnsetReadMostly: s->st.read_mostly = 0; break;
        case hipMemAdviseSetPreferredLocation: s->st.preferred = device; break;
        case hipMemAdviseUnsetPreferredLocation: s->st.preferred = hipInvalidDeviceId; break;
        case hipMemAdviseSetAccessedBy: s->st.accessed |= loc_bit(device); break;
        case hipMemAdviseUnsetAccessedBy: s->st.accessed &= ~loc_bit(device); break;
        case hipMemAdviseSetCoarseGrain: s->st.coarse = 1; break;
        case hipMemAdviseUnsetCoarseGrain: s->st.coarse = 0; break;
        default: break;
        }
    }
    mseg_merge(a);
    return hipSuccess;
}

static hipError_t managed_prefetch(const void *ptr, size_t count, int device)
{
    struct alloc *a;
    size_t p0, p1;
    hipError_t e = managed_range(ptr, count, &a, &p0, &p1);
    if (e != hipSuccess)
        return e;
    if (mseg_split(a, p0) != 0 || mseg_split(a, p1) != 0)
        return hipErrorOutOfMemory;
    for (size_t i = 0; i < a->nsegs; i++) {
        struct mseg *s = &a->segs[i];
        if (s->start >= p0 && s->end <= p1)
            s->st.prefetch = device;
    }
    mseg_merge(a);
    return hipSuccess;
}

static hipError_t managed_range_attr(void *data, size_t data_size, int attribute, const void *ptr,
                                     size_t count)
{
    if (data == NULL)
        return hipErrorInvalidValue;
    struct alloc *a;
    size_t p0, p1;
    hipError_t e = managed_range(ptr, count, &a, &p0, &p1);
    if (e != hipSuccess)
        return e;
    if (attribute == hipMemRangeAttributeAccessedBy) {
        if (data_size == 0 || data_size % 4 != 0)
            return hipErrorInvalidValue;
    } else if (attribute == hipMemRangeAttributeReadMostly ||
               attribute == hipMemRangeAttributePreferredLocation ||
               attribute == hipMemRangeAttributeLastPrefetchLocation ||
               attribute == hipMemRangeAttributeCoherencyMode) {
        if (data_size != 4)
            return hipErrorInvalidValue;
    } else {
        return hipErrorInvalidValue;
    }
    int all_rm = 1, pref = 0, pf = 0, first = 1, n_coarse = 0, n_seg = 0;
    uint64_t acc = ~(uint64_t)0;
    for (size_t i = 0; i < a->nsegs; i++) {
        const struct mseg *s = &a->segs[i];
        if (s->end <= p0 || s->start >= p1)
            continue;
        n_seg++;
        if (!s->st.read_mostly)
            all_rm = 0;
        if (s->st.coarse)
            n_coarse++;
        acc &= s->st.accessed;
        if (first) {
            pref = s->st.preferred;
            pf = s->st.prefetch;
            first = 0;
        } else {
            if (pref != s->st.preferred)
                pref = hipInvalidDeviceId;
            if (pf != s->st.prefetch)
                pf = hipInvalidDeviceId;
        }
    }
    int *out = data;
    switch (attribute) {
    case hipMemRangeAttributeReadMostly: *out = all_rm; break;
    case hipMemRangeAttributePreferredLocation: *out = pref; break;
    case hipMemRangeAttributeLastPrefetchLocation: *out = pf; break;
    case hipMemRangeAttributeCoherencyMode:
        *out = n_coarse == 0 ? 0 : (n_coarse == n_seg ? 1 : 2);
        break;
    case hipMemRangeAttributeAccessedBy: {
        size_t n = data_size / 4, k = 0;
        for (int d = 0; d < HIPDOUBLE_MAX_DEVICES && k < n; d++) /* devices, then the CPU (CUDA) */
            if (acc & loc_bit(d))
                out[k++] = d;
        if (k < n && (acc & loc_bit(hipCpuDeviceId)))
            out[k++] = hipCpuDeviceId;
        for (; k < n; k++)
            out[k] = hipInvalidDeviceId;
        break;
    }
    default: break;
    }
    return hipSuccess;
}

#endif /* !HIPDOUBLE_FORWARD_CUDA (managed-memory state) */

/* ========================================================================================== */
#ifndef HIPDOUBLE_FORWARD_CUDA
/* ========================================================================================== */
/* HOST MODE                                                                                  */
/* ========================================================================================== */

static const char *const g_mode = "host";

#define NEED_DEVICE()                                                                              \
    do {                                                                                           \
        if (g_ndev <= 0)                                                                           \
            return hipErrorInvalidDevice; /* 1.11: the 5.2 library without a GPU */               \
    } while (0)

static int cur_dev(void)
{
    if (t_dev_gen != g_gen) {
        t_dev = 0;
        t_dev_gen = g_gen;
    }
    return t_dev;
}

/* check that [p, p+n) of plain host memory is mapped (no fault on access) */
static int host_range_mapped(const void *p, size_t n)
{
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095;
    uintptr_t e = (uintptr_t)p + n;
    if (e < (uintptr_t)p)
        return 0;
    return msync((void *)a, e - a, MS_ASYNC) == 0;
}

/* memfd name / staleness check (IPC and VMM) */
static int memfd_name_matches(int fd, const char *name)
{
    char path[64], link[256];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n < 0)
        return 0;
    link[n] = 0;
    size_t ln = strlen(name);
    if (strncmp(link, "/memfd:", 7) != 0 || strncmp(link + 7, name, ln) != 0)
        return 0;
    return link[7 + ln] == 0 || link[7 + ln] == ' ';
}

static void vh_destroy(struct vhandle *h)
{
    if (h->fd >= 0)
        close(h->fd);
    if (!h->imported && devid_ok(h->device) && g_dev_used[h->device] >= h->size)
        g_dev_used[h->device] -= h->size;
}

static size_t dev_free(int d) /* budget left on device d (0 if the budget was lowered below use) */
{
    return g_dev_used[d] >= g_devmem ? 0 : g_devmem - g_dev_used[d];
}

static void alloc_release(struct alloc *a)
{
    if (a->base && a->maplen)
        munmap((void *)a->base, a->maplen);
    if (a->fd >= 0)
        close(a->fd);
    if ((a->kind == K_DEVICE) && a->device >= 0 && a->device < HIPDOUBLE_MAX_DEVICES &&
        g_dev_used[a->device] >= a->size)
        g_dev_used[a->device] -= a->size;
    alloc_unlink(a);
}

static void streams_drop_all(void); /* below, with the streams */

static void release_all(void)
{
    streams_drop_all(); /* queued frees are forgotten: every allocation is released below */
    while (g_events)
        event_unlink(g_events);
    while (g_vmaps) {
        struct vmap *m = g_vmaps;
        mmap((void *)m->addr, m->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
             -1, 0);
        m->h->maps--;
        vmap_unlink(m);
    }
    while (g_vhandles) {
        struct vhandle *h = g_vhandles;
        g_vhandles = h->next;
        vh_destroy(h);
        free(h);
    }
    while (g_vres) {
        munmap((void *)g_vres->base, g_vres->size);
        vres_unlink(g_vres);
    }
    while (g_allocs) {
        struct alloc *a = g_allocs;
        if (a->kind == K_REGISTERED)
            a->maplen = 0; /* not ours to unmap */
        alloc_release(a);
    }
    while (g_streams)
        stream_unlink(g_streams);
    memset(g_dev_used, 0, sizeof g_dev_used);
    memset(g_peer_on, 0, sizeof g_peer_on);
}

/* ---------------- device management ---------------- */

static hipError_t impl_hipInit(unsigned flags)
{
    if (g_ndev <= 0)
        return hipErrorInvalidDevice; /* 1.11 */
    return flags == 0 ? hipSuccess : hipErrorInvalidValue;
}

static hipError_t impl_hipGetDeviceCount(int *count)
{
    if (count == NULL)
        return hipErrorInvalidValue;
    *count = g_ndev > 0 ? g_ndev : 0;
    return g_ndev > 0 ? hipSuccess : hipErrorNoDevice;
}

static hipError_t impl_hipSetDevice(int id)
{
    NEED_DEVICE();
    if (!devid_ok(id))
        return hipErrorInvalidDevice;
    cur_dev();
    t_dev = id;
    return hipSuccess;
}

static hipError_t impl_hipGetDevice(int *id)
{
    NEED_DEVICE();
    if (id == NULL)
        return hipErrorInvalidValue;
    *id = cur_dev();
    return hipSuccess;
}

static hipError_t impl_hipDeviceGetAttribute(int *pi, int attr, int device)
{
    NEED_DEVICE();
    if (pi == NULL)
        return hipErrorInvalidValue;
    if (!devid_ok(device))
        return hipErrorInvalidDevice;
    int v;
    if (attr_override_get(attr, &v)) {
        *pi = v;
        return hipSuccess;
    }
    switch (attr) {
    case hipDeviceAttributeCanMapHostMemory: v = 1; break;
    case hipDeviceAttributeCanUseHostPointerForRegisteredMem: v = 1; break;
    case hipDeviceAttributeConcurrentManagedAccess: v = 1; break;
    case hipDeviceAttributeDirectManagedMemAccessFromHost: v = 0; break;
    case hipDeviceAttributeHostNativeAtomicSupported: v = 1; break;
    case hipDeviceAttributeIntegrated: v = 0; break;
    case hipDeviceAttributeComputeCapabilityMajor: v = 9; break;
    case hipDeviceAttributeComputeCapabilityMinor: v = 0; break;
    case hipDeviceAttributeManagedMemory: v = 1; break;
    case hipDeviceAttributeMultiprocessorCount: v = 104; break;
    case hipDeviceAttributePageableMemoryAccess: v = 0; break;
    case hipDeviceAttributePageableMemoryAccessUsesHostPageTables: v = 0; break;
    case hipDeviceAttributePciBusId: v = 0x10 + device; break;
    case hipDeviceAttributePciDeviceId: v = 0; break;
    case hipDeviceAttributePciDomainID: v = 0; break;
    case hipDeviceAttributeTotalGlobalMem: v = g_devmem > INT_MAX ? INT_MAX : (int)g_devmem; break;
    case hipDeviceAttributeUnifiedAddressing: v = 1; break;
    case hipDeviceAttributeMemoryPoolsSupported: v = 1; break;
    case hipDeviceAttributeWarpSize: v = 64; break;
    case hipDeviceAttributeMaxThreadsPerBlock: v = 1024; break;
    case hipDeviceAttributeClockRate: v = 1700000; break;
    case hipDeviceAttributeIsLargeBar: v = 1; break;
    case hipDeviceAttributeFineGrainSupport: v = 1; break;
    case hipDeviceAttributeVirtualMemoryManagementSupported:
    case hipDeviceAttributeHostRegisterSupported:
        if (!ver_ge(6, 0))
            return hipErrorInvalidValue; /* 1.7: absent in 5.2 */
        v = 1;
        break;
    default:
        return hipErrorInvalidValue;
    }
    *pi = v;
    return hipSuccess;
}

static hipError_t impl_hipDeviceGetName(char *name, int len, int device)
{
    NEED_DEVICE();
    if (name == NULL || len <= 0)
        return hipErrorInvalidValue;
    if (!devid_ok(device))
        return hipErrorInvalidDevice;
    snprintf(name, (size_t)len, "HIP double device %d", device);
    return hipSuccess;
}

static hipError_t impl_hipDeviceTotalMem(size_t *bytes, int device)
{
    NEED_DEVICE();
    if (bytes == NULL)
        return hipErrorInvalidValue;
    if (!devid_ok(device))
        return hipErrorInvalidDevice;
    *bytes = g_devmem;
    return hipSuccess;
}

static hipError_t impl_hipMemGetInfo(size_t *freeb, size_t *total)
{
    NEED_DEVICE();
    if (freeb == NULL || total == NULL)
        return hipErrorInvalidValue;
    int d = cur_dev();
    *total = g_devmem;
    *freeb = dev_free(d);
    return hipSuccess;
}

static void streams_run_all(void); /* below, with the streams */

static hipError_t impl_hipDeviceSynchronize(void)
{
    NEED_DEVICE();
    streams_run_all();
    return hipSuccess;
}

/* ---------------- device memory ---------------- */

static hipError_t device_alloc_on(void **ptr, size_t size, unsigned flags, int d, struct alloc **made)
{
    if (size > dev_free(d))
        return hipErrorOutOfMemory;
    uint64_t id = g_next_id;
    char name[64];
    snprintf(name, sizeof name, "hipdouble-dev-%d-%llu", (int)getpid(), (unsigned long long)id);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return hipErrorOutOfMemory;
    size_t maplen = round_up(size, 4096);
    if (ftruncate(fd, (off_t)maplen) != 0) {
        close(fd);
        return hipErrorOutOfMemory;
    }
    void *p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return hipErrorOutOfMemory;
    }
    struct alloc *a = alloc_new(K_DEVICE, (uintptr_t)p, size);
    if (a == NULL) {
        munmap(p, maplen);
        close(fd);
        return hipErrorOutOfMemory;
    }
    a->maplen = maplen;
    a->fd = fd;
    a->device = d;
    a->flags = flags;
    g_dev_used[d] += size;
    *ptr = p;
    if (made != NULL)
        *made = a;
    return hipSuccess;
}

static hipError_t device_alloc(void **ptr, size_t size, unsigned flags)
{
    NEED_DEVICE();
    if (ptr == NULL)
        return hipErrorInvalidValue;
    if (size == 0) {
        *ptr = NULL;
        return hipSuccess;
    }
    return device_alloc_on(ptr, size, flags, cur_dev(), NULL);
}

static hipError_t impl_hipMalloc(void **ptr, size_t size) { return device_alloc(ptr, size, 0); }

static hipError_t impl_hipExtMallocWithFlags(void **ptr, size_t size, unsigned flags)
{
    /* 1.4: Default 0, Finegrained 1, SignalMemory 2, Uncached 3 (5.7+), Contiguous 4 (6.2+) */
    unsigned max = ver_ge(6, 2) ? 4u : (ver_ge(5, 7) ? 3u : 2u);
    if (flags > max)
        return hipErrorInvalidValue;
    return device_alloc(ptr, size, flags);
}

static hipError_t impl_hipFree(void *ptr)
{
    NEED_DEVICE();
    if (ptr == NULL)
        return hipSuccess;
    struct alloc *a = alloc_find(ptr);
    /* stricter than CLR: only hipMalloc / hipMallocAsync / hipMallocManaged memory, base pointer
     * only, not freed already (a hipFreeAsync still queued counts as freed) */
    if (a == NULL || a->base != (uintptr_t)ptr || (a->kind != K_DEVICE && a->kind != K_MANAGED) ||
        a->pending)
        return hipErrorInvalidValue;
    alloc_release(a);
    return hipSuccess;
}

/* ---------------- host memory ---------------- */

static hipError_t host_alloc(void **ptr, size_t size, unsigned flags)
{
    NEED_DEVICE();
    if (ptr == NULL)
        return hipErrorInvalidValue;
    if (!host_flags_ok(flags))
        return hipErrorInvalidValue;
    if (size == 0) {
        *ptr = NULL;
        return hipSuccess;
    }
    size_t maplen = round_up(size, 4096);
    if (maplen < size)
        return hipErrorOutOfMemory;
    void *p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return hipErrorOutOfMemory;
    struct alloc *a = alloc_new(K_HOST, (uintptr_t)p, size);
    if (a == NULL) {
        munmap(p, maplen);
        return hipErrorOutOfMemory;
    }
    a->maplen = maplen;
    a->device = cur_dev();
    a->flags = flags;
    *ptr = p;
    return hipSuccess;
}

static hipError_t impl_hipHostMalloc(void **ptr, size_t size, unsigned flags)
{
    return host_alloc(ptr, size, flags);
}
static hipError_t impl_hipExtHostAlloc(void **ptr, size_t size, unsigned flags)
{
    return host_alloc(ptr, size, flags);
}
static hipError_t impl_hipHostAlloc(void **ptr, size_t size, unsigned flags)
{
    return host_alloc(ptr, size, flags);
}

static hipError_t host_free(void *ptr)
{
    NEED_DEVICE();
    if (ptr == NULL)
        return hipSuccess;
    struct alloc *a = alloc_find(ptr);
    if (a == NULL || a->base != (uintptr_t)ptr || a->kind != K_HOST)
        return hipErrorInvalidValue;
    alloc_release(a);
    return hipSuccess;
}

static hipError_t impl_hipHostFree(void *ptr) { return host_free(ptr); }
static hipError_t impl_hipFreeHost(void *ptr) { return host_free(ptr); }

static hipError_t impl_hipHostRegister(void *ptr, size_t size, unsigned flags)
{
    NEED_DEVICE();
    if (ptr == NULL || size == 0 || !register_flags_ok(flags))
        return hipErrorInvalidValue;
    uintptr_t lo = (uintptr_t)ptr, hi = lo + size;
    if (hi < lo)
        return hipErrorInvalidValue;
    for (struct alloc *a = g_allocs; a; a = a->next) {
        if (lo < a->base + a->size && a->base < hi)
            return a->kind == K_REGISTERED ? hipErrorHostMemoryAlreadyRegistered /* as CUDA */
                                           : hipErrorInvalidValue;
    }
    for (struct vres *r = g_vres; r; r = r->next)
        if (lo < r->base + r->size && r->base < hi)
            return hipErrorInvalidValue;
    if (!host_range_mapped(ptr, size))
        return hipErrorInvalidValue;
    struct alloc *a = alloc_new(K_REGISTERED, lo, size);
    if (a == NULL)
        return hipErrorOutOfMemory;
    a->maplen = 0; /* not ours */
    a->device = cur_dev();
    a->flags = flags;
    return hipSuccess;
}

static hipError_t impl_hipHostUnregister(void *ptr)
{
    NEED_DEVICE();
    if (ptr == NULL)
        return hipErrorInvalidValue;
    struct alloc *a = alloc_find(ptr);
    if (a == NULL || a->kind != K_REGISTERED)
        return hipErrorHostMemoryNotRegistered;
    if (a->base != (uintptr_t)ptr)
        return hipErrorInvalidValue; /* interior pointer, as CUDA */
    alloc_release(a);
    return hipSuccess;
}

static hipError_t impl_hipHostGetDevicePointer(void **dev, void *host, unsigned flags)
{
    NEED_DEVICE();
    if (dev == NULL || host == NULL || flags != 0)
        return hipErrorInvalidValue;
    struct alloc *a = alloc_find(host);
    if (a == NULL)
        return hipErrorInvalidValue;
    if (a->kind != K_REGISTERED && a->kind != K_HOST)
        return hipErrorInvalidValue;
    *dev = host; /* unified addressing: same address (also without the Mapped flag, as CUDA) */
    return hipSuccess;
}

static hipError_t impl_hipHostGetFlags(unsigned *flags, void *host)
{
    NEED_DEVICE();
    if (flags == NULL || host == NULL)
        return hipErrorInvalidValue;
    struct alloc *a = alloc_find(host);
    if (a == NULL || (a->kind != K_HOST && a->kind != K_REGISTERED))
        return hipErrorInvalidValue;
    *flags = a->flags;
    return hipSuccess;
}

/* ---------------- managed memory ---------------- */

static hipError_t impl_hipMallocManaged(void **ptr, size_t size, unsigned flags)
{
    NEED_DEVICE();
    if (ptr == NULL || size == 0)
        return hipErrorInvalidValue;
    if (flags != hipMemAttachGlobal && flags != hipMemAttachHost)
        return hipErrorInvalidValue;
    size_t maplen = round_up(size, 4096);
    if (maplen < size)
        return hipErrorOutOfMemory;
    void *p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED)
        return hipErrorOutOfMemory;
    struct alloc *a = alloc_new(K_MANAGED, (uintptr_t)p, size);
    if (a == NULL || managed_init_segs(a) != 0) {
        if (a)
            alloc_unlink(a);
        munmap(p, maplen);
        return hipErrorOutOfMemory;
    }
    a->maplen = maplen;
    a->device = cur_dev();
    a->flags = flags;
    *ptr = p;
    return hipSuccess;
}

static hipError_t impl_hipMemAdvise(const void *ptr, size_t count, int advice, int device)
{
    NEED_DEVICE();
    return managed_advise(ptr, count, advice, device);
}

static hipError_t impl_hipMemPrefetchAsync(const void *ptr, size_t count, int device, void *stream)
{
    NEED_DEVICE();
    if (ptr == NULL || count == 0)
        return hipErrorInvalidValue;
    if (device != hipCpuDeviceId && !devid_ok(device))
        return hipErrorInvalidDevice;
    if (!stream_ok(stream))
        return hipErrorInvalidHandle;
    return managed_prefetch(ptr, count, device);
}

static hipError_t impl_hipMemRangeGetAttribute(void *data, size_t data_size, int attribute,
                                               const void *ptr, size_t count)
{
    NEED_DEVICE();
    return managed_range_attr(data, data_size, attribute, ptr, count);
}

static hipError_t impl_hipMemRangeGetAttributes(void **data, size_t *data_sizes, int *attributes,
                                                size_t num, const void *ptr, size_t count)
{
    NEED_DEVICE();
    if (data == NULL || data_sizes == NULL || attributes == NULL || num == 0)
        return hipErrorInvalidValue;
    for (size_t i = 0; i < num; i++) {
        hipError_t e = managed_range_attr(data[i], data_sizes[i], attributes[i], ptr, count);
        if (e != hipSuccess)
            return e;
    }
    return hipSuccess;
}

static hipError_t impl_hipStreamAttachMemAsync(void *stream, void *ptr, size_t length, unsigned flags)
{
    NEED_DEVICE();
    if (!stream_ok(stream))
        return hipErrorInvalidHandle;
    if (flags != hipMemAttachGlobal && flags != hipMemAttachHost && flags != hipMemAttachSingle)
        return hipErrorInvalidValue;
    if (ptr == NULL)
        return hipErrorInvalidValue;
    struct alloc *a = alloc_find(ptr);
    if (a == NULL || a->kind != K_MANAGED)
        return hipErrorInvalidValue;
    if (length != 0 && length > a->size - ((uintptr_t)ptr - a->base))
        return hipErrorInvalidValue;
    return hipSuccess;
}

/* ---------------- streams: queues of stream-ordered work ----------------
 *
 * Host mode runs nothing on a device, but stream-ordered frees and the events that order them
 * are modelled: hipMallocAsync, hipFreeAsync and hipStreamWaitEvent enqueue an operation on
 * their stream, which runs only when the stream is synchronized (hipStreamSynchronize,
 * hipEventSynchronize on an event recorded on it, hipDeviceSynchronize, hipStreamDestroy) or
 * when another stream that waited for it is.  A queued free keeps its memory (and its share of
 * the device budget) until it runs; an event is done once its stream ran what was queued
 * before it was recorded.  The default stream (NULL, hipStreamLegacy) and hipStreamPerThread
 * are one queue each and do not synchronize implicitly with other streams. */

enum { OP_ALLOC, OP_FREE, OP_WAIT };

struct sop {
    struct sop *next;
    unsigned long long seq;
    int kind;
    struct alloc *a;          /* OP_FREE: the allocation to release (NULL: reused already) */
    struct dstream *on;       /* OP_WAIT: the stream waited for (NULL: destroyed, so done) */
    unsigned long long until; /* OP_WAIT: how far `on` must have run */
};

static struct dstream g_null_stream = {.handle = NULL};
static struct dstream g_pt_stream = {.handle = HIP_STREAM_PER_THREAD};

static struct dstream *stream_get(void *s) /* NULL for an unknown stream */
{
    if (s == NULL || s == HIP_STREAM_LEGACY)
        return &g_null_stream;
    if (s == HIP_STREAM_PER_THREAD)
        return &g_pt_stream;
    return stream_find(s);
}

static int stream_device(const struct dstream *s)
{
    return s == &g_null_stream || s == &g_pt_stream ? cur_dev() : s->device;
}

static hipError_t stream_enqueue(struct dstream *s, int kind, struct alloc *a, struct dstream *on,
                                 unsigned long long until)
{
    struct sop *op = calloc(1, sizeof *op);
    if (op == NULL)
        return hipErrorOutOfMemory;
    op->seq = ++s->submitted;
    op->kind = kind;
    op->a = a;
    op->on = on;
    op->until = until;
    struct sop **pp = &s->ops;
    while (*pp)
        pp = &(*pp)->next;
    *pp = op;
    return hipSuccess;
}

/* Run s's queue up to operation `upto` (the waits it meets run the streams they wait for). */
static void stream_run(struct dstream *s, unsigned long long upto, int depth)
{
    while (s->ops != NULL && s->ops->seq <= upto) {
        struct sop *op = s->ops;
        s->ops = op->next;
        if (op->kind == OP_FREE && op->a != NULL)
            alloc_release(op->a);
        else if (op->kind == OP_WAIT && op->on != NULL && depth < 64)
            stream_run(op->on, op->until, depth + 1);
        free(op);
    }
    if (s->completed < upto)
        s->completed = upto;
}

static void stream_run_all(struct dstream *s) { stream_run(s, s->submitted, 0); }

/* In-stream reuse: memory freed earlier on s can serve a later allocation on s at once. */
static void stream_reuse_frees(struct dstream *s)
{
    for (struct sop *op = s->ops; op; op = op->next)
        if (op->kind == OP_FREE && op->a != NULL) {
            alloc_release(op->a);
            op->a = NULL;
        }
}

static void waits_forget(struct dstream *x, const struct dstream *s)
{
    for (struct sop *op = x->ops; op; op = op->next)
        if (op->on == s)
            op->on = NULL;
}

/* s is going away: its work runs, and nothing refers to it afterwards. */
static void stream_forget(struct dstream *s)
{
    stream_run_all(s);
    for (struct devent *e = g_events; e; e = e->next)
        if (e->stream == s)
            e->stream = NULL;
    waits_forget(&g_null_stream, s);
    waits_forget(&g_pt_stream, s);
    for (struct dstream *x = g_streams; x; x = x->next)
        waits_forget(x, s);
}

static void stream_drop_ops(struct dstream *s) /* reset: forget the queue without running it */
{
    while (s->ops) {
        struct sop *op = s->ops;
        s->ops = op->next;
        free(op);
    }
    s->submitted = s->completed = 0;
}

static void streams_drop_all(void)
{
    stream_drop_ops(&g_null_stream);
    stream_drop_ops(&g_pt_stream);
    for (struct dstream *x = g_streams; x; x = x->next)
        stream_drop_ops(x);
}

static void streams_run_all(void)
{
    stream_run_all(&g_null_stream);
    stream_run_all(&g_pt_stream);
    for (struct dstream *x = g_streams; x; x = x->next)
        stream_run_all(x);
}

static hipError_t stream_create(void **stream, unsigned flags)
{
    NEED_DEVICE();
    if (stream == NULL)
        return hipErrorInvalidValue;
    if (flags & ~hipStreamNonBlocking)
        return hipErrorInvalidValue;
    struct dstream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return hipErrorOutOfMemory;
    s->handle = s;
    s->flags = flags;
    s->device = cur_dev();
    s->next = g_streams;
    g_streams = s;
    *stream = s;
    return hipSuccess;
}

static hipError_t impl_hipStreamCreate(void **stream) { return stream_create(stream, 0); }
static hipError_t impl_hipStreamCreateWithFlags(void **stream, unsigned flags)
{
    return stream_create(stream, flags);
}

static hipError_t impl_hipStreamDestroy(void *stream)
{
    NEED_DEVICE();
    struct dstream *s = stream ? stream_find(stream) : NULL;
    if (s == NULL)
        return hipErrorInvalidHandle;
    stream_forget(s); /* its queued work completes (the runtime finishes it after the call) */
    stream_unlink(s);
    return hipSuccess;
}

static hipError_t impl_hipStreamSynchronize(void *stream)
{
    NEED_DEVICE();
    struct dstream *s = stream_get(stream);
    if (s == NULL)
        return hipErrorInvalidHandle;
    stream_run_all(s);
    return hipSuccess;
}

/* ---------------- stream-ordered allocation and events ---------------- */

static hipError_t impl_hipMallocAsync(void **ptr, size_t size, void *stream)
{
    NEED_DEVICE();
    struct dstream *s = stream_get(stream);
    if (ptr == NULL || s == NULL)
        return hipErrorInvalidValue; /* CLR (hip_mempool.cpp): an invalid stream too */
    if (size == 0) {
        *ptr = NULL;
        return hipSuccess;
    }
    int d = stream_device(s); /* the pool of the stream's device */
    if (size > dev_free(d))
        stream_reuse_frees(s);
    struct alloc *a = NULL;
    void *p = NULL;
    hipError_t e = device_alloc_on(&p, size, 0, d, &a);
    if (e != hipSuccess)
        return e;
    a->async = 1;
    e = stream_enqueue(s, OP_ALLOC, NULL, NULL, 0);
    if (e != hipSuccess) {
        alloc_release(a);
        return e;
    }
    *ptr = p;
    return hipSuccess;
}

static hipError_t impl_hipFreeAsync(void *ptr, void *stream)
{
    NEED_DEVICE();
    struct dstream *s = stream_get(stream);
    if (ptr == NULL || s == NULL)
        return hipErrorInvalidValue; /* CLR (hip_mempool.cpp) */
    struct alloc *a = alloc_find(ptr);
    /* stricter than CLR (which fails later, in the stream): the base of live device memory */
    if (a == NULL || a->kind != K_DEVICE || a->base != (uintptr_t)ptr || a->pending)
        return hipErrorInvalidValue;
    hipError_t e = stream_enqueue(s, OP_FREE, a, NULL, 0);
    if (e == hipSuccess)
        a->pending = 1;
    return e;
}

static hipError_t impl_hipEventCreateWithFlags(void **event, unsigned flags)
{
    NEED_DEVICE();
    if (event == NULL || !event_flags_ok(flags))
        return hipErrorInvalidValue;
    struct devent *e = calloc(1, sizeof *e);
    if (e == NULL)
        return hipErrorOutOfMemory;
    e->handle = e;
    e->flags = flags;
    e->device = cur_dev();
    e->next = g_events;
    g_events = e;
    *event = e;
    return hipSuccess;
}

static hipError_t impl_hipEventDestroy(void *event)
{
    NEED_DEVICE();
    if (event == NULL)
        return hipErrorInvalidHandle;
    struct devent *e = event_find(event);
    if (e == NULL)
        return hipErrorContextIsDestroyed; /* CLR: not in its event set */
    event_unlink(e);
    return hipSuccess;
}

static hipError_t impl_hipEventRecord(void *event, void *stream)
{
    NEED_DEVICE();
    struct devent *e = event_find(event);
    if (e == NULL)
        return hipErrorInvalidHandle;
    struct dstream *s = stream_get(stream);
    if (s == NULL)
        return hipErrorInvalidHandle;
    e->stream = s;
    e->seq = s->submitted;
    return hipSuccess;
}

static int event_done(const struct devent *e)
{
    return e->stream == NULL || e->stream->completed >= e->seq;
}

static hipError_t impl_hipEventQuery(void *event)
{
    NEED_DEVICE();
    struct devent *e = event_find(event);
    if (e == NULL)
        return hipErrorInvalidHandle;
    return event_done(e) ? hipSuccess : hipErrorNotReady;
}

static hipError_t impl_hipEventSynchronize(void *event)
{
    NEED_DEVICE();
    struct devent *e = event_find(event);
    if (e == NULL)
        return hipErrorInvalidHandle;
    if (e->stream != NULL)
        stream_run(e->stream, e->seq, 0);
    return hipSuccess;
}

static hipError_t impl_hipStreamWaitEvent(void *stream, void *event, unsigned flags)
{
    NEED_DEVICE();
    if (event == NULL)
        return hipErrorInvalidHandle;
    if (flags != 0)
        return hipErrorInvalidValue;
    struct dstream *s = stream_get(stream);
    if (s == NULL)
        return hipErrorContextIsDestroyed; /* CLR (hip_stream.cpp) */
    struct devent *e = event_find(event);
    if (e == NULL)
        return hipErrorInvalidHandle;
    if (event_done(e) || e->stream == s)
        return hipSuccess; /* nothing to wait for (CLR returns at once too) */
    return stream_enqueue(s, OP_WAIT, NULL, e->stream, e->seq);
}

/* ---------------- copies ---------------- */

/* Is [p, p+n) safe to read (write)?  Known allocations must contain the whole range; VMM ranges
 * must be mapped with enough access; anything else must be mapped host memory. */
static int range_ok(const void *p, size_t n, int write)
{
    uintptr_t a = (uintptr_t)p;
    if (a + n < a)
        return 0;
    struct alloc *x = alloc_find(p);
    if (x != NULL)
        return n <= x->size - (a - x->base);
    if (vres_find(p) != NULL) {
        uintptr_t cur = a, end = a + n;
        while (cur < end) {
            struct vmap *m = vmap_find((void *)cur);
            if (m == NULL)
                return 0;
            unsigned char acc = 0;
            for (int d = 0; d < HIPDOUBLE_MAX_DEVICES; d++)
                acc |= m->access[d];
            if (write ? acc != hipMemAccessFlagsProtReadWrite : acc == 0)
                return 0;
            cur = m->addr + m->size;
        }
        return 1;
    }
    return host_range_mapped(p, n);
}

static hipError_t impl_hipMemcpy(void *dst, const void *src, size_t n, int kind)
{
    NEED_DEVICE();
    if (kind < 0 || kind > 4)
        return hipErrorInvalidMemcpyDirection;
    if (n == 0)
        return hipSuccess;
    if (dst == NULL || src == NULL)
        return hipErrorInvalidValue;
    if (!range_ok(dst, n, 1) || !range_ok(src, n, 0))
        return hipErrorInvalidValue;
    memmove(dst, src, n);
    return hipSuccess;
}

static hipError_t impl_hipMemset(void *dst, int value, size_t n)
{
    NEED_DEVICE();
    if (n == 0)
        return hipSuccess;
    if (dst == NULL || !range_ok(dst, n, 1))
        return hipErrorInvalidValue;
    memset(dst, value, n);
    return hipSuccess;
}

/* ---------------- peer access and copies between devices ---------------- */

/* CLR's canAccessPeer: a device is not its own peer (0, even before the range check). */
static hipError_t can_peer(int *can, int device, int peer)
{
    if (can == NULL)
        return hipErrorInvalidValue;
    if (device == peer) {
        *can = 0;
        return hipSuccess;
    }
    if (!devid_ok(device) || !devid_ok(peer))
        return hipErrorInvalidDevice;
    *can = !g_peer_off[device][peer];
    return hipSuccess;
}

static hipError_t impl_hipDeviceCanAccessPeer(int *can, int device, int peer)
{
    NEED_DEVICE();
    return can_peer(can, device, peer);
}

static hipError_t impl_hipDeviceEnablePeerAccess(int peer, unsigned flags)
{
    NEED_DEVICE();
    int d = cur_dev(), can = 0;
    if (flags != 0)
        return hipErrorInvalidValue;
    if (can_peer(&can, d, peer) != hipSuccess || !can)
        return hipErrorInvalidDevice;
    if (g_peer_on[d][peer])
        return hipErrorPeerAccessAlreadyEnabled;
    g_peer_on[d][peer] = 1;
    return hipSuccess;
}

static hipError_t impl_hipDeviceDisablePeerAccess(int peer)
{
    NEED_DEVICE();
    int d = cur_dev(), can = 0;
    if (can_peer(&can, d, peer) != hipSuccess || !can)
        return hipErrorInvalidDevice;
    if (!g_peer_on[d][peer])
        return hipErrorPeerAccessNotEnabled;
    g_peer_on[d][peer] = 0;
    return hipSuccess;
}

/* CLR: both devices in range, then a device-to-device hipMemcpy (no peer access needed). */
static hipError_t impl_hipMemcpyPeer(void *dst, int dst_device, const void *src, int src_device, size_t n)
{
    NEED_DEVICE();
    if (!devid_ok(dst_device) || !devid_ok(src_device))
        return hipErrorInvalidDevice;
    return impl_hipMemcpy(dst, src, n, 3 /* hipMemcpyDeviceToDevice */);
}

/* ---------------- IPC ---------------- */

struct ipc_wire {
    char magic[8];
    int32_t pid;
    int32_t fd;
    uint64_t size;
    uint64_t id;
    int32_t device;
    int32_t version;
    char pad[24];
};
_Static_assert(sizeof(struct ipc_wire) == 64, "ipc wire");
static const char g_ipc_magic[8] = {'H', 'I', 'P', 'D', 'B', 'L', 'I', 'P'};

static hipError_t impl_hipIpcGetMemHandle(hipIpcMemHandle_t *handle, void *ptr)
{
    NEED_DEVICE();
    if (handle == NULL || ptr == NULL)
        return hipErrorInvalidValue;
    struct alloc *a = alloc_find(ptr);
    /* memory of the stream-ordered pool has no IPC handle (CUDA needs an exportable pool) */
    if (a == NULL || a->kind != K_DEVICE || a->base != (uintptr_t)ptr || a->async || a->pending)
        return hipErrorInvalidValue;
    struct ipc_wire w;
    memset(&w, 0, sizeof w);
    memcpy(w.magic, g_ipc_magic, sizeof w.magic);
    w.pid = (int32_t)getpid();
    w.fd = a->fd;
    w.size = a->size;
    w.id = a->id;
    w.device = a->device;
    w.version = version_get();
    memcpy(handle, &w, sizeof w);
    return hipSuccess;
}

static hipError_t impl_hipIpcOpenMemHandle(void **ptr, hipIpcMemHandle_t handle, unsigned flags)
{
    NEED_DEVICE();
    if (ptr == NULL || !ipc_flags_ok(flags))
        return hipErrorInvalidValue;
    struct ipc_wire w;
    memcpy(&w, &handle, sizeof w);
    if (memcmp(w.magic, g_ipc_magic, sizeof w.magic) != 0 || w.size == 0)
        return hipErrorInvalidValue;
    /* Opening a handle in the process that exported it: CUDA 13 answers 201
     * (cudaErrorDeviceUninitialized, the number of hipErrorInvalidContext). */
    if (w.pid == (int32_t)getpid())
        return hipErrorInvalidContext;
    /* One mapping per (handle, current device), as CUDA maps a handle once per device
     * context; opening it again from the same device counts a reference. */
    for (struct alloc *a = g_allocs; a; a = a->next)
        if (a->kind == K_IPC && a->ipc_pid == w.pid && a->ipc_id == w.id && a->device == cur_dev()) {
            a->refs++;
            *ptr = (void *)a->base;
            return hipSuccess;
        }
    char path[64], name[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)w.pid, (int)w.fd);
    snprintf(name, sizeof name, "hipdouble-dev-%d-%llu", (int)w.pid, (unsigned long long)w.id);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return hipErrorInvalidValue; /* exporter gone or allocation freed */
    struct stat st;
    if (!memfd_name_matches(fd, name) || fstat(fd, &st) != 0 || (uint64_t)st.st_size < w.size) {
        close(fd); /* stale handle: freed and the fd number reused */
        return hipErrorInvalidValue;
    }
    size_t maplen = round_up(w.size, 4096);
    void *p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return hipErrorMapFailed;
    struct alloc *a = alloc_new(K_IPC, (uintptr_t)p, w.size);
    if (a == NULL) {
        munmap(p, maplen);
        return hipErrorOutOfMemory;
    }
    a->maplen = maplen;
    a->device = cur_dev();
    a->ipc_pid = w.pid;
    a->ipc_id = w.id;
    *ptr = p;
    return hipSuccess;
}

static hipError_t impl_hipMemGetAddressRange(void **base, size_t *size, void *ptr)
{
    /* the allocation (device, host, managed, or an opened IPC handle) containing ptr */
    NEED_DEVICE();
    if (base == NULL || size == NULL)
        return hipErrorInvalidValue;
    struct alloc *a = alloc_find(ptr);
    if (a == NULL)
        return hipErrorNotFound;
    *base = (void *)a->base;
    *size = a->size;
    return hipSuccess;
}

static hipError_t impl_hipIpcCloseMemHandle(void *ptr)
{
    NEED_DEVICE();
    if (ptr == NULL)
        return hipErrorInvalidValue;
    struct alloc *a = alloc_find(ptr);
    if (a == NULL || a->kind != K_IPC || a->base != (uintptr_t)ptr)
        return hipErrorInvalidValue;
    if (--a->refs > 0)
        return hipSuccess;
    alloc_release(a);
    return hipSuccess;
}

/* ---------------- pointer attributes ---------------- */

static hipError_t impl_hipPointerGetAttributes(hipPointerAttribute_t *attr, const void *ptr)
{
    NEED_DEVICE();
    if (attr == NULL || ptr == NULL)
        return hipErrorInvalidValue;
    hipPointerAttribute_t r;
    memset(&r, 0, sizeof r);
    void *p = (void *)(uintptr_t)ptr;
    struct alloc *a = alloc_find(ptr);
    struct vmap *m;
    if (a != NULL) {
        r.device = a->device;
        switch (a->kind) {
        case K_DEVICE:
        case K_IPC:
            r.type = mt_device();
            r.devicePointer = p;
            r.allocationFlags = a->kind == K_DEVICE ? a->flags : 0;
            break;
        case K_HOST:
        case K_REGISTERED:
            r.type = mt_host();
            r.devicePointer = p;
            r.hostPointer = p;
            r.allocationFlags = a->flags;
            break;
        case K_MANAGED:
        default:
            r.type = mt_managed();
            r.devicePointer = p;
            r.hostPointer = p;
            r.isManaged = 1;
            r.allocationFlags = a->flags;
            break;
        }
    } else if ((m = vmap_find(ptr)) != NULL) {
        r.type = mt_device();
        r.device = m->h->device;
        r.devicePointer = p;
    } else {
        /* 1.6: 6.0+ reports unknown memory as Unregistered with device -2; older versions fail */
        if (!ver_ge(6, 0))
            return hipErrorInvalidValue;
        r.type = 0;
        r.device = hipInvalidDeviceId;
        r.hostPointer = p; /* as CUDA reports unregistered memory */
    }
    *attr = r;
    return hipSuccess;
}

/* ---------------- virtual memory management ---------------- */

static hipError_t impl_hipMemAddressReserve(void **ptr, size_t size, size_t alignment, void *addr,
                                            unsigned long long flags)
{
    NEED_DEVICE();
    if (ptr == NULL || flags != 0)
        return hipErrorInvalidValue;
    if (size == 0 || size % HIPDOUBLE_GRANULARITY != 0)
        return hipErrorMemoryAllocation; /* CLR: size must be a multiple of the granularity */
    if (alignment & (alignment - 1))
        return hipErrorInvalidValue;
    size_t al = alignment > HIPDOUBLE_GRANULARITY ? alignment : HIPDOUBLE_GRANULARITY;
    const int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    void *p = MAP_FAILED;
#ifdef MAP_FIXED_NOREPLACE
    if (addr != NULL && (uintptr_t)addr % al == 0) {
        p = mmap(addr, size, PROT_NONE, mflags | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != MAP_FAILED && p != addr) {
            munmap(p, size);
            p = MAP_FAILED;
        }
    }
#else
    (void)addr;
#endif
    if (p == MAP_FAILED) {
        size_t len = size + al;
        if (len < size)
            return hipErrorOutOfMemory;
        void *q = mmap(NULL, len, PROT_NONE, mflags, -1, 0);
        if (q == MAP_FAILED)
            return hipErrorOutOfMemory;
        uintptr_t s = round_up((uintptr_t)q, al), e = s + size, qe = (uintptr_t)q + len;
        if (s > (uintptr_t)q)
            munmap(q, s - (uintptr_t)q);
        if (qe > e)
            munmap((void *)e, qe - e);
        p = (void *)s;
    }
    struct vres *r = calloc(1, sizeof *r);
    if (r == NULL) {
        munmap(p, size);
        return hipErrorOutOfMemory;
    }
    r->base = (uintptr_t)p;
    r->size = size;
    r->next = g_vres;
    g_vres = r;
    *ptr = p;
    return hipSuccess;
}

static hipError_t impl_hipMemAddressFree(void *ptr, size_t size)
{
    NEED_DEVICE();
    if (ptr == NULL || size == 0)
        return hipErrorInvalidValue;
    struct vres *r = vres_find(ptr);
    if (r == NULL || r->base != (uintptr_t)ptr || r->size != size)
        return hipErrorInvalidValue;
    for (struct vmap *m = g_vmaps; m; m = m->next)
        if (m->addr >= r->base && m->addr - r->base < r->size)
            return hipErrorInvalidValue; /* still mapped: unmap first */
    munmap((void *)r->base, r->size);
    vres_unlink(r);
    return hipSuccess;
}

static hipError_t impl_hipMemCreate(void **handle, size_t size, const void *prop,
                                    unsigned long long flags)
{
    NEED_DEVICE();
    if (handle == NULL || prop == NULL || flags != 0)
        return hipErrorInvalidValue;
    struct pprop pp;
    prop_read(prop, &pp);
    hipError_t e = prop_check(&pp);
    if (e != hipSuccess)
        return e;
    if (pp.htype != hipMemHandleTypeNone && pp.htype != hipMemHandleTypePosixFileDescriptor)
        return hipErrorNotSupported;
    if (size == 0 || size % HIPDOUBLE_GRANULARITY != 0)
        return hipErrorInvalidValue;
    if (size > dev_free(pp.loc_id))
        return hipErrorOutOfMemory;
    uint64_t id = g_next_id++;
    char name[80];
    snprintf(name, sizeof name, "hipdouble-vmm-%d-%llu-%d", (int)getpid(), (unsigned long long)id,
             pp.loc_id);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return hipErrorOutOfMemory;
    if (ftruncate(fd, (off_t)size) != 0) {
        close(fd);
        return hipErrorOutOfMemory;
    }
    struct vhandle *h = calloc(1, sizeof *h);
    if (h == NULL) {
        close(fd);
        return hipErrorOutOfMemory;
    }
    h->fd = fd;
    h->size = size;
    h->device = pp.loc_id;
    h->htype = pp.htype;
    h->refs = 1;
    h->id = id;
    h->next = g_vhandles;
    g_vhandles = h;
    g_dev_used[pp.loc_id] += size;
    *handle = h;
    return hipSuccess;
}

static hipError_t impl_hipMemRelease(void *handle)
{
    NEED_DEVICE();
    struct vhandle *h = vh_find(handle);
    if (h == NULL)
        return hipErrorInvalidValue;
    h->refs--;
    vh_maybe_free(h);
    return hipSuccess;
}

static hipError_t impl_hipMemMap(void *ptr, size_t size, size_t offset, void *handle,
                                 unsigned long long flags)
{
    NEED_DEVICE();
    if (ptr == NULL || offset != 0 || flags != 0) /* CLR: offset and flags must be 0 */
        return hipErrorInvalidValue;
    struct vhandle *h = vh_find(handle);
    if (h == NULL)
        return hipErrorInvalidValue;
    uintptr_t a = (uintptr_t)ptr;
    if (size != h->size)
        return hipErrorNotSupported; /* CUDA maps whole handles only (801 for a part) */
    if (a % HIPDOUBLE_GRANULARITY)
        return hipErrorInvalidValue;
    struct vres *r = vres_find(ptr);
    if (r == NULL || size > r->base + r->size - a)
        return hipErrorInvalidValue;
    for (struct vmap *m = g_vmaps; m; m = m->next)
        if (a < m->addr + m->size && m->addr < a + size)
            return hipErrorInvalidValue; /* overlaps an existing mapping */
    struct vmap *m = calloc(1, sizeof *m);
    if (m == NULL)
        return hipErrorOutOfMemory;
    void *p = mmap(ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, 0);
    if (p == MAP_FAILED) {
        free(m);
        return hipErrorOutOfMemory;
    }
    m->addr = a;
    m->size = size;
    m->h = h;
    m->next = g_vmaps;
    g_vmaps = m;
    h->maps++;
    return hipSuccess;
}

static hipError_t impl_hipMemUnmap(void *ptr, size_t size)
{
    NEED_DEVICE();
    uintptr_t a = (uintptr_t)ptr, e = a + size;
    if (ptr == NULL || size == 0 || e < a)
        return hipErrorInvalidValue;
    struct vres *r = vres_find(ptr);
    if (r == NULL || size > r->base + r->size - a)
        return hipErrorInvalidValue;
    for (struct vmap *m = g_vmaps; m; m = m->next) {
        if (!(a < m->addr + m->size && m->addr < e))
            continue;
        if (m->addr < a || m->addr + m->size > e)
            return hipErrorInvalidValue; /* would split a mapping */
    }
    /* a reserved range with nothing mapped unmaps successfully, as in CUDA */
    for (struct vmap *m = g_vmaps, *n; m; m = n) {
        n = m->next;
        if (m->addr >= a && m->addr + m->size <= e) {
            struct vhandle *h = m->h;
            vmap_unlink(m);
            h->maps--;
            vh_maybe_free(h);
        }
    }
    mmap(ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return hipSuccess;
}

static hipError_t impl_hipMemSetAccess(void *ptr, size_t size, const hipMemAccessDesc *desc,
                                       size_t count)
{
    NEED_DEVICE();
    uintptr_t a = (uintptr_t)ptr, e = a + size;
    if (ptr == NULL || size == 0 || desc == NULL || count == 0 || e < a)
        return hipErrorInvalidValue;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != hipMemLocationTypeDevice || !devid_ok(desc[i].location.id))
            return hipErrorInvalidValue;
        int f = desc[i].flags;
        if (f != hipMemAccessFlagsProtNone && f != hipMemAccessFlagsProtRead &&
            f != hipMemAccessFlagsProtReadWrite)
            return hipErrorInvalidValue;
    }
    /* as CUDA: the range must be fully mapped and made of whole mappings */
    for (uintptr_t cur = a; cur < e;) {
        struct vmap *m = vmap_find((void *)cur);
        if (m == NULL || m->addr != cur || m->size > e - cur)
            return hipErrorInvalidValue;
        cur = m->addr + m->size;
    }
    for (struct vmap *m = g_vmaps; m; m = m->next) {
        if (m->addr < a || m->addr + m->size > e)
            continue;
        unsigned char acc = 0;
        for (size_t i = 0; i < count; i++)
            m->access[desc[i].location.id] = (unsigned char)desc[i].flags;
        for (int d = 0; d < HIPDOUBLE_MAX_DEVICES; d++)
            acc |= m->access[d];
        int prot = acc == hipMemAccessFlagsProtReadWrite ? PROT_READ | PROT_WRITE
                   : acc ? PROT_READ
                         : PROT_NONE;
        mprotect((void *)m->addr, m->size, prot);
    }
    return hipSuccess;
}

static hipError_t impl_hipMemGetAccess(unsigned long long *flags, const hipMemLocation *loc, void *ptr)
{
    NEED_DEVICE();
    if (flags == NULL || loc == NULL || ptr == NULL)
        return hipErrorInvalidValue;
    if (loc->type != hipMemLocationTypeDevice || !devid_ok(loc->id))
        return hipErrorInvalidValue;
    struct vmap *m = vmap_find(ptr);
    if (m == NULL)
        return hipErrorInvalidValue;
    *flags = m->access[loc->id];
    return hipSuccess;
}

static hipError_t impl_hipMemExportToShareableHandle(void *sh, void *handle, int type,
                                                     unsigned long long flags)
{
    NEED_DEVICE();
    if (ver_is_60_61())
        return hipErrorNotSupported; /* 1.8: 6.0 and 6.1 */
    if (sh == NULL || flags != 0)
        return hipErrorInvalidValue;
    struct vhandle *h = vh_find(handle);
    if (h == NULL)
        return hipErrorInvalidValue;
    /* as CUDA: only the handle type requested at creation (POSIX fd here) can be exported */
    if (type != hipMemHandleTypePosixFileDescriptor || h->htype != hipMemHandleTypePosixFileDescriptor)
        return hipErrorInvalidValue;
    int fd = dup(h->fd);
    if (fd < 0)
        return hipErrorOutOfMemory;
    *(int *)sh = fd;
    return hipSuccess;
}

static hipError_t impl_hipMemImportFromShareableHandle(void **handle, void *os, int type)
{
    NEED_DEVICE();
    if (ver_is_60_61())
        return hipErrorNotSupported;
    if (handle == NULL)
        return hipErrorInvalidValue;
    if (type != hipMemHandleTypePosixFileDescriptor)
        return hipErrorNotSupported;
    int fd;
    if (ver_ge(7, 0)) {
        if ((uintptr_t)os > (uintptr_t)INT_MAX)
            return hipErrorInvalidValue; /* 7.x: the fd by value */
        fd = (int)(uintptr_t)os;
    } else if (safe_read_int(os, &fd) != 0) {
        return hipErrorInvalidValue; /* 6.2/6.3 (and the double's < 6.0): a pointer to the fd */
    }
    if (fd < 0)
        return hipErrorInvalidValue;
    char path[64], link[256];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n < 0)
        return hipErrorInvalidValue;
    link[n] = 0;
    int pid = 0, dev = 0;
    unsigned long long id = 0;
    if (sscanf(link, "/memfd:hipdouble-vmm-%d-%llu-%d", &pid, &id, &dev) != 3)
        return hipErrorInvalidValue;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size <= 0)
        return hipErrorInvalidValue;
    int nfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (nfd < 0)
        return hipErrorOutOfMemory;
    struct vhandle *h = calloc(1, sizeof *h);
    if (h == NULL) {
        close(nfd);
        return hipErrorOutOfMemory;
    }
    h->fd = nfd;
    h->size = (size_t)st.st_size;
    h->device = devid_ok(dev) ? dev : 0;
    h->htype = hipMemHandleTypePosixFileDescriptor;
    h->refs = 1;
    h->imported = 1;
    h->id = g_next_id++;
    h->next = g_vhandles;
    g_vhandles = h;
    *handle = h;
    return hipSuccess;
}

static hipError_t impl_hipMemRetainAllocationHandle(void **handle, void *addr)
{
    NEED_DEVICE();
    if (handle == NULL || addr == NULL)
        return hipErrorInvalidValue;
    struct vmap *m = vmap_find(addr);
    if (m == NULL)
        return hipErrorInvalidValue;
    m->h->refs++;
    *handle = m->h;
    return hipSuccess;
}

static hipError_t impl_hipMemGetAllocationPropertiesFromHandle(void *prop, void *handle)
{
    NEED_DEVICE();
    if (prop == NULL)
        return hipErrorInvalidValue;
    struct vhandle *h = vh_find(handle);
    if (h == NULL)
        return hipErrorInvalidValue;
    struct pprop pp = {hipMemAllocationTypePinned, h->htype, hipMemLocationTypeDevice, h->device};
    prop_write(prop, &pp);
    return hipSuccess;
}

static hipError_t impl_hipMemGetAllocationGranularity(size_t *gran, const void *prop, int option)
{
    NEED_DEVICE();
    if (gran == NULL || prop == NULL || (option != 0 && option != 1))
        return hipErrorInvalidValue;
    struct pprop pp;
    prop_read(prop, &pp);
    hipError_t e = prop_check(&pp);
    if (e != hipSuccess)
        return e;
    *gran = HIPDOUBLE_GRANULARITY;
    return hipSuccess;
}

static void mode_set_devices(int count, size_t memory)
{
    if (count < 0)
        count = 0;
    if (count > HIPDOUBLE_MAX_DEVICES)
        count = HIPDOUBLE_MAX_DEVICES;
    g_ndev = count;
    g_devmem = memory;
    g_gen++;
}

static void mode_clear_last_error(void) {}

/* ========================================================================================== */
#else /* HIPDOUBLE_FORWARD_CUDA */
/* ========================================================================================== */
/* FORWARD MODE: hip* -> CUDA runtime (and driver for VMM), as HIP's NVIDIA platform does     */
/* ========================================================================================== */

static const char *const g_mode = "forward";

_Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(hipIpcMemHandle_t), "ipc handle size");
_Static_assert(sizeof(CUmemAccessDesc) == sizeof(hipMemAccessDesc), "access desc size");
_Static_assert(sizeof(CUmemLocation) == sizeof(hipMemLocation), "location size");

/*
 * cudaError_t / CUresult -> hipError_t.  Numbers that HIP defines with the same meaning pass
 * through unchanged (1.2: "="); everything else (cudaErrorStubLibrary 34,
 * cudaErrorDevicesUnavailable 46, cudaErrorNotPermitted 800, SystemNotReady 802,
 * SystemDriverMismatch 803, CompatNotSupportedOnDevice 804, ...) becomes hipErrorUnknown.
 */
static const int g_same_codes[] = {
    0,   1,   2,   3,   4,   5,   6,   7,   8,   9,   12,  13,  17,  21,  35,  52,  53,
    98,  100, 101, 200, 201, 202, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215,
    216, 217, 218, 219, 300, 301, 302, 303, 304, 400, 401, 500, 600, 700, 701, 702, 704,
    705, 708, 709, 710, 712, 713, 719, 720, 801, 900, 901, 902, 903, 904, 905, 906, 907,
    908, 910, 999,
};

static hipError_t err_from_cuda(int e)
{
    for (size_t i = 0; i < sizeof g_same_codes / sizeof g_same_codes[0]; i++)
        if (g_same_codes[i] == e)
            return e;
    return hipErrorUnknown;
}

#define CUDART(call) err_from_cuda((int)(call))
#define CUDRV(call) err_from_cuda((int)(call))

static int fw_ndev(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        return 0;
    return n;
}

static int cur_dev(void)
{
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess)
        return 0;
    return d;
}

/* make the current device's primary context current on this thread (driver calls need one) */
static hipError_t fw_ctx(void) { return CUDART(cudaFree(NULL)); }

static CUmemLocation fw_mem_location(int device)
{
    CUmemLocation l;
    memset(&l, 0, sizeof l);
    l.type = CU_MEM_LOCATION_TYPE_DEVICE;
    l.id = device;
    return l;
}

static struct cudaMemLocation rt_location(int device)
{
    struct cudaMemLocation l;
    memset(&l, 0, sizeof l);
    if (device == hipCpuDeviceId) {
        l.type = cudaMemLocationTypeHost;
        l.id = 0;
    } else {
        l.type = cudaMemLocationTypeDevice;
        l.id = device;
    }
    return l;
}

static void vh_destroy(struct vhandle *h) { (void)h; /* CUDA owns the memory */ }

static void track_alloc(int kind, void *p, size_t size, unsigned flags, int device)
{
    if (p == NULL)
        return;
    dbl_lock();
    struct alloc *a = NULL;
    if (kind == K_IPC)
        for (struct alloc *x = g_allocs; x; x = x->next)
            if (x->kind == K_IPC && x->base == (uintptr_t)p) {
                x->refs++;
                a = x;
                break;
            }
    if (a == NULL) {
        a = alloc_new(kind, (uintptr_t)p, size ? size : 1);
        if (a != NULL) {
            a->flags = flags;
            a->device = device;
        }
    }
    dbl_unlock();
}

static void untrack_alloc(const void *p, int kind)
{
    dbl_lock();
    for (struct alloc *a = g_allocs; a; a = a->next)
        if (a->base == (uintptr_t)p && a->kind == kind) {
            if (--a->refs <= 0)
                alloc_unlink(a);
            break;
        }
    dbl_unlock();
}

static int tracked_flags(const void *p, unsigned *flags)
{
    int found = 0;
    dbl_lock();
    struct alloc *a = alloc_find(p);
    if (a != NULL && a->kind != K_DEVICE && a->kind != K_IPC) {
        *flags = a->flags;
        found = 1;
    }
    dbl_unlock();
    return found;
}

static void release_all(void) /* lock held */
{
    int any = g_allocs || g_vhandles || g_vmaps || g_vres || g_streams || g_events;
    int caller = -1;
    for (int d = 0; d < HIPDOUBLE_MAX_DEVICES; d++)
        for (int p = 0; p < HIPDOUBLE_MAX_DEVICES; p++)
            if (g_peer_on[d][p]) { /* peer access enabled through the double: disable it */
                if (caller < 0 && cudaGetDevice(&caller) != cudaSuccess)
                    caller = 0;
                if (cudaSetDevice(d) == cudaSuccess)
                    (void)cudaDeviceDisablePeerAccess(p);
                g_peer_on[d][p] = 0;
                any = 1;
            }
    if (caller >= 0)
        (void)cudaSetDevice(caller);
    if (any)
        (void)cudaFree(NULL);
    while (g_events) {
        (void)cudaEventDestroy((cudaEvent_t)g_events->handle);
        event_unlink(g_events);
    }
    while (g_vmaps) {
        struct vmap *m = g_vmaps;
        (void)cuMemUnmap((CUdeviceptr)m->addr, m->size);
        m->h->maps--;
        vmap_unlink(m);
    }
    while (g_vhandles) {
        struct vhandle *h = g_vhandles;
        g_vhandles = h->next;
        for (long i = 0; i < h->refs; i++)
            (void)cuMemRelease(h->cu);
        free(h);
    }
    while (g_vres) {
        (void)cuMemAddressFree((CUdeviceptr)g_vres->base, g_vres->size);
        vres_unlink(g_vres);
    }
    while (g_allocs) {
        struct alloc *a = g_allocs;
        void *p = (void *)a->base;
        switch (a->kind) {
        case K_DEVICE: /* cudaFree takes cudaMallocAsync memory too (CUDA 13 cuda_runtime_api.h) */
        case K_MANAGED: (void)cudaFree(p); break;
        case K_HOST: (void)cudaFreeHost(p); break;
        case K_REGISTERED: (void)cudaHostUnregister(p); break;
        case K_IPC:
            for (long i = 0; i < a->refs; i++)
                (void)cudaIpcCloseMemHandle(p);
            break;
        default: break;
        }
        alloc_unlink(a);
    }
    while (g_streams) {
        (void)cudaStreamDestroy((cudaStream_t)g_streams->handle);
        stream_unlink(g_streams);
    }
    if (any)
        (void)cudaGetLastError();
}

/* ---------------- device management ---------------- */

static hipError_t impl_hipInit(unsigned flags) { return CUDRV(cuInit(flags)); }

static hipError_t impl_hipGetDeviceCount(int *count)
{
    if (count == NULL)
        return hipErrorInvalidValue;
    return CUDART(cudaGetDeviceCount(count));
}

static hipError_t impl_hipSetDevice(int id) { return CUDART(cudaSetDevice(id)); }

static hipError_t impl_hipGetDevice(int *id)
{
    if (id == NULL)
        return hipErrorInvalidValue;
    return CUDART(cudaGetDevice(id));
}

/* 1.7: HIP attribute id -> cudaDeviceAttr id */
static const int g_attr_map[][2] = {
    {hipDeviceAttributeCanMapHostMemory, 19},
    {hipDeviceAttributeCanUseHostPointerForRegisteredMem, 91},
    {hipDeviceAttributeConcurrentManagedAccess, 89},
    {hipDeviceAttributeDirectManagedMemAccessFromHost, 101},
    {hipDeviceAttributeHostNativeAtomicSupported, 86},
    {hipDeviceAttributeIntegrated, 18},
    {hipDeviceAttributeComputeCapabilityMajor, 75},
    {hipDeviceAttributeComputeCapabilityMinor, 76},
    {hipDeviceAttributeManagedMemory, 83},
    {hipDeviceAttributeMultiprocessorCount, 16},
    {hipDeviceAttributePageableMemoryAccess, 88},
    {hipDeviceAttributePageableMemoryAccessUsesHostPageTables, 100},
    {hipDeviceAttributePciBusId, 33},
    {hipDeviceAttributePciDeviceId, 34},
    {hipDeviceAttributePciDomainID, 50},
    {hipDeviceAttributeUnifiedAddressing, 41},
    {hipDeviceAttributeMemoryPoolsSupported, 115},
    {hipDeviceAttributeWarpSize, 10},
    {hipDeviceAttributeMaxThreadsPerBlock, 1},
    {hipDeviceAttributeClockRate, 13},
};

static hipError_t impl_hipDeviceGetAttribute(int *pi, int attr, int device)
{
    if (pi == NULL)
        return hipErrorInvalidValue;
    int v;
    dbl_lock();
    int over = attr_override_get(attr, &v);
    dbl_unlock();
    if (over) {
        if (device < 0 || device >= fw_ndev())
            return hipErrorInvalidDevice;
        *pi = v;
        return hipSuccess;
    }
    for (size_t i = 0; i < sizeof g_attr_map / sizeof g_attr_map[0]; i++)
        if (g_attr_map[i][0] == attr)
            return CUDART(cudaDeviceGetAttribute(pi, (enum cudaDeviceAttr)g_attr_map[i][1], device));
    if (attr == hipDeviceAttributeHostRegisterSupported) {
        if (!ver_ge(6, 0))
            return hipErrorInvalidValue;
        return CUDART(cudaDeviceGetAttribute(pi, cudaDevAttrHostRegisterSupported, device));
    }
    if (attr == hipDeviceAttributeTotalGlobalMem || attr == hipDeviceAttributeVirtualMemoryManagementSupported) {
        if (attr == hipDeviceAttributeVirtualMemoryManagementSupported && !ver_ge(6, 0))
            return hipErrorInvalidValue;
        hipError_t e = CUDRV(cuInit(0));
        CUdevice dev;
        if (e == hipSuccess)
            e = CUDRV(cuDeviceGet(&dev, device));
        if (e != hipSuccess)
            return e;
        if (attr == hipDeviceAttributeVirtualMemoryManagementSupported)
            return CUDRV(cuDeviceGetAttribute(pi, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
        size_t total = 0;
        e = CUDRV(cuDeviceTotalMem(&total, dev));
        if (e == hipSuccess)
            *pi = total > INT_MAX ? INT_MAX : (int)total;
        return e;
    }
    /* AMD-only attributes (IsLargeBar, FineGrainSupport, ...) have no CUDA twin */
    return hipErrorInvalidValue;
}

static hipError_t impl_hipDeviceGetName(char *name, int len, int device)
{
    if (name == NULL || len <= 0)
        return hipErrorInvalidValue;
    CUdevice dev;
    hipError_t e = CUDRV(cuInit(0));
    if (e == hipSuccess)
        e = CUDRV(cuDeviceGet(&dev, device));
    if (e == hipSuccess)
        e = CUDRV(cuDeviceGetName(name, len, dev));
    return e;
}

static hipError_t impl_hipDeviceTotalMem(size_t *bytes, int device)
{
    if (bytes == NULL)
        return hipErrorInvalidValue;
    CUdevice dev;
    hipError_t e = CUDRV(cuInit(0));
    if (e == hipSuccess)
        e = CUDRV(cuDeviceGet(&dev, device));
    if (e == hipSuccess)
        e = CUDRV(cuDeviceTotalMem(bytes, dev));
    return e;
}

static hipError_t impl_hipMemGetInfo(size_t *freeb, size_t *total)
{
    if (freeb == NULL || total == NULL)
        return hipErrorInvalidValue;
    return CUDART(cudaMemGetInfo(freeb, total));
}

static hipError_t impl_hipDeviceSynchronize(void) { return CUDART(cudaDeviceSynchronize()); }

/* ---------------- device memory ---------------- */

static hipError_t impl_hipMalloc(void **ptr, size_t size)
{
    if (ptr == NULL)
        return hipErrorInvalidValue;
    if (size == 0) {
        *ptr = NULL;
        return hipSuccess;
    }
    hipError_t e = CUDART(cudaMalloc(ptr, size));
    if (e == hipSuccess)
        track_alloc(K_DEVICE, *ptr, size, 0, cur_dev());
    return e;
}

static hipError_t impl_hipExtMallocWithFlags(void **ptr, size_t size, unsigned flags)
{
    if (flags != 0)
        return hipErrorNotSupported; /* no CUDA twin for fine-grained / signal / uncached */
    return impl_hipMalloc(ptr, size);
}

static hipError_t impl_hipFree(void *ptr)
{
    hipError_t e = CUDART(cudaFree(ptr));
    if (e == hipSuccess && ptr != NULL) {
        untrack_alloc(ptr, K_DEVICE);
        untrack_alloc(ptr, K_MANAGED);
    }
    return e;
}

/* ---------------- host memory ---------------- */

static hipError_t host_alloc(void **ptr, size_t size, unsigned flags)
{
    if (ptr == NULL || !host_flags_ok(flags))
        return hipErrorInvalidValue;
    if (size == 0) {
        *ptr = NULL;
        return hipSuccess;
    }
    /* AMD-only bits (NumaUser, Coherent, NonCoherent, Uncached) are 0 on HIP's NVIDIA platform */
    hipError_t e = CUDART(cudaHostAlloc(ptr, size, flags & 0x7u));
    if (e == hipSuccess)
        track_alloc(K_HOST, *ptr, size, flags, cur_dev());
    return e;
}

static hipError_t impl_hipHostMalloc(void **ptr, size_t size, unsigned flags)
{
    return host_alloc(ptr, size, flags);
}
static hipError_t impl_hipExtHostAlloc(void **ptr, size_t size, unsigned flags)
{
    return host_alloc(ptr, size, flags);
}
static hipError_t impl_hipHostAlloc(void **ptr, size_t size, unsigned flags)
{
    return host_alloc(ptr, size, flags);
}

static hipError_t host_free(void *ptr)
{
    hipError_t e = CUDART(cudaFreeHost(ptr));
    if (e == hipSuccess && ptr != NULL)
        untrack_alloc(ptr, K_HOST);
    return e;
}

static hipError_t impl_hipHostFree(void *ptr) { return host_free(ptr); }
static hipError_t impl_hipFreeHost(void *ptr) { return host_free(ptr); }

static hipError_t impl_hipHostRegister(void *ptr, size_t size, unsigned flags)
{
    if (!register_flags_ok(flags))
        return hipErrorInvalidValue;
    /* 0x8 is AMD coarse-grain (CUDA would read it as ReadOnly); 0x80000000 is AMD-only */
    hipError_t e = CUDART(cudaHostRegister(ptr, size, flags & 0x7u));
    if (e == hipSuccess)
        track_alloc(K_REGISTERED, ptr, size, flags, cur_dev());
    return e;
}

static hipError_t impl_hipHostUnregister(void *ptr)
{
    hipError_t e = CUDART(cudaHostUnregister(ptr));
    if (e == hipSuccess)
        untrack_alloc(ptr, K_REGISTERED);
    return e;
}

static hipError_t impl_hipHostGetDevicePointer(void **dev, void *host, unsigned flags)
{
    if (dev == NULL)
        return hipErrorInvalidValue;
    return CUDART(cudaHostGetDevicePointer(dev, host, flags));
}

static hipError_t impl_hipHostGetFlags(unsigned *flags, void *host)
{
    if (flags == NULL)
        return hipErrorInvalidValue;
    hipError_t e = CUDART(cudaHostGetFlags(flags, host));
    unsigned f;
    if (e == hipSuccess && tracked_flags(host, &f))
        *flags = f; /* report the HIP flags the caller passed, AMD-only bits included */
    return e;
}

/* ---------------- managed memory ---------------- */

static hipError_t impl_hipMallocManaged(void **ptr, size_t size, unsigned flags)
{
    if (ptr == NULL || size == 0)
        return hipErrorInvalidValue;
    if (flags != hipMemAttachGlobal && flags != hipMemAttachHost)
        return hipErrorInvalidValue;
    hipError_t e = CUDART(cudaMallocManaged(ptr, size, flags));
    if (e == hipSuccess)
        track_alloc(K_MANAGED, *ptr, size, flags, cur_dev());
    return e;
}

static hipError_t impl_hipMemAdvise(const void *ptr, size_t count, int advice, int device)
{
    /* 100/101 (coarse grain) are AMD-only: HIP on NVIDIA rejects them */
    if (advice < hipMemAdviseSetReadMostly || advice > hipMemAdviseUnsetAccessedBy)
        return hipErrorInvalidValue;
    if (device != hipCpuDeviceId && !devid_ok(device))
        return hipErrorInvalidValue; /* as CLR (and host mode), whatever the advice */
    return CUDART(cudaMemAdvise(ptr, count, (enum cudaMemoryAdvise)advice, rt_location(device)));
}

static int fw_stream_ok(void *stream)
{
    dbl_lock();
    int ok = stream_ok(stream);
    dbl_unlock();
    return ok;
}

static hipError_t impl_hipMemPrefetchAsync(const void *ptr, size_t count, int device, void *stream)
{
    if (!fw_stream_ok(stream))
        return hipErrorInvalidHandle;
    return CUDART(cudaMemPrefetchAsync(ptr, count, rt_location(device), 0, (cudaStream_t)stream));
}

static hipError_t impl_hipMemRangeGetAttribute(void *data, size_t data_size, int attribute,
                                               const void *ptr, size_t count)
{
    if (attribute < hipMemRangeAttributeReadMostly || attribute > hipMemRangeAttributeLastPrefetchLocation)
        return hipErrorInvalidValue; /* 100 (coherency mode) is AMD-only */
    return CUDART(cudaMemRangeGetAttribute(data, data_size, (enum cudaMemRangeAttribute)attribute, ptr,
                                           count));
}

static hipError_t impl_hipMemRangeGetAttributes(void **data, size_t *data_sizes, int *attributes,
                                                size_t num, const void *ptr, size_t count)
{
    if (data == NULL || data_sizes == NULL || attributes == NULL || num == 0)
        return hipErrorInvalidValue;
    for (size_t i = 0; i < num; i++)
        if (attributes[i] < hipMemRangeAttributeReadMostly ||
            attributes[i] > hipMemRangeAttributeLastPrefetchLocation)
            return hipErrorInvalidValue;
    _Static_assert(sizeof(enum cudaMemRangeAttribute) == sizeof(int), "enum size");
    return CUDART(cudaMemRangeGetAttributes(data, data_sizes, (enum cudaMemRangeAttribute *)attributes,
                                            num, ptr, count));
}

static hipError_t impl_hipStreamAttachMemAsync(void *stream, void *ptr, size_t length, unsigned flags)
{
    if (!fw_stream_ok(stream))
        return hipErrorInvalidHandle;
    if (flags != hipMemAttachGlobal && flags != hipMemAttachHost && flags != hipMemAttachSingle)
        return hipErrorInvalidValue;
    return CUDART(cudaStreamAttachMemAsync((cudaStream_t)stream, ptr, length, flags));
}

/* ---------------- streams ---------------- */

static hipError_t stream_create(void **stream, unsigned flags)
{
    if (stream == NULL || (flags & ~hipStreamNonBlocking))
        return hipErrorInvalidValue;
    cudaStream_t s;
    hipError_t e = CUDART(cudaStreamCreateWithFlags(&s, flags));
    if (e != hipSuccess)
        return e;
    struct dstream *d = calloc(1, sizeof *d);
    if (d == NULL) {
        (void)cudaStreamDestroy(s);
        return hipErrorOutOfMemory;
    }
    d->handle = (void *)s;
    d->flags = flags;
    d->device = cur_dev();
    dbl_lock();
    d->next = g_streams;
    g_streams = d;
    dbl_unlock();
    *stream = (void *)s;
    return hipSuccess;
}

static hipError_t impl_hipStreamCreate(void **stream) { return stream_create(stream, 0); }
static hipError_t impl_hipStreamCreateWithFlags(void **stream, unsigned flags)
{
    return stream_create(stream, flags);
}

static hipError_t impl_hipStreamDestroy(void *stream)
{
    dbl_lock();
    struct dstream *s = stream ? stream_find(stream) : NULL;
    if (s != NULL)
        stream_unlink(s);
    dbl_unlock();
    if (s == NULL)
        return hipErrorInvalidHandle;
    return CUDART(cudaStreamDestroy((cudaStream_t)stream));
}

static hipError_t impl_hipStreamSynchronize(void *stream)
{
    if (!fw_stream_ok(stream))
        return hipErrorInvalidHandle;
    return CUDART(cudaStreamSynchronize((cudaStream_t)stream));
}

/* ---------------- stream-ordered allocation and events ---------------- */
/* hipEvent_t is the cudaEvent_t; the double tracks the events it created and the
 * hipMallocAsync memory it handed out, so unknown ones are refused before reaching CUDA. */

static hipError_t impl_hipMallocAsync(void **ptr, size_t size, void *stream)
{
    if (ptr == NULL || !fw_stream_ok(stream))
        return hipErrorInvalidValue; /* CLR (hip_mempool.cpp): an invalid stream too */
    if (size == 0) {
        *ptr = NULL;
        return hipSuccess;
    }
    hipError_t e = CUDART(cudaMallocAsync(ptr, size, (cudaStream_t)stream));
    if (e == hipSuccess && *ptr != NULL) {
        track_alloc(K_DEVICE, *ptr, size, 0, cur_dev());
        dbl_lock();
        for (struct alloc *a = g_allocs; a; a = a->next)
            if (a->base == (uintptr_t)*ptr && a->kind == K_DEVICE)
                a->async = 1;
        dbl_unlock();
    }
    return e;
}

static hipError_t impl_hipFreeAsync(void *ptr, void *stream)
{
    if (ptr == NULL || !fw_stream_ok(stream))
        return hipErrorInvalidValue; /* CLR (hip_mempool.cpp) */
    dbl_lock();
    struct alloc *a = alloc_find(ptr);
    int known = a != NULL && a->kind == K_DEVICE && a->base == (uintptr_t)ptr;
    dbl_unlock();
    if (!known)
        return hipErrorInvalidValue; /* as host mode: the base of device memory the double gave */
    hipError_t e = CUDART(cudaFreeAsync(ptr, (cudaStream_t)stream));
    if (e == hipSuccess)
        untrack_alloc(ptr, K_DEVICE);
    return e;
}

static int fw_event_known(void *event)
{
    dbl_lock();
    int known = event_find(event) != NULL;
    dbl_unlock();
    return known;
}

static hipError_t impl_hipEventCreateWithFlags(void **event, unsigned flags)
{
    if (event == NULL || !event_flags_ok(flags))
        return hipErrorInvalidValue;
    /* Default, BlockingSync, DisableTiming and Interprocess have CUDA's numbers (0, 1, 2, 4);
     * the release flags are no-ops on HIP's NVIDIA platform */
    cudaEvent_t ev;
    hipError_t e = CUDART(cudaEventCreateWithFlags(
        &ev, flags & (hipEventBlockingSync | hipEventDisableTiming | hipEventInterprocess)));
    if (e != hipSuccess)
        return e;
    struct devent *d = calloc(1, sizeof *d);
    if (d == NULL) {
        (void)cudaEventDestroy(ev);
        return hipErrorOutOfMemory;
    }
    d->handle = (void *)ev;
    d->flags = flags;
    d->device = cur_dev();
    dbl_lock();
    d->next = g_events;
    g_events = d;
    dbl_unlock();
    *event = (void *)ev;
    return hipSuccess;
}

static hipError_t impl_hipEventDestroy(void *event)
{
    if (event == NULL)
        return hipErrorInvalidHandle;
    dbl_lock();
    struct devent *d = event_find(event);
    if (d != NULL)
        event_unlink(d);
    dbl_unlock();
    if (d == NULL)
        return hipErrorContextIsDestroyed; /* CLR: not in its event set */
    return CUDART(cudaEventDestroy((cudaEvent_t)event));
}

static hipError_t impl_hipEventRecord(void *event, void *stream)
{
    if (!fw_event_known(event) || !fw_stream_ok(stream))
        return hipErrorInvalidHandle;
    return CUDART(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
}

static hipError_t impl_hipEventQuery(void *event)
{
    if (!fw_event_known(event))
        return hipErrorInvalidHandle;
    return CUDART(cudaEventQuery((cudaEvent_t)event)); /* cudaErrorNotReady = hipErrorNotReady */
}

static hipError_t impl_hipEventSynchronize(void *event)
{
    if (!fw_event_known(event))
        return hipErrorInvalidHandle;
    return CUDART(cudaEventSynchronize((cudaEvent_t)event));
}

static hipError_t impl_hipStreamWaitEvent(void *stream, void *event, unsigned flags)
{
    if (event == NULL)
        return hipErrorInvalidHandle;
    if (flags != 0)
        return hipErrorInvalidValue;
    if (!fw_stream_ok(stream))
        return hipErrorContextIsDestroyed; /* CLR (hip_stream.cpp) */
    if (!fw_event_known(event))
        return hipErrorInvalidHandle;
    return CUDART(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
}

/* ---------------- copies ---------------- */

static hipError_t impl_hipMemcpy(void *dst, const void *src, size_t n, int kind)
{
    if (kind < 0 || kind > 4)
        return hipErrorInvalidMemcpyDirection;
    return CUDART(cudaMemcpy(dst, src, n, (enum cudaMemcpyKind)kind));
}

static hipError_t impl_hipMemset(void *dst, int value, size_t n)
{
    return CUDART(cudaMemset(dst, value, n));
}

/* ---------------- peer access and copies between devices ---------------- */

static hipError_t impl_hipDeviceCanAccessPeer(int *can, int device, int peer)
{
    if (can == NULL)
        return hipErrorInvalidValue;
    if (device == peer) { /* HIP: a device is not its own peer (CLR answers 0 first) */
        *can = 0;
        return hipSuccess;
    }
    return CUDART(cudaDeviceCanAccessPeer(can, device, peer));
}

static void fw_peer_mark(int device, int peer, unsigned char on)
{
    if (devid_ok(device) && devid_ok(peer)) {
        dbl_lock();
        g_peer_on[device][peer] = on;
        dbl_unlock();
    }
}

static hipError_t impl_hipDeviceEnablePeerAccess(int peer, unsigned flags)
{
    if (flags != 0)
        return hipErrorInvalidValue;
    int d = cur_dev();
    if (peer == d) /* CLR: not its own peer -> InvalidDevice (CUDA 13 on an H100 answers 217) */
        return hipErrorInvalidDevice;
    hipError_t e = CUDART(cudaDeviceEnablePeerAccess(peer, 0));
    if (e == hipSuccess)
        fw_peer_mark(d, peer, 1);
    return e;
}

static hipError_t impl_hipDeviceDisablePeerAccess(int peer)
{
    int d = cur_dev();
    if (peer == d) /* CLR: not its own peer -> InvalidDevice (CUDA 13 on an H100 answers 705) */
        return hipErrorInvalidDevice;
    hipError_t e = CUDART(cudaDeviceDisablePeerAccess(peer));
    if (e == hipSuccess)
        fw_peer_mark(d, peer, 0);
    return e;
}

static hipError_t impl_hipMemcpyPeer(void *dst, int dst_device, const void *src, int src_device, size_t n)
{
    if (!devid_ok(dst_device) || !devid_ok(src_device))
        return hipErrorInvalidDevice; /* CLR checks the range first */
    return CUDART(cudaMemcpyPeer(dst, dst_device, src, src_device, n));
}

/* ---------------- IPC ---------------- */

static hipError_t impl_hipIpcGetMemHandle(hipIpcMemHandle_t *handle, void *ptr)
{
    if (handle == NULL)
        return hipErrorInvalidValue;
    dbl_lock();
    struct alloc *a = alloc_find(ptr);
    int interior = a != NULL && a->kind == K_DEVICE && a->base != (uintptr_t)ptr;
    dbl_unlock();
    if (interior)
        return hipErrorInvalidValue; /* HIP: the base pointer of a hipMalloc allocation */
    cudaIpcMemHandle_t ch;
    hipError_t e = CUDART(cudaIpcGetMemHandle(&ch, ptr));
    if (e == hipSuccess)
        memcpy(handle, &ch, sizeof ch);
    return e;
}

static hipError_t impl_hipIpcOpenMemHandle(void **ptr, hipIpcMemHandle_t handle, unsigned flags)
{
    if (ptr == NULL || !ipc_flags_ok(flags))
        return hipErrorInvalidValue;
    cudaIpcMemHandle_t ch;
    memcpy(&ch, &handle, sizeof ch);
    /* CUDA always wants cudaIpcMemLazyEnablePeerAccess (1) */
    hipError_t e = CUDART(cudaIpcOpenMemHandle(ptr, ch, cudaIpcMemLazyEnablePeerAccess));
    if (e == hipSuccess)
        track_alloc(K_IPC, *ptr, 0, 0, cur_dev());
    return e;
}

static hipError_t impl_hipMemGetAddressRange(void **base, size_t *size, void *ptr)
{
    if (base == NULL || size == NULL)
        return hipErrorInvalidValue;
    CUdeviceptr b = 0;
    hipError_t e = CUDRV(cuMemGetAddressRange(&b, size, (CUdeviceptr)(uintptr_t)ptr));
    if (e == hipSuccess)
        *base = (void *)(uintptr_t)b;
    return e;
}

static hipError_t impl_hipIpcCloseMemHandle(void *ptr)
{
    hipError_t e = CUDART(cudaIpcCloseMemHandle(ptr));
    if (e == hipSuccess)
        untrack_alloc(ptr, K_IPC);
    return e;
}

/* ---------------- pointer attributes ---------------- */

static hipError_t impl_hipPointerGetAttributes(hipPointerAttribute_t *attr, const void *ptr)
{
    if (attr == NULL || ptr == NULL)
        return hipErrorInvalidValue;
    struct cudaPointerAttributes ca;
    memset(&ca, 0, sizeof ca);
    hipError_t e = CUDART(cudaPointerGetAttributes(&ca, ptr));
    if (e != hipSuccess)
        return e;
    hipPointerAttribute_t r;
    memset(&r, 0, sizeof r);
    r.device = ca.device;
    r.devicePointer = ca.devicePointer;
    r.hostPointer = ca.hostPointer;
    switch (ca.type) {
    case cudaMemoryTypeHost: r.type = mt_host(); break;
    case cudaMemoryTypeDevice: r.type = mt_device(); break;
    case cudaMemoryTypeManaged:
        r.type = mt_managed();
        r.isManaged = 1;
        break;
    case cudaMemoryTypeUnregistered:
    default:
        if (!ver_ge(6, 0))
            return hipErrorInvalidValue;
        r.type = 0;
        r.device = hipInvalidDeviceId;
        break;
    }
    unsigned f;
    if (tracked_flags(ptr, &f))
        r.allocationFlags = f;
    else if (ca.type == cudaMemoryTypeHost && cudaHostGetFlags(&f, (void *)(uintptr_t)ptr) == cudaSuccess)
        r.allocationFlags = f;
    else
        (void)cudaGetLastError();
    *attr = r;
    return hipSuccess;
}

/* ---------------- virtual memory management ---------------- */

static hipError_t fw_granularity(int device, size_t *g)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    p.location = fw_mem_location(device);
    return CUDRV(cuMemGetAllocationGranularity(g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
}

static hipError_t impl_hipMemAddressReserve(void **ptr, size_t size, size_t alignment, void *addr,
                                            unsigned long long flags)
{
    if (ptr == NULL || flags != 0)
        return hipErrorInvalidValue;
    hipError_t e = fw_ctx();
    size_t g = 0;
    if (e == hipSuccess)
        e = fw_granularity(cur_dev(), &g);
    if (e != hipSuccess)
        return e;
    if (size == 0 || size % g != 0)
        return hipErrorMemoryAllocation; /* CLR */
    CUdeviceptr d = 0;
    e = CUDRV(cuMemAddressReserve(&d, size, alignment, (CUdeviceptr)(uintptr_t)addr, 0));
    if (e != hipSuccess)
        return e;
    struct vres *r = calloc(1, sizeof *r);
    if (r != NULL) {
        r->base = (uintptr_t)d;
        r->size = size;
        dbl_lock();
        r->next = g_vres;
        g_vres = r;
        dbl_unlock();
    }
    *ptr = (void *)(uintptr_t)d;
    return hipSuccess;
}

static hipError_t impl_hipMemAddressFree(void *ptr, size_t size)
{
    hipError_t e = fw_ctx();
    if (e == hipSuccess)
        e = CUDRV(cuMemAddressFree((CUdeviceptr)(uintptr_t)ptr, size));
    if (e == hipSuccess) {
        dbl_lock();
        for (struct vres *r = g_vres; r; r = r->next)
            if (r->base == (uintptr_t)ptr) {
                vres_unlink(r);
                break;
            }
        dbl_unlock();
    }
    return e;
}

static struct vhandle *fw_track_handle(unsigned long long cu, size_t size, int device, int htype,
                                       int imported) /* lock held */
{
    for (struct vhandle *h = g_vhandles; h; h = h->next)
        if (h->cu == cu) {
            h->refs++;
            return h;
        }
    struct vhandle *h = calloc(1, sizeof *h);
    if (h == NULL)
        return NULL;
    h->fd = -1;
    h->cu = cu;
    h->size = size;
    h->device = device;
    h->htype = htype;
    h->refs = 1;
    h->imported = imported;
    h->id = g_next_id++;
    h->next = g_vhandles;
    g_vhandles = h;
    return h;
}

static hipError_t impl_hipMemCreate(void **handle, size_t size, const void *prop,
                                    unsigned long long flags)
{
    if (handle == NULL || prop == NULL || flags != 0)
        return hipErrorInvalidValue;
    struct pprop pp;
    prop_read(prop, &pp);
    hipError_t e = prop_check(&pp);
    if (e != hipSuccess)
        return e;
    if (pp.htype != hipMemHandleTypeNone && pp.htype != hipMemHandleTypePosixFileDescriptor)
        return hipErrorNotSupported;
    e = fw_ctx();
    if (e != hipSuccess)
        return e;
    CUmemAllocationProp cp;
    memset(&cp, 0, sizeof cp);
    cp.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    cp.requestedHandleTypes = (CUmemAllocationHandleType)pp.htype;
    cp.location = fw_mem_location(pp.loc_id);
    CUmemGenericAllocationHandle h = 0;
    e = CUDRV(cuMemCreate(&h, size, &cp, 0));
    if (e != hipSuccess)
        return e;
    dbl_lock();
    fw_track_handle(h, size, pp.loc_id, pp.htype, 0);
    dbl_unlock();
    *handle = (void *)(uintptr_t)h;
    return hipSuccess;
}

static hipError_t impl_hipMemRelease(void *handle)
{
    hipError_t e = fw_ctx();
    if (e == hipSuccess)
        e = CUDRV(cuMemRelease((CUmemGenericAllocationHandle)(uintptr_t)handle));
    if (e == hipSuccess) {
        dbl_lock();
        struct vhandle *h = vh_find(handle);
        if (h != NULL) {
            h->refs--;
            vh_maybe_free(h);
        }
        dbl_unlock();
    }
    return e;
}

static hipError_t impl_hipMemMap(void *ptr, size_t size, size_t offset, void *handle,
                                 unsigned long long flags)
{
    if (offset != 0 || flags != 0) /* CLR: offset and flags must be 0 */
        return hipErrorInvalidValue;
    hipError_t e = fw_ctx();
    if (e == hipSuccess)
        e = CUDRV(cuMemMap((CUdeviceptr)(uintptr_t)ptr, size, 0,
                           (CUmemGenericAllocationHandle)(uintptr_t)handle, 0));
    if (e != hipSuccess)
        return e;
    dbl_lock();
    struct vhandle *h = vh_find(handle);
    if (h == NULL && (h = fw_track_handle((uintptr_t)handle, size, cur_dev(), 0, 0)) != NULL)
        h->refs = 0; /* a handle the double did not hand out: keep it only while mapped */
    struct vmap *m = h ? calloc(1, sizeof *m) : NULL;
    if (m != NULL) {
        m->addr = (uintptr_t)ptr;
        m->size = size;
        m->h = h;
        m->next = g_vmaps;
        g_vmaps = m;
        h->maps++;
    }
    dbl_unlock();
    return hipSuccess;
}

static hipError_t impl_hipMemUnmap(void *ptr, size_t size)
{
    hipError_t e = fw_ctx();
    if (e == hipSuccess)
        e = CUDRV(cuMemUnmap((CUdeviceptr)(uintptr_t)ptr, size));
    if (e != hipSuccess)
        return e;
    uintptr_t a = (uintptr_t)ptr, end = a + size;
    dbl_lock();
    for (struct vmap *m = g_vmaps, *n; m; m = n) {
        n = m->next;
        if (m->addr >= a && m->addr + m->size <= end) {
            struct vhandle *h = m->h;
            vmap_unlink(m);
            h->maps--;
            vh_maybe_free(h);
        }
    }
    dbl_unlock();
    return hipSuccess;
}

static hipError_t impl_hipMemSetAccess(void *ptr, size_t size, const hipMemAccessDesc *desc,
                                       size_t count)
{
    if (desc == NULL || count == 0)
        return hipErrorInvalidValue;
    CUmemAccessDesc *cd = calloc(count, sizeof *cd);
    if (cd == NULL)
        return hipErrorOutOfMemory;
    for (size_t i = 0; i < count; i++) {
        cd[i].location.type = (CUmemLocationType)desc[i].location.type;
        cd[i].location.id = desc[i].location.id;
        cd[i].flags = (CUmemAccess_flags)desc[i].flags;
    }
    hipError_t e = fw_ctx();
    if (e == hipSuccess)
        e = CUDRV(cuMemSetAccess((CUdeviceptr)(uintptr_t)ptr, size, cd, count));
    free(cd);
    return e;
}

static hipError_t impl_hipMemGetAccess(unsigned long long *flags, const hipMemLocation *loc, void *ptr)
{
    if (flags == NULL || loc == NULL)
        return hipErrorInvalidValue;
    CUmemLocation l;
    memset(&l, 0, sizeof l);
    l.type = (CUmemLocationType)loc->type;
    l.id = loc->id;
    hipError_t e = fw_ctx();
    if (e == hipSuccess)
        e = CUDRV(cuMemGetAccess(flags, &l, (CUdeviceptr)(uintptr_t)ptr));
    return e;
}

static hipError_t impl_hipMemExportToShareableHandle(void *sh, void *handle, int type,
                                                     unsigned long long flags)
{
    if (ver_is_60_61())
        return hipErrorNotSupported;
    if (sh == NULL)
        return hipErrorInvalidValue;
    hipError_t e = fw_ctx();
    if (e == hipSuccess)
        e = CUDRV(cuMemExportToShareableHandle(sh, (CUmemGenericAllocationHandle)(uintptr_t)handle,
                                               (CUmemAllocationHandleType)type, flags));
    return e;
}

static hipError_t impl_hipMemImportFromShareableHandle(void **handle, void *os, int type)
{
    if (ver_is_60_61())
        return hipErrorNotSupported;
    if (handle == NULL)
        return hipErrorInvalidValue;
    int fd;
    if (ver_ge(7, 0)) {
        if ((uintptr_t)os > (uintptr_t)INT_MAX)
            return hipErrorInvalidValue;
        fd = (int)(uintptr_t)os;
    } else if (safe_read_int(os, &fd) != 0) {
        return hipErrorInvalidValue;
    }
    hipError_t e = fw_ctx();
    CUmemGenericAllocationHandle h = 0;
    if (e == hipSuccess)
        e = CUDRV(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                                 (CUmemAllocationHandleType)type)); /* 4.5: by value */
    if (e != hipSuccess)
        return e;
    dbl_lock();
    fw_track_handle(h, 0, cur_dev(), type, 1);
    dbl_unlock();
    *handle = (void *)(uintptr_t)h;
    return hipSuccess;
}

static hipError_t impl_hipMemRetainAllocationHandle(void **handle, void *addr)
{
    if (handle == NULL)
        return hipErrorInvalidValue;
    hipError_t e = fw_ctx();
    CUmemGenericAllocationHandle h = 0;
    if (e == hipSuccess)
        e = CUDRV(cuMemRetainAllocationHandle(&h, addr));
    if (e != hipSuccess)
        return e;
    dbl_lock();
    fw_track_handle(h, 0, cur_dev(), 0, 0);
    dbl_unlock();
    *handle = (void *)(uintptr_t)h;
    return hipSuccess;
}

static hipError_t impl_hipMemGetAllocationPropertiesFromHandle(void *prop, void *handle)
{
    if (prop == NULL)
        return hipErrorInvalidValue;
    CUmemAllocationProp cp;
    memset(&cp, 0, sizeof cp);
    hipError_t e = fw_ctx();
    if (e == hipSuccess)
        e = CUDRV(cuMemGetAllocationPropertiesFromHandle(&cp, (CUmemGenericAllocationHandle)(uintptr_t)handle));
    if (e != hipSuccess)
        return e;
    struct pprop pp = {(int)cp.type, (int)cp.requestedHandleTypes, (int)cp.location.type, cp.location.id};
    prop_write(prop, &pp);
    return hipSuccess;
}

static hipError_t impl_hipMemGetAllocationGranularity(size_t *gran, const void *prop, int option)
{
    if (gran == NULL || prop == NULL)
        return hipErrorInvalidValue;
    struct pprop pp;
    prop_read(prop, &pp);
    hipError_t e = prop_check(&pp);
    if (e != hipSuccess)
        return e;
    CUmemAllocationProp cp;
    memset(&cp, 0, sizeof cp);
    cp.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    cp.requestedHandleTypes = (CUmemAllocationHandleType)pp.htype;
    cp.location = fw_mem_location(pp.loc_id);
    e = fw_ctx();
    if (e == hipSuccess)
        e = CUDRV(cuMemGetAllocationGranularity(gran, &cp, (CUmemAllocationGranularity_flags)option));
    return e;
}

static void mode_set_devices(int count, size_t memory)
{
    (void)count; /* forward mode: the real devices */
    (void)memory;
}

static void mode_clear_last_error(void) { (void)cudaGetLastError(); }

#endif /* HIPDOUBLE_FORWARD_CUDA */

/* ========================================================================================== */
/* Public hip* entry points (both modes)                                                      */
/* ========================================================================================== */

API hipError_t hipInit(unsigned int flags)
{
    ENTER(hipInit, A_UI(flags));
    BODY(impl_hipInit(flags));
}

API hipError_t hipRuntimeGetVersion(int *runtimeVersion)
{
    ENTER(hipRuntimeGetVersion, A_P(runtimeVersion));
    if (runtimeVersion == NULL)
        return dbl_leave(hipErrorInvalidValue);
    *runtimeVersion = version_get();
    return dbl_leave(hipSuccess);
}

API hipError_t hipDriverGetVersion(int *driverVersion)
{
    ENTER(hipDriverGetVersion, A_P(driverVersion));
    if (driverVersion == NULL)
        return dbl_leave(hipErrorInvalidValue);
    *driverVersion = version_get();
    return dbl_leave(hipSuccess);
}

API hipError_t hipGetDeviceCount(int *count)
{
    ENTER(hipGetDeviceCount, A_P(count));
    BODY(impl_hipGetDeviceCount(count));
}

API hipError_t hipSetDevice(int deviceId)
{
    ENTER(hipSetDevice, A_I(deviceId));
    BODY(impl_hipSetDevice(deviceId));
}

API hipError_t hipGetDevice(int *deviceId)
{
    ENTER(hipGetDevice, A_P(deviceId));
    BODY(impl_hipGetDevice(deviceId));
}

API hipError_t hipDeviceGetAttribute(int *pi, int attr, int deviceId)
{
    ENTER(hipDeviceGetAttribute, A_P(pi), A_I(attr), A_I(deviceId));
    BODY(impl_hipDeviceGetAttribute(pi, attr, deviceId));
}

API hipError_t hipDeviceGetName(char *name, int len, int device)
{
    ENTER(hipDeviceGetName, A_P(name), A_I(len), A_I(device));
    BODY(impl_hipDeviceGetName(name, len, device));
}

API hipError_t hipDeviceTotalMem(size_t *bytes, int device)
{
    ENTER(hipDeviceTotalMem, A_P(bytes), A_I(device));
    BODY(impl_hipDeviceTotalMem(bytes, device));
}

API hipError_t hipMemGetInfo(size_t *freeBytes, size_t *totalBytes)
{
    ENTER(hipMemGetInfo, A_P(freeBytes), A_P(totalBytes));
    BODY(impl_hipMemGetInfo(freeBytes, totalBytes));
}

API hipError_t hipDeviceSynchronize(void)
{
    ENTER0(hipDeviceSynchronize);
    BODY(impl_hipDeviceSynchronize());
}

API hipError_t hipMalloc(void **ptr, size_t size)
{
    ENTER(hipMalloc, A_P(ptr), A_U(size));
    BODY(impl_hipMalloc(ptr, size));
}

API hipError_t hipExtMallocWithFlags(void **ptr, size_t sizeBytes, unsigned int flags)
{
    ENTER(hipExtMallocWithFlags, A_P(ptr), A_U(sizeBytes), A_UI(flags));
    BODY(impl_hipExtMallocWithFlags(ptr, sizeBytes, flags));
}

API hipError_t hipFree(void *ptr)
{
    ENTER(hipFree, A_P(ptr));
    BODY(impl_hipFree(ptr));
}

API hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags)
{
    ENTER(hipHostMalloc, A_P(ptr), A_U(size), A_UI(flags));
    BODY(impl_hipHostMalloc(ptr, size, flags));
}

#if !defined(HIPDOUBLE_BUILD_VERSION) || HIPDOUBLE_BUILD_VERSION >= 60300000
/* new in 6.3: a double built for an older version does not export it */
API hipError_t hipExtHostAlloc(void **ptr, size_t size, unsigned int flags)
{
    ENTER(hipExtHostAlloc, A_P(ptr), A_U(size), A_UI(flags));
    BODY(impl_hipExtHostAlloc(ptr, size, flags));
}
#else
UNUSED static hipError_t (*const g_unused_ext_host_alloc)(void **, size_t, unsigned) = impl_hipExtHostAlloc;
#endif

API hipError_t hipHostAlloc(void **ptr, size_t size, unsigned int flags)
{
    ENTER(hipHostAlloc, A_P(ptr), A_U(size), A_UI(flags));
    BODY(impl_hipHostAlloc(ptr, size, flags));
}

API hipError_t hipHostFree(void *ptr)
{
    ENTER(hipHostFree, A_P(ptr));
    BODY(impl_hipHostFree(ptr));
}

API hipError_t hipFreeHost(void *ptr)
{
    ENTER(hipFreeHost, A_P(ptr));
    BODY(impl_hipFreeHost(ptr));
}

API hipError_t hipHostRegister(void *hostPtr, size_t sizeBytes, unsigned int flags)
{
    ENTER(hipHostRegister, A_P(hostPtr), A_U(sizeBytes), A_UI(flags));
    BODY(impl_hipHostRegister(hostPtr, sizeBytes, flags));
}

API hipError_t hipHostUnregister(void *hostPtr)
{
    ENTER(hipHostUnregister, A_P(hostPtr));
    BODY(impl_hipHostUnregister(hostPtr));
}

API hipError_t hipHostGetDevicePointer(void **devPtr, void *hstPtr, unsigned int flags)
{
    ENTER(hipHostGetDevicePointer, A_P(devPtr), A_P(hstPtr), A_UI(flags));
    BODY(impl_hipHostGetDevicePointer(devPtr, hstPtr, flags));
}

API hipError_t hipHostGetFlags(unsigned int *flagsPtr, void *hostPtr)
{
    ENTER(hipHostGetFlags, A_P(flagsPtr), A_P(hostPtr));
    BODY(impl_hipHostGetFlags(flagsPtr, hostPtr));
}

API hipError_t hipMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    ENTER(hipMallocManaged, A_P(devPtr), A_U(size), A_UI(flags));
    BODY(impl_hipMallocManaged(devPtr, size, flags));
}

API hipError_t hipMemAdvise(const void *devPtr, size_t count, int advice, int device)
{
    ENTER(hipMemAdvise, A_P(devPtr), A_U(count), A_I(advice), A_I(device));
    BODY(impl_hipMemAdvise(devPtr, count, advice, device));
}

API hipError_t hipMemPrefetchAsync(const void *devPtr, size_t count, int device, hipStream_t stream)
{
    ENTER(hipMemPrefetchAsync, A_P(devPtr), A_U(count), A_I(device), A_P(stream));
    BODY(impl_hipMemPrefetchAsync(devPtr, count, device, stream));
}

API hipError_t hipMemRangeGetAttribute(void *data, size_t dataSize, int attribute, const void *devPtr,
                                       size_t count)
{
    ENTER(hipMemRangeGetAttribute, A_P(data), A_U(dataSize), A_I(attribute), A_P(devPtr), A_U(count));
    BODY(impl_hipMemRangeGetAttribute(data, dataSize, attribute, devPtr, count));
}

API hipError_t hipMemRangeGetAttributes(void **data, size_t *dataSizes, int *attributes,
                                        size_t numAttributes, const void *devPtr, size_t count)
{
    ENTER(hipMemRangeGetAttributes, A_P(data), A_P(dataSizes), A_P(attributes), A_U(numAttributes),
          A_P(devPtr), A_U(count));
    BODY(impl_hipMemRangeGetAttributes(data, dataSizes, attributes, numAttributes, devPtr, count));
}

API hipError_t hipStreamAttachMemAsync(hipStream_t stream, void *devPtr, size_t length, unsigned int flags)
{
    ENTER(hipStreamAttachMemAsync, A_P(stream), A_P(devPtr), A_U(length), A_UI(flags));
    BODY(impl_hipStreamAttachMemAsync(stream, devPtr, length, flags));
}

API hipError_t hipStreamCreate(hipStream_t *stream)
{
    ENTER(hipStreamCreate, A_P(stream));
    BODY(impl_hipStreamCreate(stream));
}

API hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags)
{
    ENTER(hipStreamCreateWithFlags, A_P(stream), A_UI(flags));
    BODY(impl_hipStreamCreateWithFlags(stream, flags));
}

API hipError_t hipStreamDestroy(hipStream_t stream)
{
    ENTER(hipStreamDestroy, A_P(stream));
    BODY(impl_hipStreamDestroy(stream));
}

API hipError_t hipStreamSynchronize(hipStream_t stream)
{
    ENTER(hipStreamSynchronize, A_P(stream));
    BODY(impl_hipStreamSynchronize(stream));
}

#if !defined(HIPDOUBLE_BUILD_VERSION) || HIPDOUBLE_BUILD_VERSION >= 50100000
/* exported from 5.1 (Debian's 5.2 library: symbol version hip_5.1): a double built for an
 * older version does not export them, and aml-hip then lacks the STREAM_ORDERED group */
API hipError_t hipMallocAsync(void **dev_ptr, size_t size, hipStream_t stream)
{
    ENTER(hipMallocAsync, A_P(dev_ptr), A_U(size), A_P(stream));
    BODY(impl_hipMallocAsync(dev_ptr, size, stream));
}

API hipError_t hipFreeAsync(void *dev_ptr, hipStream_t stream)
{
    ENTER(hipFreeAsync, A_P(dev_ptr), A_P(stream));
    BODY(impl_hipFreeAsync(dev_ptr, stream));
}
#else
UNUSED static hipError_t (*const g_unused_malloc_async)(void **, size_t, void *) = impl_hipMallocAsync;
UNUSED static hipError_t (*const g_unused_free_async)(void *, void *) = impl_hipFreeAsync;
#endif

API hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned flags)
{
    ENTER(hipEventCreateWithFlags, A_P(event), A_UI(flags));
    BODY(impl_hipEventCreateWithFlags(event, flags));
}

API hipError_t hipEventDestroy(hipEvent_t event)
{
    ENTER(hipEventDestroy, A_P(event));
    BODY(impl_hipEventDestroy(event));
}

API hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream)
{
    ENTER(hipEventRecord, A_P(event), A_P(stream));
    BODY(impl_hipEventRecord(event, stream));
}

API hipError_t hipEventQuery(hipEvent_t event)
{
    ENTER(hipEventQuery, A_P(event));
    BODY(impl_hipEventQuery(event));
}

API hipError_t hipEventSynchronize(hipEvent_t event)
{
    ENTER(hipEventSynchronize, A_P(event));
    BODY(impl_hipEventSynchronize(event));
}

API hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags)
{
    ENTER(hipStreamWaitEvent, A_P(stream), A_P(event), A_UI(flags));
    BODY(impl_hipStreamWaitEvent(stream, event, flags));
}

API hipError_t hipMemcpy(void *dst, const void *src, size_t sizeBytes, int kind)
{
    ENTER(hipMemcpy, A_P(dst), A_P(src), A_U(sizeBytes), A_I(kind));
    BODY(impl_hipMemcpy(dst, src, sizeBytes, kind));
}

API hipError_t hipMemcpyPeer(void *dst, int dstDeviceId, const void *src, int srcDeviceId, size_t sizeBytes)
{
    ENTER(hipMemcpyPeer, A_P(dst), A_I(dstDeviceId), A_P(src), A_I(srcDeviceId), A_U(sizeBytes));
    BODY(impl_hipMemcpyPeer(dst, dstDeviceId, src, srcDeviceId, sizeBytes));
}

API hipError_t hipDeviceCanAccessPeer(int *canAccessPeer, int deviceId, int peerDeviceId)
{
    ENTER(hipDeviceCanAccessPeer, A_P(canAccessPeer), A_I(deviceId), A_I(peerDeviceId));
    BODY(impl_hipDeviceCanAccessPeer(canAccessPeer, deviceId, peerDeviceId));
}

API hipError_t hipDeviceEnablePeerAccess(int peerDeviceId, unsigned int flags)
{
    ENTER(hipDeviceEnablePeerAccess, A_I(peerDeviceId), A_UI(flags));
    BODY(impl_hipDeviceEnablePeerAccess(peerDeviceId, flags));
}

API hipError_t hipDeviceDisablePeerAccess(int peerDeviceId)
{
    ENTER(hipDeviceDisablePeerAccess, A_I(peerDeviceId));
    BODY(impl_hipDeviceDisablePeerAccess(peerDeviceId));
}

API hipError_t hipMemset(void *dst, int value, size_t sizeBytes)
{
    ENTER(hipMemset, A_P(dst), A_I(value), A_U(sizeBytes));
    BODY(impl_hipMemset(dst, value, sizeBytes));
}

API hipError_t hipIpcGetMemHandle(hipIpcMemHandle_t *handle, void *devPtr)
{
    ENTER(hipIpcGetMemHandle, A_P(handle), A_P(devPtr));
    BODY(impl_hipIpcGetMemHandle(handle, devPtr));
}

API hipError_t hipIpcOpenMemHandle(void **devPtr, hipIpcMemHandle_t handle, unsigned int flags)
{
    /* the 64-byte handle is passed by value; argument 1 records its first 8 bytes */
    long long head;
    memcpy(&head, handle.reserved, sizeof head);
    ENTER(hipIpcOpenMemHandle, A_P(devPtr), head, A_UI(flags));
    BODY(impl_hipIpcOpenMemHandle(devPtr, handle, flags));
}

API hipError_t hipIpcCloseMemHandle(void *devPtr)
{
    ENTER(hipIpcCloseMemHandle, A_P(devPtr));
    BODY(impl_hipIpcCloseMemHandle(devPtr));
}

API hipError_t hipMemGetAddressRange(void **pbase, size_t *psize, void *dptr)
{
    ENTER(hipMemGetAddressRange, A_P(pbase), A_P(psize), A_P(dptr));
    BODY(impl_hipMemGetAddressRange(pbase, psize, dptr));
}

API hipError_t hipPointerGetAttributes(hipPointerAttribute_t *attributes, const void *ptr)
{
    ENTER(hipPointerGetAttributes, A_P(attributes), A_P(ptr));
    BODY(impl_hipPointerGetAttributes(attributes, ptr));
}

API const char *hipGetErrorName(hipError_t error)
{
    int unused;
    const long long a[] = {A_I(error)};
    (void)dbl_enter(FN_hipGetErrorName, 1, a, &unused); /* counted; not injectable */
    const struct errname *e = err_lookup(error);
    return e ? e->name : "hipErrorUnknown";
}

API const char *hipGetErrorString(hipError_t error)
{
    int unused;
    const long long a[] = {A_I(error)};
    (void)dbl_enter(FN_hipGetErrorString, 1, a, &unused);
    const struct errname *e = err_lookup(error);
    return e ? e->text : "unknown error";
}

API hipError_t hipGetLastError(void)
{
    ENTER0(hipGetLastError);
    hipError_t e = t_last_error;
    t_last_error = hipSuccess;
    mode_clear_last_error();
    return e;
}

API hipError_t hipPeekAtLastError(void)
{
    ENTER0(hipPeekAtLastError);
    return t_last_error;
}

API hipError_t hipMemAddressReserve(void **ptr, size_t size, size_t alignment, void *addr,
                                    unsigned long long flags)
{
    ENTER(hipMemAddressReserve, A_P(ptr), A_U(size), A_U(alignment), A_P(addr), A_U(flags));
    BODY(impl_hipMemAddressReserve(ptr, size, alignment, addr, flags));
}

API hipError_t hipMemAddressFree(void *devPtr, size_t size)
{
    ENTER(hipMemAddressFree, A_P(devPtr), A_U(size));
    BODY(impl_hipMemAddressFree(devPtr, size));
}

API hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *handle, size_t size, const void *prop,
                            unsigned long long flags)
{
    ENTER(hipMemCreate, A_P(handle), A_U(size), A_P(prop), A_U(flags));
    BODY(impl_hipMemCreate(handle, size, prop, flags));
}

API hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle)
{
    ENTER(hipMemRelease, A_P(handle));
    BODY(impl_hipMemRelease(handle));
}

API hipError_t hipMemMap(void *ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,
                         unsigned long long flags)
{
    ENTER(hipMemMap, A_P(ptr), A_U(size), A_U(offset), A_P(handle), A_U(flags));
    BODY(impl_hipMemMap(ptr, size, offset, handle, flags));
}

API hipError_t hipMemUnmap(void *ptr, size_t size)
{
    ENTER(hipMemUnmap, A_P(ptr), A_U(size));
    BODY(impl_hipMemUnmap(ptr, size));
}

API hipError_t hipMemSetAccess(void *ptr, size_t size, const hipMemAccessDesc *desc, size_t count)
{
    ENTER(hipMemSetAccess, A_P(ptr), A_U(size), A_P(desc), A_U(count));
    BODY(impl_hipMemSetAccess(ptr, size, desc, count));
}

API hipError_t hipMemGetAccess(unsigned long long *flags, const hipMemLocation *location, void *ptr)
{
    ENTER(hipMemGetAccess, A_P(flags), A_P(location), A_P(ptr));
    BODY(impl_hipMemGetAccess(flags, location, ptr));
}

API hipError_t hipMemExportToShareableHandle(void *shareableHandle, hipMemGenericAllocationHandle_t handle,
                                             int handleType, unsigned long long flags)
{
    ENTER(hipMemExportToShareableHandle, A_P(shareableHandle), A_P(handle), A_I(handleType), A_U(flags));
    BODY(impl_hipMemExportToShareableHandle(shareableHandle, handle, handleType, flags));
}

API hipError_t hipMemImportFromShareableHandle(hipMemGenericAllocationHandle_t *handle, void *osHandle,
                                               int shHandleType)
{
    ENTER(hipMemImportFromShareableHandle, A_P(handle), A_P(osHandle), A_I(shHandleType));
    BODY(impl_hipMemImportFromShareableHandle(handle, osHandle, shHandleType));
}

API hipError_t hipMemRetainAllocationHandle(hipMemGenericAllocationHandle_t *handle, void *addr)
{
    ENTER(hipMemRetainAllocationHandle, A_P(handle), A_P(addr));
    BODY(impl_hipMemRetainAllocationHandle(handle, addr));
}

API hipError_t hipMemGetAllocationPropertiesFromHandle(void *prop, hipMemGenericAllocationHandle_t handle)
{
    ENTER(hipMemGetAllocationPropertiesFromHandle, A_P(prop), A_P(handle));
    BODY(impl_hipMemGetAllocationPropertiesFromHandle(prop, handle));
}

API hipError_t hipMemGetAllocationGranularity(size_t *granularity, const void *prop, int option)
{
    ENTER(hipMemGetAllocationGranularity, A_P(granularity), A_P(prop), A_I(option));
    BODY(impl_hipMemGetAllocationGranularity(granularity, prop, option));
}

/* ========================================================================================== */
/* Control API                                                                                */
/* ========================================================================================== */

static long long env_ll(const char *name, long long dflt)
{
    const char *s = getenv(name);
    if (s == NULL || *s == 0)
        return dflt;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (errno != 0 || end == s)
        return dflt;
    switch (*end) { /* optional K/M/G suffix (binary) for sizes */
    case 'k': case 'K': v <<= 10; break;
    case 'm': case 'M': v <<= 20; break;
    case 'g': case 'G': v <<= 30; break;
    default: break;
    }
    return v;
}

static int inject_locked(int fn, int error, long skip, long times)
{
    for (int i = 0; i < HIPDOUBLE_MAX_INJECTIONS; i++)
        if (!g_inj[i].active) {
            g_inj[i].active = 1;
            g_inj[i].fn = fn;
            g_inj[i].error = error;
            g_inj[i].skip = skip;
            g_inj[i].times = times;
            return 0;
        }
    return -3;
}

static void faults_from_env(void) /* lock held or at load */
{
    const char *s = getenv("HIPDOUBLE_FAULTS");
    if (s == NULL || *s == 0)
        return;
    char *copy = strdup(s), *save = NULL;
    if (copy == NULL)
        return;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char fname[96];
        int err = 0;
        long skip = 0, times = 1;
        int n = sscanf(tok, " %95[^:]:%d:%ld:%ld", fname, &err, &skip, &times);
        int fn = n >= 2 ? fn_index(fname) : -1;
        if (fn < 0 || skip < 0 || times == 0 || times < -1 || inject_locked(fn, err, skip, times) != 0)
            fprintf(stderr, "hipdouble: ignoring HIPDOUBLE_FAULTS entry '%s'\n", tok);
    }
    free(copy);
}

static void config_from_env(void) /* lock held or at load */
{
    long long v = env_ll("HIPDOUBLE_VERSION", HIPDOUBLE_DEFAULT_VERSION);
    __atomic_store_n(&g_version, (int)v, __ATOMIC_RELAXED);
    long long n = env_ll("HIPDOUBLE_DEVICES", 1);
    long long m = env_ll("HIPDOUBLE_DEVICE_MEMORY", 1LL << 30);
    g_ndev = (int)(n < 0 ? 0 : (n > HIPDOUBLE_MAX_DEVICES ? HIPDOUBLE_MAX_DEVICES : n));
    g_devmem = m < 0 ? 0 : (size_t)m;
    g_gen++;
    g_nattr_over = 0;
    memset(g_peer_off, 0, sizeof g_peer_off);
    memset(g_inj, 0, sizeof g_inj);
    for (int i = 0; i < FN_COUNT; i++) {
        g_stats[i].calls = 0;
        g_stats[i].nargs = -1;
        memset(g_stats[i].args, 0, sizeof g_stats[i].args);
    }
    faults_from_env();
}

__attribute__((constructor)) static void hipdouble_load(void) { config_from_env(); }

/* Make `function` return `error` (doing nothing) after `skip` calls that run normally, for
 * `times` calls (-1: forever).  Returns 0, -1 unknown function, -2 bad skip/times, -3 table full. */
API int hipdouble_inject(const char *function, int error, int skip, int times)
{
    int fn = fn_index(function);
    if (fn < 0)
        return -1;
    if (skip < 0 || times == 0 || times < -1)
        return -2;
    dbl_lock();
    int r = inject_locked(fn, error, skip, times);
    dbl_unlock();
    return r;
}

/* Clear injections, counters and recorded arguments, free everything, re-read the environment. */
API void hipdouble_reset(void)
{
    dbl_lock();
    release_all();
    config_from_env();
    dbl_unlock();
    t_last_error = hipSuccess;
}

API void hipdouble_set_version(int version) { __atomic_store_n(&g_version, version, __ATOMIC_RELAXED); }

API int hipdouble_get_version(void) { return version_get(); }

/* host mode: number of emulated devices and memory budget of each; forward mode: ignored */
API void hipdouble_set_devices(int count, size_t memory_per_device)
{
    dbl_lock();
    mode_set_devices(count, memory_per_device);
    dbl_unlock();
}

/* Force hipDeviceGetAttribute(attr) to answer `value` on every device.  Returns 0 or -1 (full). */
API int hipdouble_set_attribute(int attr, int value)
{
    int r = 0;
    dbl_lock();
    int i;
    for (i = 0; i < g_nattr_over; i++)
        if (g_attr_over[i].attr == attr)
            break;
    if (i < g_nattr_over) {
        g_attr_over[i].value = value;
    } else if (g_nattr_over < (int)(sizeof g_attr_over / sizeof g_attr_over[0])) {
        g_attr_over[g_nattr_over].attr = attr;
        g_attr_over[g_nattr_over].value = value;
        g_nattr_over++;
    } else {
        r = -1;
    }
    dbl_unlock();
    return r;
}

/* Host mode: whether device `device` has a peer path to `peer` (hipDeviceCanAccessPeer; every
 * pair of distinct devices has one until this says otherwise; reset restores that).  Forward
 * mode: ignored (CUDA answers).  Returns 0, or -1 for an index out of 0..31. */
API int hipdouble_set_peer(int device, int peer, int can_access)
{
    if (device < 0 || device >= HIPDOUBLE_MAX_DEVICES || peer < 0 || peer >= HIPDOUBLE_MAX_DEVICES)
        return -1;
    dbl_lock();
    g_peer_off[device][peer] = can_access ? 0 : 1;
    dbl_unlock();
    return 0;
}

/* Number of calls of a hip* symbol since load/reset; -1 for an unknown name. */
API long hipdouble_calls(const char *function)
{
    int fn = fn_index(function);
    if (fn < 0)
        return -1;
    dbl_lock();
    long c = g_stats[fn].calls;
    dbl_unlock();
    return c;
}

/* Live objects of a kind: device host managed registered ipc vmm_handle vmm_reservation
 * vmm_mapping stream event, peer (pairs with peer access enabled through the double), async (hipMallocAsync memory not freed yet, also counted as device)
 * and free_pending (host mode: hipFreeAsync queued on a stream that has not run it); -1 for an
 * unknown kind. */
API long hipdouble_live(const char *kind)
{
    if (kind == NULL)
        return -1;
    long n = 0;
    int k;
    for (k = 0; k < K_COUNT; k++)
        if (strcmp(kind, g_kind_names[k]) == 0)
            break;
    dbl_lock();
    if (k < K_COUNT) {
        for (struct alloc *a = g_allocs; a; a = a->next)
            n += a->kind == k && !a->pending; /* a queued hipFreeAsync: freed for the caller */
    } else if (strcmp(kind, "async") == 0) {
        for (struct alloc *a = g_allocs; a; a = a->next)
            n += a->async && !a->pending;
    } else if (strcmp(kind, "free_pending") == 0) {
        for (struct alloc *a = g_allocs; a; a = a->next)
            n += a->pending;
    } else if (strcmp(kind, "event") == 0) {
        for (struct devent *e = g_events; e; e = e->next)
            n++;
    } else if (strcmp(kind, "vmm_handle") == 0) {
        for (struct vhandle *h = g_vhandles; h; h = h->next)
            n++;
    } else if (strcmp(kind, "vmm_reservation") == 0) {
        for (struct vres *r = g_vres; r; r = r->next)
            n++;
    } else if (strcmp(kind, "vmm_mapping") == 0) {
        for (struct vmap *m = g_vmaps; m; m = m->next)
            n++;
    } else if (strcmp(kind, "stream") == 0) {
        for (struct dstream *s = g_streams; s; s = s->next)
            n++;
    } else if (strcmp(kind, "peer") == 0) {
        for (int d = 0; d < HIPDOUBLE_MAX_DEVICES; d++)
            for (int p = 0; p < HIPDOUBLE_MAX_DEVICES; p++)
                n += g_peer_on[d][p];
    } else {
        n = -1;
    }
    dbl_unlock();
    return n;
}

/* Number of arguments recorded for the last call: -1 unknown function, -2 never called. */
API int hipdouble_last_call_nargs(const char *function)
{
    int fn = fn_index(function);
    if (fn < 0)
        return -1;
    dbl_lock();
    int n = g_stats[fn].calls ? g_stats[fn].nargs : -2;
    dbl_unlock();
    return n;
}

/* Argument `index` (0-based, C parameter order) of the last call, as a 64-bit integer (pointers as
 * addresses, unsigned flags zero-extended; a by-value IPC handle as its first 8 bytes).
 * Returns 0, -1 unknown function, -2 never called, -3 bad index or NULL out. */
API int hipdouble_last_call_arg(const char *function, int index, long long *out)
{
    int fn = fn_index(function);
    if (fn < 0)
        return -1;
    int r = 0;
    dbl_lock();
    if (g_stats[fn].calls == 0)
        r = -2;
    else if (out == NULL || index < 0 || index >= g_stats[fn].nargs)
        r = -3;
    else
        *out = g_stats[fn].args[index];
    dbl_unlock();
    return r;
}

/* "host" or "forward" */
API const char *hipdouble_mode(void) { return g_mode; }
