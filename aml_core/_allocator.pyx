# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, binding=True, embedsignature.format=clinic
"""The native allocator: one implementation of an area's fast path (aml_core/_fastpath.pyx).

``NativeAllocator`` is a compiled ops table (after UMF's memory-provider ops): the C
addresses of a GPU runtime's allocation calls, whose CUDA and HIP signatures are the
same; one per runtime, shared by its areas. An area installs it for its mode
(``AreaBase._set_native``), which binds it to the area as a ``NativePath``: then
``mmap(size)`` without options and ``munmap`` of the buffers it made run in C from end
to end, with no Python frame (but the area's native-record factory, on a size's first
allocation): get the current device, allocate, make the buffer (the area tracks it),
and the reverse. Anything else (another device to select, options, a buffer with an
IPC export) takes the Python ``_allocate``/``_free`` path, which frees either kind of
buffer. The GIL is released around each native call, outside any bookkeeping.

A do-nothing allocator in C (``_noop_functions``, ``_noop_control``) runs the path
without a GPU, for tests and benchmarks.
"""

cimport cython
from libc.stdint cimport uintptr_t

from ._buffer cimport F_HOST, F_NATIVE, AreaBase, BufferBase
from ._capi cimport PY_SSIZE_T_MAX, PyErr_Occurred
from ._fastpath cimport FastPath

#: The operations of a NativeAllocator, as named in its ``names``.
OPS = ("get_device", "malloc", "free", "malloc_managed", "host_alloc", "free_host")

cdef dict NATIVE_MODES = {"device": N_DEVICE, "managed": N_MANAGED, "host": N_HOST}
cdef tuple EMPTY = ()


cdef inline size_t address(object value, str what) except? 0:
    cdef unsigned long long a = value
    if a == 0:
        raise ValueError(f"the address of {what} is NULL")
    return <size_t>a


@cython.auto_pickle(False)
cdef class NativeAllocator:
    """NativeAllocator(*, get_device, malloc, free, fail, names, malloc_managed=None, host_alloc=None, free_host=None, error_sentinel=None, attach_host=0, attach_global=0, host_portable=0, owner=None)
--

    A GPU runtime's allocation calls as C function pointers (integer addresses), with
    the signatures CUDA and HIP share:

    ============================  =============================================
    ``get_device(int *)``         cudaGetDevice / hipGetDevice
    ``malloc(void **, size_t)``   cudaMalloc / hipMalloc
    ``free(void *)``              cudaFree / hipFree
    ``malloc_managed(void **,     cudaMallocManaged / hipMallocManaged
    size_t, unsigned int)``
    ``host_alloc(void **,         cudaHostAlloc / hipHostMalloc (hipExtHostAlloc)
    size_t, unsigned int)``
    ``free_host(void *)``         cudaFreeHost / hipHostFree (hipFreeHost)
    ============================  =============================================

    Each returns 0 on success or the runtime's error code. ``names`` maps each operation
    (:data:`OPS`) to the native function's name. On a non-zero return (the error path
    only) the allocator calls ``fail(name, code, *args)``, which must raise the backend's
    translated AMLError (its table, its native cause); ``args`` are the call's size
    (allocations) and flags (``host_alloc``), for the message. ``error_sentinel``: the
    functions are Cython functions declared ``except ?error_sentinel`` (cuda-bindings'
    cyruntime): that return value with a Python exception set propagates the exception.
    ``attach_host``/``attach_global`` are the malloc_managed flags of
    cudaMemAttachHost/Global, ``host_portable`` the host_alloc flag of a portable
    allocation. The functions must stay loaded while the allocator lives (``owner`` is
    kept referenced for that)."""

    def __init__(
        self,
        *,
        get_device,
        malloc,
        free,
        fail,
        names,
        malloc_managed=None,
        host_alloc=None,
        free_host=None,
        error_sentinel=None,
        attach_host=0,
        attach_global=0,
        host_portable=0,
        owner=None,
    ):
        if not callable(fail):
            raise TypeError("fail must be callable")
        given = {"get_device": get_device, "malloc": malloc, "free": free, "malloc_managed": malloc_managed,
                 "host_alloc": host_alloc, "free_host": free_host}
        self.names = {}
        for op in OPS:
            if given[op] is not None:
                name = names[op]
                if not isinstance(name, str):
                    raise TypeError(f"names[{op!r}] must be a str")
                self.names[op] = name
        self.c_get_device = <get_device_fn>address(get_device, "get_device")
        self.c_malloc = <malloc_fn>address(malloc, "malloc")
        self.c_free = <free_fn>address(free, "free")
        if malloc_managed is not None:
            self.c_malloc_managed = <malloc_flags_fn>address(malloc_managed, "malloc_managed")
        if (host_alloc is None) != (free_host is None):
            raise ValueError("host_alloc and free_host come together")
        if host_alloc is not None:
            self.c_host_alloc = <malloc_flags_fn>address(host_alloc, "host_alloc")
            self.c_free_host = <free_fn>address(free_host, "free_host")
        self.has_sentinel = error_sentinel is not None
        self.sentinel = error_sentinel if self.has_sentinel else 0
        self.fail = fail
        self.owner = owner
        self.attach_host = attach_host
        self.attach_global = attach_global
        self.host_portable = host_portable

    def has(self, op, /):
        """Whether the allocator has the operation ``op`` (one of :data:`OPS`)."""
        return op in self.names

    def __repr__(self):
        return f"<aml NativeAllocator {', '.join(self.names.values())}>"

    cdef int failed(self, int code, str op, tuple args) except -1:
        """The error path of a call that returned ``code`` (non-zero): raise."""
        if self.has_sentinel and code == self.sentinel and PyErr_Occurred() != NULL:
            return -1  # the function raised a Python exception: propagate it
        self.fail(self.names[op], code, *args)
        raise SystemError(f"the fail hook of {self!r} returned instead of raising")

    def get_device(self):
        """The current device, through the compiled get_device."""
        cdef int dev = -1
        cdef int rc = self.c_get_device(&dev)
        if rc != 0:
            self.failed(rc, "get_device", EMPTY)
        return dev

    cdef int free_native(self, int mode, void *p) except -1:
        cdef int rc
        if mode == N_HOST:
            with nogil:
                rc = self.c_free_host(p)
            if rc != 0:
                self.failed(rc, "free_host", EMPTY)
        else:
            with nogil:
                rc = self.c_free(p)
            if rc != 0:
                self.failed(rc, "free", EMPTY)
        return 0


