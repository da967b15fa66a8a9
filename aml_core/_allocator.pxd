# The native allocator (aml_core/_allocator.pyx): a GPU runtime's allocation calls as C
# function pointers, and the fast path an area runs over them.
from ._buffer cimport AreaBase, BufferBase
from ._fastpath cimport FastPath

# The shapes CUDA's and HIP's runtime calls share (cudaX and hipX alike); 0 is success.
ctypedef int (*get_device_fn)(int *) noexcept nogil
ctypedef int (*malloc_fn)(void **, size_t) noexcept nogil
ctypedef int (*malloc_flags_fn)(void **, size_t, unsigned int) noexcept nogil
ctypedef int (*free_fn)(void *) noexcept nogil

# Modes an area may run natively (NativePath.mode), named by the values of
# aml_core.gpu.flags.AllocMode (a GPU area's flags decoded once, by decode_flags).
cdef enum:
    N_NONE = 0
    N_DEVICE = 1  # malloc / free
    N_MANAGED = 2  # malloc_managed(flags) / free, in granules
    N_HOST = 3  # host_alloc(flags) / free_host


cdef class NativeAllocator:
    cdef get_device_fn c_get_device
    cdef malloc_fn c_malloc
    cdef free_fn c_free
    cdef malloc_flags_fn c_malloc_managed
    cdef malloc_flags_fn c_host_alloc
    cdef free_fn c_free_host
    cdef int sentinel
    cdef bint has_sentinel
    cdef readonly object fail
    cdef readonly dict names
    cdef readonly object owner
    cdef readonly unsigned int attach_host
    cdef readonly unsigned int attach_global
    cdef readonly unsigned int host_portable

    cdef int failed(self, int code, str op, tuple args) except -1
    cdef int free_native(self, int mode, void *p) except -1


cdef class NativePath(FastPath):
    cdef readonly NativeAllocator allocator
    cdef int mode
    cdef int device  # the area's device (negative: the current one)
    cdef unsigned int flags
    cdef Py_ssize_t granule
    cdef int dl_type
    cdef bint host  # host-accessible buffers
    cdef bint dl_current  # DLPack device id: the current device (else 0)
    cdef dict records  # allocated size -> native record
    cdef object record  # allocated size -> a new native record (on a miss)
    cdef bint record_self  # record is the function of a method of the area: pass it
    cdef dict slow  # buffers whose key is here are freed by _free (IPC exports)


# A runtime's stream and event calls (CUDA's and HIP's share these shapes; 0 is success):
# the stream calls the allocator kernel makes, with no Python (docs/kernel.md, "Streams").
ctypedef int (*event_create_fn)(void **, unsigned int) noexcept nogil  # cudaEventCreateWithFlags
ctypedef int (*handle_fn)(void *) noexcept nogil  # cudaEventDestroy, cudaEventQuery, cudaStreamSynchronize
ctypedef int (*event_record_fn)(void *, void *) noexcept nogil  # cudaEventRecord(event, stream)
ctypedef int (*stream_wait_fn)(void *, void *, unsigned int) noexcept nogil  # cudaStreamWaitEvent

# NativeStreams' operations, in the order of its ``names`` (S_* index NativeStreams.OPS).
cdef enum:
    S_EVENT_CREATE = 0
    S_EVENT_DESTROY = 1
    S_EVENT_RECORD = 2
    S_STREAM_WAIT_EVENT = 3
    S_EVENT_QUERY = 4
    S_STREAM_SYNCHRONIZE = 5


cdef class NativeStreams:
    cdef event_create_fn c_event_create
    cdef handle_fn c_event_destroy
    cdef event_record_fn c_event_record
    cdef stream_wait_fn c_stream_wait_event
    cdef handle_fn c_event_query  # NULL: no query (a reclaim synchronizes)
    cdef handle_fn c_stream_synchronize
    cdef unsigned int event_flags
    cdef int not_ready  # event_query's "still running" code
    cdef bint has_sentinel  # the functions may raise a Python exception with this code
    cdef int sentinel
    cdef readonly bint needs_gil  # the calls run Python (trampolines): never from a hook without the GIL
    cdef readonly object fail
    cdef readonly tuple names
    cdef readonly object owner

    cdef int hand_over(self, void **event, unsigned long long other, unsigned long long stream,
                       int *op) noexcept nogil
    cdef int record(self, void **event, unsigned long long stream, int *op) noexcept nogil
    cdef int idle(self, void **event, unsigned long long stream, int *op) noexcept nogil
    cdef int failed(self, int code, int op) except -1
    cdef int synchronize(self, unsigned long long stream) except -1
    cdef int destroy(self, void *event) except -1