@cython.no_gc_clear  # an area's finalizers may still free through it after a collection
@cython.auto_pickle(False)
cdef class NativePath(FastPath):
    """NativePath(allocator, area, mode='device', *, dl_device_type=0, host_accessible=False, dl_device_current=True, flags=0, granule=1, records=None, record=None, slow_free=None)
--

    A NativeAllocator bound to one area for one mode: the area's fast path, made by
    ``area._set_native(allocator, mode, **options)``.

    ``mode``: "device" (malloc/free), "managed" (malloc_managed(flags) in ``granule``
    bytes/free) or "host" (host_alloc(flags)/free_host). Then ``mmap(size)`` without
    options, when the area's device (read now: it must not change) is negative or the
    current one, runs in C: get_device, the allocation, the buffer (host_accessible,
    DLPack device (dl_device_type, the current device if dl_device_current else 0),
    device: the current device, native: ``records[allocated size]``, or
    ``record(allocated size)`` on a miss), then the area's bookkeeping. munmap frees such
    a buffer in C unless its pointer is a key of ``slow_free`` (the area's IPC exports),
    when the area's _free does."""

    def __init__(
        self,
        NativeAllocator allocator not None,
        AreaBase area not None,
        str mode="device",
        *,
        int dl_device_type=0,
        bint host_accessible=False,
        bint dl_device_current=True,
        unsigned int flags=0,
        Py_ssize_t granule=1,
        dict records=None,
        record=None,
        dict slow_free=None,
    ):
        cdef int m = NATIVE_MODES.get(mode, N_NONE)
        if m == N_NONE:
            raise ValueError(f"unknown native mode {mode!r}")
        if m == N_MANAGED and not allocator.has("malloc_managed"):
            raise ValueError(f"{allocator!r} has no malloc_managed")
        if m == N_HOST and not allocator.has("host_alloc"):
            raise ValueError(f"{allocator!r} has no host_alloc")
        if granule < 1:
            raise ValueError("granule must be >= 1")
        if records is None or slow_free is None or not callable(record):
            raise TypeError("records (a dict), record (a callable) and slow_free (a dict) are needed")
        dev = area.device
        self.device = -1 if dev is None else dev
        self.mode = m
        self.flags = flags
        self.granule = granule
        self.dl_type = dl_device_type
        self.host = host_accessible
        self.dl_current = dl_device_current
        self.records = records
        # A bound method of the area is kept as its function: the method would be a
        # reference cycle through a C field, which the collector cannot break.
        self.record_self = getattr(record, "__self__", None) is area and hasattr(record, "__func__")
        self.record = record.__func__ if self.record_self else record
        self.slow = slow_free
        self.allocator = allocator

    def __repr__(self):
        return f"<aml NativePath {self.allocator!r}>"

    cdef BufferBase take(self, AreaBase area, object n_obj, Py_ssize_t n, bint has_stream, unsigned long long stream):
        """The compiled mmap (the size is checked); None when the Python path must run
        (another device to select, a stream: the area's stream-ordered allocation)."""
        if has_stream:
            return None
        cdef NativeAllocator a = self.allocator
        cdef int current = -1
        cdef int rc = a.c_get_device(&current)
        if rc != 0:
            a.failed(rc, "get_device", EMPTY)
        if self.device >= 0 and self.device != current:
            return None
        cdef Py_ssize_t alloc = n
        cdef Py_ssize_t g = self.granule
        if self.mode == N_MANAGED and g > 1:
            if n > PY_SSIZE_T_MAX - (g - 1):
                return None  # the Python path rounds it with ints
            alloc = (n + g - 1) // g * g
        tp = area._buffer_type(None)
        record = self.records.get(alloc)
        if record is None:
            record = self.record(area, alloc) if self.record_self else self.record(alloc)
        cdef void *p = NULL
        cdef unsigned int fl = self.flags
        if self.mode == N_DEVICE:
            with nogil:
                rc = a.c_malloc(&p, <size_t>n)
            if rc != 0:
                a.failed(rc, "malloc", (n_obj,))
        elif self.mode == N_MANAGED:
            with nogil:
                rc = a.c_malloc_managed(&p, <size_t>alloc, fl)
            if rc != 0:
                a.failed(rc, "malloc_managed", (alloc,))
        else:
            with nogil:
                rc = a.c_host_alloc(&p, <size_t>n, fl)
            if rc != 0:
                a.failed(rc, "host_alloc", (n_obj, fl))
        cdef unsigned long long up = <unsigned long long><uintptr_t>p
        cdef int flags = F_NATIVE | (F_HOST if self.host else 0)
        try:
            return area._make(
                tp, up, up, n, flags, self.dl_type, current if self.dl_current else 0,
                current, None, record,
            )
        except BaseException:
            with nogil:
                if self.mode == N_HOST:
                    a.c_free_host(p)
                else:
                    a.c_free(p)
            raise

    cdef bint give(self, AreaBase area, BufferBase buf, bint has_stream, unsigned long long stream) except -1:
        """The compiled free of a detached buffer this path made and that has no IPC
        export (in host order: a free in a stream's order runs the area's ``_free``); if
        it fails the buffer is tracked again (_restore) and the error raised."""
        if has_stream or not self.can_give(area, buf):
            return False
        try:
            self.allocator.free_native(self.mode, <void *><uintptr_t>buf._ptr)
        except BaseException:
            area._restore(buf)  # the memory is still there: keep tracking it
            raise
        return True

    cdef bint can_give(self, AreaBase area, BufferBase buf) noexcept:
        return bool(buf.flags & F_NATIVE and not (self.slow and buf.ptr in self.slow))


# A do-nothing allocator in C (no memory: fake, never dereferenced addresses from a
# counter), for measuring and testing the compiled path without a GPU. Its address
# counter and live count are atomic (its calls run without the GIL); its fault
# injection (calls fail with `noop_fail_code` while `noop_fail_count` > 0, after
# `noop_skip` calls) is for single-threaded tests.
cdef extern from *:
    """
    static size_t aml_noop_next = (size_t)1 << 44;
    static long long aml_noop_live = 0;
    static size_t aml_noop_take(size_t n) { return __atomic_fetch_add(&aml_noop_next, n, __ATOMIC_RELAXED); }
    static void aml_noop_count(long long d) { __atomic_fetch_add(&aml_noop_live, d, __ATOMIC_RELAXED); }
    static long long aml_noop_live_now(void) { return __atomic_load_n(&aml_noop_live, __ATOMIC_RELAXED); }
    """
    size_t aml_noop_take(size_t n) noexcept nogil
    void aml_noop_count(long long d) noexcept nogil
    long long aml_noop_live_now() noexcept nogil

cdef int noop_fail_code = 0
cdef int noop_fail_count = 0
cdef int noop_skip = 0


cdef inline int noop_fault() noexcept nogil:
    global noop_fail_count, noop_skip
    if noop_skip > 0:
        noop_skip -= 1
        return 0
    if noop_fail_count > 0:
        noop_fail_count -= 1
        return noop_fail_code
    return 0


cdef int noop_get_device(int *dev) noexcept nogil:
    cdef int rc = noop_fault()
    if rc == 0:
        dev[0] = 0
    return rc


cdef int noop_malloc(void **p, size_t size) noexcept nogil:
    cdef int rc = noop_fault()
    if rc == 0:
        p[0] = <void *>aml_noop_take((size + 4095) & ~(<size_t>4095))
        aml_noop_count(1)
    return rc


cdef int noop_malloc_flags(void **p, size_t size, unsigned int flags) noexcept nogil:
    return noop_malloc(p, size)


cdef int noop_free(void *p) noexcept nogil:
    cdef int rc = noop_fault()
    if rc == 0:
        aml_noop_count(-1)
    return rc


def _noop_functions():
    """Addresses of the compiled do-nothing allocator (benchmarks, tests): a dict of
    get_device, malloc, free, malloc_managed, host_alloc, free_host."""
    return {
        "get_device": <size_t>noop_get_device,
        "malloc": <size_t>noop_malloc,
        "free": <size_t>noop_free,
        "malloc_managed": <size_t>noop_malloc_flags,
        "host_alloc": <size_t>noop_malloc_flags,
        "free_host": <size_t>noop_free,
    }


def _noop_control(fail_code=0, fail_count=0, skip=0):
    """Make the do-nothing allocator's ``fail_count`` calls after the next ``skip`` return
    ``fail_code``; return how many of its allocations are live."""
    global noop_fail_code, noop_fail_count, noop_skip
    noop_fail_code = fail_code
    noop_fail_count = fail_count
    noop_skip = skip
    return aml_noop_live_now()


#: The operations of a NativeStreams, in the order of its ``names``.
STREAM_OPS = ("event_create", "event_destroy", "event_record", "stream_wait_event", "event_query",
              "stream_synchronize")


@cython.auto_pickle(False)
cdef class NativeStreams:
    """NativeStreams(*, event_create, event_destroy, event_record, stream_wait_event, stream_synchronize, fail, names, event_query=None, not_ready=0, event_flags=0, needs_gil=False, error_sentinel=None, owner=None)
--

    A runtime's stream and event calls as C function pointers (integer addresses), with
    the signatures CUDA and HIP share, for the allocator kernel's stream policy (the
    hand-over between streams, a stream's blocks reclaimed for host order):

    ==========================================  ====================================
    ``event_create(void **, unsigned int)``     cudaEventCreateWithFlags / hipEvent…
    ``event_destroy(void *)``                   cudaEventDestroy / hipEventDestroy
    ``event_record(void *event, void *stream)`` cudaEventRecord / hipEventRecord
    ``stream_wait_event(void *stream, void *,   cudaStreamWaitEvent / hipStreamWaitEvent
    unsigned int)``
    ``event_query(void *)``                     cudaEventQuery / hipEventQuery (0: done;
                                                ``not_ready``: still running)
    ``stream_synchronize(void *)``              cudaStreamSynchronize / hipStream…
    ==========================================  ====================================

    Each returns 0 on success or the runtime's error code; on an error the kernel calls
    ``fail(name, code)`` (with the GIL), which must raise the backend's translated
    AMLError. ``names`` maps each operation (:data:`STREAM_OPS`) to the native function's
    name. ``event_flags``: the flags events are created with (timing disabled).
    ``needs_gil``: the functions run Python (:func:`aml_core.stream.native_streams`'s
    trampolines over a Python runtime): a framework hook then takes the GIL first.
    ``error_sentinel``: the functions are Cython functions declared ``except
    ?error_sentinel`` (cuda-bindings' cyruntime, as for NativeAllocator): that code with a
    Python exception set propagates the exception instead of calling ``fail``. The
    functions must stay loaded while the table lives (``owner`` is kept for that)."""

    def __init__(
        self,
        *,
        event_create,
        event_destroy,
        event_record,
        stream_wait_event,
        stream_synchronize,
        fail,
        names,
        event_query=None,
        int not_ready=0,
        unsigned int event_flags=0,
        bint needs_gil=False,
        error_sentinel=None,
        owner=None,
    ):
        if not callable(fail):
            raise TypeError("fail must be callable")
        self.has_sentinel = error_sentinel is not None
        self.sentinel = error_sentinel if self.has_sentinel else 0
        for op in STREAM_OPS:
            if (op != "event_query" or event_query is not None) and not isinstance(names.get(op), str):
                raise TypeError(f"names[{op!r}] must be a str")
        self.names = tuple(names.get(op, op) for op in STREAM_OPS)
        self.c_event_create = <event_create_fn>address(event_create, "event_create")
        self.c_event_destroy = <handle_fn>address(event_destroy, "event_destroy")
        self.c_event_record = <event_record_fn>address(event_record, "event_record")
        self.c_stream_wait_event = <stream_wait_fn>address(stream_wait_event, "stream_wait_event")
        self.c_stream_synchronize = <handle_fn>address(stream_synchronize, "stream_synchronize")
        if event_query is not None:
            self.c_event_query = <handle_fn>address(event_query, "event_query")
        self.not_ready = not_ready
        self.event_flags = event_flags
        self.needs_gil = needs_gil
        self.fail = fail
        self.owner = owner

    @property
    def queries(self):
        """Whether the table can query an event (then a plain request after a stream
        request queries the stream's event instead of synchronizing it)."""
        return self.c_event_query != NULL

    def __repr__(self):
        return f"<aml NativeStreams {', '.join(self.names)}>"

    cdef int record(self, void **event, unsigned long long stream, int *op) noexcept nogil:
        """Record ``event`` on ``stream`` (the event made on first use): 0, or the failing
        call's code with its S_* in ``op`` (an event that could not be made stays NULL)."""
        cdef int rc
        if event[0] == NULL:
            op[0] = S_EVENT_CREATE
            rc = self.c_event_create(event, self.event_flags)
            if rc != 0:
                event[0] = NULL
                return rc
        op[0] = S_EVENT_RECORD
        return self.c_event_record(event[0], <void *><uintptr_t>stream)

    cdef int hand_over(self, void **event, unsigned long long other, unsigned long long stream,
                       int *op) noexcept nogil:
        """``stream`` waits for ``other``'s work so far (the event made on first use,
        recorded on ``other``): 0, or the failing call's code with its S_* in ``op``."""
        cdef int rc
        rc = self.record(event, other, op)
        if rc != 0:
            return rc
        op[0] = S_STREAM_WAIT_EVENT
        return self.c_stream_wait_event(<void *><uintptr_t>stream, event[0], 0)

    cdef int idle(self, void **event, unsigned long long stream, int *op) noexcept nogil:
        """Whether ``stream``'s work so far is done, by recording the event on it and
        querying it: 0 done, -1 still running (or no query: synchronize), else the
        failing call's code with its S_* in ``op``."""
        cdef int rc
        if self.c_event_query == NULL:
            return -1
        rc = self.record(event, stream, op)
        if rc != 0:
            return rc
        op[0] = S_EVENT_QUERY
        rc = self.c_event_query(event[0])
        if rc == self.not_ready:
            return -1
        return rc

    cdef int failed(self, int code, int op) except -1:
        """A call that returned ``code``: raise the backend's translated error (or the
        Python exception a function declared ``except ?error_sentinel`` raised)."""
        if self.has_sentinel and code == self.sentinel and PyErr_Occurred() != NULL:
            return -1
        self.fail(self.names[op], code)
        raise SystemError(f"the fail hook of {self!r} returned instead of raising")

    cdef int synchronize(self, unsigned long long stream) except -1:
        cdef int rc
        if self.needs_gil:
            rc = self.c_stream_synchronize(<void *><uintptr_t>stream)
        else:
            with nogil:
                rc = self.c_stream_synchronize(<void *><uintptr_t>stream)
        if rc != 0:
            self.failed(rc, S_STREAM_SYNCHRONIZE)
        return 0

    cdef int destroy(self, void *event) except -1:
        cdef int rc = self.c_event_destroy(event)
        if rc != 0:
            self.failed(rc, S_EVENT_DESTROY)
        return 0

    # the same calls from Python (tests: what the kernel would call)
    def _synchronize(self, stream):
        self.synchronize(stream)
