# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, binding=True, embedsignature.format=clinic
"""The compiled core of aml's buffers and areas.

``BufferBase``, the base of every aml Buffer, gives memory at an arbitrary address
(host memory from mmap, pinned memory from a GPU runtime, device memory) the two
zero-copy protocols Python has, and counts their live exports:

- the buffer protocol (memoryview, numpy.frombuffer), for host-accessible memory;
- DLPack capsules (``__dlpack__``), unversioned ("dltensor") and 1.x versioned
  ("dltensor_versioned"), for any memory, with the device the area names.

An area refuses to free a buffer while a view or a DLPack consumer still holds it
(``_release()`` returns False), so freed memory is never reachable from Python.

``AreaBase``, the base of aml_core.area.Area, holds an area's live mappings, counters
and closed flag, checks munmap's target (_lookup), makes buffers (_new_buffer) and runs
mmap and munmap. Its bookkeeping follows one rule:

    Every change to an area's live mappings happens inside one of AreaBase's
    bookkeeping methods (_add, _detach, _restore, _resized, _drain, _untrack_viewed and
    the finalizer's _reclaim), each of which runs under the GIL without releasing it, so
    each change is atomic; the backend's native _allocate and _free calls happen outside
    them.

"Without releasing it" means those methods run no Python code while they change
state: they use the live table below, the buffers' C fields and C counters, they
allocate no object the garbage collector tracks between reading and writing, and
every buffer they drop from the table (or from ``_kept``) is still referenced by the
caller. Errors are raised before anything changes.

The live table and garbage collection
    The live table maps a buffer's address to the buffer *without a reference*: an area
    does not keep its buffers alive (a buffer keeps its area alive). A buffer that
    becomes unreachable while it is live is freed by its finalizer (``__del__``,
    tp_finalize), through the path munmap takes (``_reclaim``): the compiled pool or
    native free, else the area's ``_free``, with the same bookkeeping. Every entry is
    therefore either a buffer whose finalizer has not run yet (it removes the entry), or
    one the area holds strongly: ``_kept`` (a native free failed: munmap or close()
    retries it) or ``_pending`` (a GC-driven free that had to wait). A tracked buffer
    carries F_TRACKED, so a finalizer finds out in one test whether it has anything to
    do.

    A finalizer runs at any allocation, in any thread, possibly inside the area's own
    code. A free munmap would do in C (the pool cache, the NativeAllocator) runs at
    once: atomic under the GIL, it never re-enters Python code or waits. Any other
    (``_free``) waits in ``_pending`` while anyone, in any thread, is *inside* the area
    (``_inside``: mmap's _allocate, a _free, close(), an :class:`AreaLock` section of a
    subclass, a pool's lock) or an area a pool takes memory from, and while a view still
    holds the buffer (a reference cycle collected with its view): a finalizer never
    re-enters an area or waits on its lock. The first thread that leaves the area and is
    then outside it (a per-thread count in thread-local storage) frees what waited
    (``_leave``, ``_drain_pending``) as any munmap would, even while other threads are
    inside: a busy area does not pile up dropped buffers. A GC-driven free that fails is
    reported through ``sys.unraisablehook`` (as any exception in ``__del__``) and the
    buffer stays tracked, held by the area, for munmap or close() to retry. At
    interpreter exit (``sys.is_finalizing()``) a dropped buffer is only untracked: the
    process's exit returns its memory.

``NativeAllocator`` is a compiled ops table (after UMF's memory-provider ops): the C
addresses of a GPU runtime's allocation calls, whose CUDA and HIP signatures are the
same. An area installs one for its mode (``AreaBase._set_native``); then ``mmap(size)``
without options and ``munmap`` of the buffers it made run in C from end to end, with no
Python frame (but the area's native-record factory, on a size's first allocation): get
the current device, allocate, make the buffer, track it (and the reverse). Anything else (another device to select, options, a buffer with an IPC export)
takes the Python ``_allocate``/``_free`` path, which frees either kind of buffer.

``PoolCache`` is the same idea for aml_core.pool: the pool's exact-size free stacks,
counters and lock. A pool installs it (``AreaBase._set_pool``); then ``mmap(size)``
without options that finds a cached block of the rounded size, and ``munmap`` of a
block allocated in host order, run in C, only while nobody holds the pool's lock and
without releasing the GIL or running Python code, so they are atomic with respect to
each other and to the pool's locked Python code.
"""

cimport cython
from cpython.mem cimport PyMem_RawCalloc, PyMem_RawFree, PyMem_RawMalloc
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.weakref cimport PyWeakref_GetObject, PyWeakref_NewRef
from libc.stdint cimport int64_t, uintptr_t
from libc.string cimport memset

from ._dlpack cimport (
    DLPACK_FLAG_BITMASK_READ_ONLY,
    DLPACK_MAJOR_VERSION,
    DLPACK_MINOR_VERSION,
    DLManagedTensor,
    DLManagedTensorVersioned,
    DLTensor,
    kDLUInt,
)

from .errors import AMLBusyError, AMLDomainError, AMLFailure, AMLMemoryError, AMLTypeError, AMLValueError
from .checks import size as _check_size

cdef extern from "Python.h":
    # Declared here without exception checks: the callers test and clear errors.
    Py_ssize_t _as_ssize "PyLong_AsSsize_t"(object) noexcept
    unsigned long long _as_ull "PyLong_AsUnsignedLongLong"(object) noexcept
    void *PyMem_Calloc(size_t nelem, size_t elsize) noexcept
    void PyMem_Free(void *p) noexcept
    void _set_error "PyErr_SetObject"(object type, object value) noexcept
    void _write_unraisable "PyErr_WriteUnraisable"(object obj) noexcept
    PyObject *PyErr_Occurred() noexcept
    void PyErr_Clear() noexcept
    int Py_IsInitialized() noexcept nogil
    int PyType_IsSubtype(PyTypeObject *a, PyTypeObject *b) noexcept
    PyObject *_PyType_Lookup(PyTypeObject *type, object name) noexcept  # borrowed, no error
    PyTypeObject *Py_TYPE(object o) noexcept
    ctypedef void (*PyCapsule_Destructor)(object) noexcept
    object PyCapsule_New(void *pointer, const char *name, PyCapsule_Destructor destructor)
    int PyCapsule_IsValid(object capsule, const char *name) noexcept
    void *_capsule_pointer "PyCapsule_GetPointer"(object capsule, const char *name) noexcept
    int PyObject_GetBuffer(object obj, Py_buffer *view, int flags) except -1
    void PyBuffer_Release(Py_buffer *view) noexcept
    enum:
        PyBUF_SIMPLE
        PyBUF_WRITABLE
        PyBUF_FORMAT
        PyBUF_ND
        PyBUF_STRIDES

#: Flags of _bind: the host can access the memory (buffer protocol allowed); exports
#: are read-only.
HOST = 1
READONLY = 2

cdef extern from "<limits.h>":
    const unsigned long long ULLONG_MAX

cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX

cdef extern from *:
    """
    #define aml_tp_finalize(t) ((void *)((PyTypeObject *)(t))->tp_finalize)
    #if PY_VERSION_HEX >= 0x030D0000
    #define aml_is_finalizing() Py_IsFinalizing()
    #else
    #define aml_is_finalizing() _Py_IsFinalizing()
    #endif
    """
    int aml_is_finalizing() noexcept
    void *aml_tp_finalize(object t) noexcept

# Which areas this thread is inside (AreaBase._enter/_leave), and how deep: a small
# array in thread-local storage (no allocation; freed with the thread). An area is a key
# only, never dereferenced. Past AML_INSIDE_MAX distinct areas the thread counts as
# inside every area (conservative: its drains wait).
cdef extern from *:
    """
    #define AML_INSIDE_MAX 16
    typedef struct { void *area[AML_INSIDE_MAX]; int depth[AML_INSIDE_MAX]; int n; int overflow; } aml_inside_t;
    static __thread aml_inside_t aml_inside;
    static void aml_inside_enter(void *a) {
        aml_inside_t *t = &aml_inside;
        for (int i = 0; i < t->n; i++)
            if (t->area[i] == a) { t->depth[i]++; return; }
        if (t->n < AML_INSIDE_MAX) { t->area[t->n] = a; t->depth[t->n] = 1; t->n++; }
        else t->overflow++;
    }
    /* One level less of ``a`` if the thread is inside it: 1, else 0. */
    static int aml_inside_forget_one(void *a) {
        aml_inside_t *t = &aml_inside;
        for (int i = 0; i < t->n; i++)
            if (t->area[i] == a) {
                if (--t->depth[i] == 0) { t->n--; t->area[i] = t->area[t->n]; t->depth[i] = t->depth[t->n]; }
                return 1;
            }
        return 0;
    }
    static void aml_inside_leave(void *a) {
        if (!aml_inside_forget_one(a) && aml_inside.overflow > 0) aml_inside.overflow--;
    }
    static void aml_inside_forget(void *a) { (void)aml_inside_forget_one(a); }
    static int aml_inside_here(void *a) {
        aml_inside_t *t = &aml_inside;
        if (t->overflow) return 1;
        for (int i = 0; i < t->n; i++)
            if (t->area[i] == a) return 1;
        return 0;
    }
    """
    void aml_inside_enter(void *a) noexcept nogil
    void aml_inside_leave(void *a) noexcept nogil
    void aml_inside_forget(void *a) noexcept nogil
    int aml_inside_here(void *a) noexcept nogil

# How a dropped buffer is freed (AreaBase._reclaim).
cdef enum:
    M_FINALIZER = 0  # from its finalizer: never under anyone inside the area, never waiting
    M_DRAIN = 1  # from a drain: this thread is outside the area (others may be inside)
    M_NOW = 2  # the caller says this is a safe point (_settle)

# What AreaBase._add did.
cdef enum:
    ADDED = 0
    CLOSED = 1
    FULL = 2
    NULL_PTR = 3  # the native allocation "succeeded" with NULL
    DUPLICATE = 4  # ... or with an address that is already live here
    NOMEM = 5  # the live table could not grow

cdef enum:
    F_HOST = 1
    F_READONLY = 2
    F_RELEASED = 4  # freed: no new export
    F_NATIVE = 8  # made by the area's NativeAllocator: munmap may free it in C
    F_TRACKED = 16  # in its area's live table
    F_ORPHAN = 32  # detached while viewed (close, a with block): its finalizer frees it
    F_PENDING = 64  # unreachable, waiting in its area's _pending for a deferred free
    F_KEPT = 128  # held by its area's _kept: a native free failed, a retry frees it

cdef str RELEASED_MSG = "this aml buffer was freed: its memory can no longer be viewed"
cdef tuple NO_DL_DEVICE = (0, 0)
cdef tuple EMPTY = ()
cdef str BUFFER_TYPE = "buffer_type"
cdef char *BYTE_FORMAT = b"B"


# ---- DLPack: what a capsule owns ---------------------------------------------------------
cdef struct DLContext:
    PyObject *owner  # a strong reference to the BufferBase, counted in its exports
    int64_t shape[1]


cdef inline object exact_int(object given, unsigned long long value):
    """``given`` itself when it is an exact int (no allocation), else the int of value."""
    if type(given) is int:
        return given
    return value


# ---- buffers ---------------------------------------------------------------------------
@cython.auto_pickle(False)  # a copy would be a second handle to one mapping (a double free)
cdef class BufferBase:
    # A class's signature is the first line of its docstring, up to "--" (CPython's
    # __text_signature__): Cython gives one to functions, not to classes.
    """BufferBase()
--

    Base of aml buffers: an address range with counted zero-copy exports.

    ``ptr``, ``size``, ``area``, ``kind``, ``device``, ``device_ptr`` and ``native`` are
    read-only: AreaBase._new_buffer sets them, and _bind re-binds the range of a buffer
    that grows in place. An area frees a buffer from exactly these fields."""

    cdef unsigned long long _ptr
    #: Size in bytes.
    cdef readonly Py_ssize_t size
    #: Number of live buffer-protocol views and DLPack consumers.
    cdef readonly Py_ssize_t exports
    cdef int flags
    cdef int dl_device_type
    cdef int dl_device_id
    cdef object _key  # ptr as an exact int: the key of the area's live table
    cdef object _area
    #: The kind of memory.
    cdef readonly object kind
    #: The device index, or None.
    cdef readonly object device
    #: The address devices use.
    cdef readonly object device_ptr
    #: Backend-specific data the area needs to free the mapping.
    cdef readonly object native
    cdef object __weakref__
    cdef unsigned long long _seq  # when its area tracked it (buffers() is oldest first)

    @property
    def ptr(self):
        """Address of the first byte."""
        if self._key is not None:
            return self._key
        return self._ptr

    @property
    def area(self):
        """The area that made this buffer (AttributeError for a buffer no area made)."""
        if self._area is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute 'area' (not bound)")
        return self._area

    @property
    def freed(self):
        """True once the buffer was freed."""
        return bool(self.flags & F_RELEASED)

    @property
    def host_accessible(self):
        """True if the host can read and write the memory (buffer protocol allowed)."""
        return bool(self.flags & F_HOST)

    @property
    def readonly(self):
        """True if exports are read-only."""
        return bool(self.flags & F_READONLY)

    def _bind(self, ptr, Py_ssize_t size, int flags, int dl_device_type, int dl_device_id, /):
        """Set the memory this object describes (a growable buffer's new size).

        An exported buffer may only grow in place: views of the old range stay valid."""
        cdef unsigned long long p = ptr
        if self.exports != 0 and (p != self._ptr or size < self.size):
            raise BufferError("an exported buffer can only grow in place")
        if self.flags & F_TRACKED and p != self._ptr:
            raise ValueError("a live buffer cannot move (its area tracks it by address)")
        if size < 0:
            raise ValueError("size must be >= 0")
        if self._key is None or p != self._ptr:
            self._key = exact_int(ptr, p)
        self._ptr = p
        self.size = size
        self.flags = (self.flags & ~(F_HOST | F_READONLY)) | (flags & (F_HOST | F_READONLY))
        self.dl_device_type = dl_device_type
        self.dl_device_id = dl_device_id

    def _release(self):
        """Mark the buffer freed and return True, or return False if views or DLPack
        consumers still hold it."""
        if self.exports > 0:
            return False
        self.flags |= F_RELEASED
        return True

    def _revive(self):
        """Undo _release() (the native free failed and the memory is still there)."""
        self.flags &= ~F_RELEASED

    def __del__(self):
        # tp_finalize: a buffer that is still live (or detached while viewed) when it
        # becomes unreachable is freed by its area (AreaBase._dropped, which never raises).
        if self.flags & (F_TRACKED | F_ORPHAN):
            (<AreaBase>self._area)._dropped(self)

    def __dlpack_device__(self):
        """The DLPack (device_type, device_id) of this buffer."""
        return (self.dl_device_type, self.dl_device_id)

    def __getbuffer__(self, Py_buffer *view, int flags):
        if self.flags & F_RELEASED:
            raise BufferError(RELEASED_MSG)
        if not (self.flags & F_HOST):
            raise BufferError(
                "this aml buffer is device memory, not host-accessible: "
                "use DLPack (__dlpack__) or __cuda_array_interface__"
            )
        cdef bint ro = self.flags & F_READONLY
        if ro and (flags & PyBUF_WRITABLE) == PyBUF_WRITABLE:
            raise BufferError("Object is not writable.")
        # What PyBuffer_FillInfo fills: one dimension of unsigned bytes.
        view.buf = <void *><uintptr_t>self._ptr
        view.obj = self
        view.len = self.size
        view.readonly = ro
        view.itemsize = 1
        view.format = BYTE_FORMAT if (flags & PyBUF_FORMAT) == PyBUF_FORMAT else NULL
        view.ndim = 1
        view.shape = &view.len if (flags & PyBUF_ND) == PyBUF_ND else NULL
        view.strides = &view.itemsize if (flags & PyBUF_STRIDES) == PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1
        if self.exports == 0 and self.flags & F_PENDING:
            (<AreaBase>self._area)._views_gone()

    def _dlpack_capsule(self, versioned, readonly, /):
        """A DLPack capsule of the bytes, as uint8[size]: versioned ("dltensor_versioned",
        DLPack 1.x) or not ("dltensor"); read-only if asked or if the buffer is."""
        cdef bint v = versioned, ro = readonly
        if self.flags & F_RELEASED:
            raise BufferError(RELEASED_MSG)
        if self.dl_device_type <= 0:
            raise BufferError("this aml buffer has no DLPack device")
        cdef DLContext *ctx = <DLContext *>PyMem_RawMalloc(sizeof(DLContext))
        if ctx == NULL:
            raise MemoryError()
        ctx.owner = <PyObject *>self
        cdef DLManagedTensorVersioned *tv = NULL
        cdef DLManagedTensor *tu = NULL
        try:
            if v:
                tv = <DLManagedTensorVersioned *>PyMem_RawCalloc(1, sizeof(DLManagedTensorVersioned))
                if tv == NULL:
                    raise MemoryError()
                tv.version.major = DLPACK_MAJOR_VERSION
                tv.version.minor = DLPACK_MINOR_VERSION
                tv.manager_ctx = ctx
                tv.deleter = delete_versioned
                tv.flags = DLPACK_FLAG_BITMASK_READ_ONLY if (ro or self.flags & F_READONLY) else 0
                self._fill(&tv.dl_tensor, ctx)
                capsule = PyCapsule_New(tv, "dltensor_versioned", capsule_versioned)
            else:
                tu = <DLManagedTensor *>PyMem_RawCalloc(1, sizeof(DLManagedTensor))
                if tu == NULL:
                    raise MemoryError()
                tu.manager_ctx = ctx
                tu.deleter = delete_unversioned
                self._fill(&tu.dl_tensor, ctx)
                capsule = PyCapsule_New(tu, "dltensor", capsule_unversioned)
        except BaseException:
            PyMem_RawFree(tv)
            PyMem_RawFree(tu)
            PyMem_RawFree(ctx)
            raise
        # The capsule (or its consumer, through the deleter) now owns one export.
        Py_INCREF(self)
        self.exports += 1
        return capsule

    cdef void _fill(self, DLTensor *dl, DLContext *ctx) noexcept:
        ctx.shape[0] = <int64_t>self.size
        dl.data = <void *><uintptr_t>self._ptr
        dl.device.device_type = self.dl_device_type
        dl.device.device_id = self.dl_device_id
        dl.ndim = 1
        dl.dtype.code = kDLUInt
        dl.dtype.bits = 8
        dl.dtype.lanes = 1
        dl.shape = ctx.shape
        dl.strides = NULL
        dl.byte_offset = 0


# ---- DLPack: deleters ---------------------------------------------------------------------
cdef void give_back(PyObject *owner) noexcept:
    cdef BufferBase buf = <BufferBase><object>owner
    buf.exports -= 1
    if buf.exports == 0 and buf.flags & F_PENDING:
        (<AreaBase>buf._area)._views_gone()
    Py_DECREF(<object>owner)


cdef void drop_owner(DLContext *ctx) noexcept nogil:
    # Consumers may call the deleter from any thread, with or without the GIL, possibly
    # at interpreter exit.
    if ctx == NULL:
        return
    if Py_IsInitialized():
        with gil:
            give_back(ctx.owner)
    PyMem_RawFree(ctx)


cdef void delete_unversioned(DLManagedTensor *t) noexcept nogil:
    if t != NULL:
        drop_owner(<DLContext *>t.manager_ctx)
        PyMem_RawFree(t)


cdef void delete_versioned(DLManagedTensorVersioned *t) noexcept nogil:
    if t != NULL:
        drop_owner(<DLContext *>t.manager_ctx)
        PyMem_RawFree(t)


cdef void capsule_unversioned(object capsule) noexcept:
    # The capsule dies. A consumer that took ownership renamed it "used_dltensor" and
    # calls the deleter itself; a capsule never consumed gives its export back here.
    cdef DLManagedTensor *t
    if PyCapsule_IsValid(capsule, "dltensor"):
        t = <DLManagedTensor *>_capsule_pointer(capsule, "dltensor")
        if t != NULL and t.deleter != NULL:
            t.deleter(t)


cdef void capsule_versioned(object capsule) noexcept:
    cdef DLManagedTensorVersioned *t
    if PyCapsule_IsValid(capsule, "dltensor_versioned"):
        t = <DLManagedTensorVersioned *>_capsule_pointer(capsule, "dltensor_versioned")
        if t != NULL and t.deleter != NULL:
            t.deleter(t)


# ---- the compiled allocation ops (NativeAllocator) ---------------------------------------
# The shapes CUDA's and HIP's runtime calls share (cudaX and hipX alike); 0 is success.
ctypedef int (*get_device_fn)(int *) noexcept nogil
ctypedef int (*malloc_fn)(void **, size_t) noexcept nogil
ctypedef int (*malloc_flags_fn)(void **, size_t, unsigned int) noexcept nogil
ctypedef int (*free_fn)(void *) noexcept nogil

#: The operations of a NativeAllocator, as named in its ``names``.
OPS = ("get_device", "malloc", "free", "malloc_managed", "host_alloc", "free_host")

# Modes an area may run natively (AreaBase._set_native), named by the values of
# aml_core.gpu.flags.AllocMode (a GPU area's flags decoded once, by decode_flags).
cdef enum:
    N_NONE = 0
    N_DEVICE = 1  # malloc / free
    N_MANAGED = 2  # malloc_managed(flags) / free, in granules
    N_HOST = 3  # host_alloc(flags) / free_host

cdef dict NATIVE_MODES = {"device": N_DEVICE, "managed": N_MANAGED, "host": N_HOST}


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

    cdef get_device_fn c_get_device
    cdef malloc_fn c_malloc
    cdef free_fn c_free
    cdef malloc_flags_fn c_malloc_managed
    cdef malloc_flags_fn c_host_alloc
    cdef free_fn c_free_host
    cdef int sentinel
    cdef bint has_sentinel
    #: The error hook: fail(name, code, *args) raises.
    cdef readonly object fail
    #: operation -> native function name.
    cdef readonly dict names
    #: What keeps the functions loaded (a library, a module).
    cdef readonly object owner
    cdef readonly unsigned int attach_host
    cdef readonly unsigned int attach_global
    cdef readonly unsigned int host_portable

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


# ---- the compiled pool cache (PoolCache) --------------------------------------------------
@cython.auto_pickle(False)
cdef class PoolCache:
    """PoolCache(area, granule, lock)
--

    The state of an aml_core.pool.Pool that its compiled fast path shares with the
    Python pool code, and the pool's one lock.

    ``fast`` maps a block size to the LIFO stack (a list) of the freed blocks of that
    size that were not coalesced yet; ``hits``, ``requested`` (bytes asked for by live
    buffers), ``peak_requested`` and ``blocks`` (bytes of live blocks) are C counters
    the pool's statistics read; ``keep_fast`` says whether a freed block may go on its
    stack (False with a release_threshold and once the pool is closing).

    Entering the cache (``with cache:``) takes the pool's re-entrant lock and counts the
    holder in ``busy`` (left: uncounted, then released); the pool that installed it
    counts its holders and waiters as inside it (AreaBase._inside), so that a GC-driven
    free of a pooled buffer waits for them (see the module doc). A pool installs its cache
    (``AreaBase._set_pool``); then ``mmap(size)`` without options pops a block of the
    rounded size from its stack, and ``munmap`` of a block allocated in host order pushes
    it, in C with no Python frame, only while ``busy`` is 0 and without releasing the
    GIL or running Python code: so a fast operation is atomic with respect to every
    other fast operation and to the Python code that holds the lock, as if it held the
    lock itself. Anything else (a miss, options, streams, a held lock, a closed area)
    takes the pool's Python ``_allocate``/``_free``."""

    #: size -> list of free blocks of that size (Python objects with ``addr``, ``size``,
    #: ``stream`` and ``slab.cinfo``).
    cdef public dict fast
    cdef public bint keep_fast
    cdef public long long hits
    cdef public long long requested
    cdef public long long peak_requested
    cdef public long long blocks
    #: How many mmaps and munmaps the compiled path served (tests, benchmarks).
    cdef readonly long long fast_mmaps
    cdef readonly long long fast_munmaps
    #: The depth of the lock's holder (0: nobody holds it).
    cdef readonly int busy
    #: The re-entrant lock.
    cdef readonly object lock
    cdef object _acquire
    cdef object _release
    cdef AreaBase _area  # the pooled area (a closed one: the Python path raises)
    cdef Py_ssize_t _mask
    cdef object _owner  # a weak reference to the pool that installed it (AreaBase._set_pool)
    cdef void *_owner_key  # the pool's address: its key in the thread's inside-table

    def __init__(self, area, Py_ssize_t granule, lock):
        if not isinstance(area, AreaBase):
            raise TypeError("a PoolCache is over an aml area")
        if granule < 1 or granule & (granule - 1):
            raise ValueError("granule must be a power of two")
        self._area = area
        self._mask = granule - 1
        self.fast = {}
        self.keep_fast = True
        self.lock = lock
        self._acquire = lock.acquire
        self._release = lock.release

    def __enter__(self):
        cdef AreaBase owner = self._owner_area()
        if owner is not None:
            owner._enter()  # counted before waiting: see AreaLock
        try:
            self._acquire()
        except BaseException:
            if owner is not None:
                owner._leave()
            raise
        self.busy += 1
        return self

    def __exit__(self, *exc):
        self.busy -= 1
        self._release()
        cdef AreaBase owner = self._owner_area()
        if owner is not None:
            owner._leave()
        elif self._owner_key != NULL:
            aml_inside_forget(self._owner_key)  # the pool is gone: forget it in this thread
        return False

    cdef AreaBase _owner_area(self):
        if self._owner is None:
            return None
        cdef PyObject *o = PyWeakref_GetObject(self._owner)
        if o == <PyObject *>None:
            return None
        return <AreaBase>o

    @property
    def granule(self):
        return self._mask + 1


# ---- sections of an area ------------------------------------------------------------------
@cython.final
@cython.auto_pickle(False)
cdef class AreaLock:
    """AreaLock(area, lock=None)
--

    A re-entrant lock of an area's own state, or (``lock`` None) a section without a
    lock, whose holders and waiters count as *inside* the area: a buffer of the area that
    becomes unreachable meanwhile (its finalizer may run at any allocation, in this thread
    too) is not freed by Python code under them, but by the next thread that leaves the
    area and is outside it (see the module doc).

    ``AreaLock(area, threading.RLock())`` is what ``Area._lock`` is; a subclass whose
    ``_free`` uses state of its own guards that state with an AreaLock of the area (never
    a bare ``threading.Lock``: a finalizer would wait on it, or enter half-done state).
    It holds the area weakly (no reference cycle)."""

    cdef object _ref
    cdef void *_key  # the area's address: its key in the thread's inside-table
    cdef object _acquire
    cdef object _release
    #: The lock (None: a section that only counts).
    cdef readonly object lock

    def __init__(self, area, lock=None):
        if not isinstance(area, AreaBase):
            raise TypeError(f"an AreaLock is over an aml area, not {type(area).__name__}")
        self._ref = PyWeakref_NewRef(area, None)
        self._key = <void *>area
        self.lock = lock
        if lock is not None:
            self._acquire = lock.acquire
            self._release = lock.release

    cdef AreaBase _area(self):
        cdef PyObject *o = PyWeakref_GetObject(self._ref)
        if o == <PyObject *>None:
            return None
        return <AreaBase>o

    def __enter__(self):
        cdef AreaBase area = self._area()
        if area is not None:
            # Counted before waiting for the lock: a finalizer that sees nobody inside
            # can take it without waiting.
            area._enter()
        if self._acquire is not None:
            try:
                self._acquire()
            except BaseException:
                if area is not None:
                    area._leave()
                raise
        return self

    def __exit__(self, *exc):
        if self._release is not None:
            self._release()
        cdef AreaBase area = self._area()
        if area is not None:
            area._leave()  # frees what waited, unless this thread is still inside
        else:
            aml_inside_forget(self._key)  # the area is gone: forget it in this thread
        return False


# ---- areas -------------------------------------------------------------------------------
# The live table: open addressing on the buffer's address, linear probing, deletion by
# backward shift (no tombstones). The buffer pointer is borrowed (see the module doc).
cdef struct LiveSlot:
    unsigned long long key  # the buffer's address; 0: empty (NULL is never tracked)
    PyObject *buf


cdef inline size_t slot_hash(unsigned long long key) noexcept nogil:
    # Addresses are aligned: mix the high bits into the low ones.
    cdef unsigned long long h = key * 0x9E3779B97F4A7C15ULL
    return <size_t>(h ^ (h >> 29))


cdef object _seq_of(BufferBase buf):
    return buf._seq


cdef object SEQ_KEY = _seq_of  # buffers() and _drain() sort by it: oldest first
cdef str KEPT_NOTE = (
    "the buffer was unreachable; its memory stays tracked (and held) by its area: "
    "munmap(ptr) or close() retries the free"
)
cdef str ORPHAN_NOTE = (
    "the buffer was detached while viewed and is now unreachable; its memory stays tracked "
    "(and held) by its area: close() retries the free"
)


@cython.no_gc_clear  # finalizers that run after a collection may still use the table
@cython.auto_pickle(False)
cdef class AreaBase:
    """AreaBase(*args, **kwargs)
--

    The compiled part of aml_core.area.Area: its live mappings, counters and closed
    flag, mmap, munmap, the checks of munmap's target (_lookup) and _new_buffer.

    Every change to the live mappings happens inside one of the bookkeeping methods
    (_add, _detach, _restore, _resized, _drain, _untrack_viewed, _reclaim), each of
    which runs under the GIL without releasing it, so each change is atomic; the
    subclass's _allocate and _free run outside them. The live table does not keep buffers
    alive: a live buffer that becomes unreachable is freed by its finalizer (see the
    module doc)."""

    #: The kind of memory this area allocates.
    cdef public object kind
    #: The area's device index, or None.
    cdef public object device
    cdef bint _closed
    # The live table (see the module doc): _cap slots (a power of two, or 0), _count used.
    cdef LiveSlot *_slots
    cdef Py_ssize_t _cap
    cdef Py_ssize_t _count
    # C counters. Live mappings are disjoint address ranges, so their total fits in 64
    # bits: _add refuses a mapping that would pass it (only fake pointers can).
    cdef unsigned long long _bytes
    cdef unsigned long long _peak
    cdef unsigned long long _maps
    cdef unsigned long long _unmaps
    cdef unsigned long long _next_seq  # the order of tracking: buffers() is oldest first
    # Garbage collection (see the module doc): who is inside the area now, the buffers
    # whose GC-driven free waits for them, the tracked buffers whose native free failed,
    # whether a drain runs, the area a pool takes its memory from, and the areas above
    # (weak references) whose frees wait for this one.
    cdef int _inside
    cdef list _pending
    cdef dict _kept
    cdef bint _draining
    cdef AreaBase _below
    cdef list _waiting
    # The compiled path (_set_native): the allocator, the mode and what it needs.
    cdef NativeAllocator _native
    cdef int _nmode
    cdef int _ndevice  # the area's device (negative: the current one)
    cdef unsigned int _nflags
    cdef Py_ssize_t _ngranule
    cdef int _ndl_type
    cdef bint _nhost  # host-accessible buffers
    cdef bint _ndl_current  # DLPack device id: the current device (else 0)
    cdef dict _nrecords  # allocated size -> native record
    cdef object _nrecord  # allocated size -> a new native record (on a miss)
    cdef bint _nrecord_self  # _nrecord is the function of a method of this area: pass self
    cdef dict _nslow  # buffers whose key is here are freed by _free (IPC exports)
    # The compiled pool path (_set_pool): the pool's cache.
    cdef PoolCache _pool
    cdef object __weakref__

    def __cinit__(self, *args, **kwargs):
        self._pending = []
        self._kept = {}

    def __dealloc__(self):
        # Tracked buffers keep the area alive: none is left but those held by _kept and
        # _pending, which are released after this.
        PyMem_Free(self._slots)
        self._slots = NULL

    # -- the live table (C only: no Python code, no tracked allocation) -----------------
    cdef inline Py_ssize_t _find(self, unsigned long long key) noexcept:
        """The slot of ``key``, or -1."""
        if self._cap == 0 or key == 0:
            return -1
        cdef size_t mask = <size_t>self._cap - 1
        cdef size_t i = slot_hash(key) & mask
        cdef unsigned long long k
        while True:
            k = self._slots[i].key
            if k == key:
                return <Py_ssize_t>i
            if k == 0:
                return -1
            i = (i + 1) & mask

    cdef int _reserve(self) noexcept:
        """Make room for one more entry: 0, or -1 (nothing changed) without memory."""
        if (self._count + 1) * 4 <= self._cap * 3:
            return 0
        cdef Py_ssize_t cap = 64 if self._cap == 0 else self._cap * 2
        cdef LiveSlot *slots = <LiveSlot *>PyMem_Calloc(<size_t>cap, sizeof(LiveSlot))
        if slots == NULL:
            return -1
        cdef size_t mask = <size_t>cap - 1
        cdef size_t j
        cdef Py_ssize_t i
        for i in range(self._cap):
            if self._slots[i].key != 0:
                j = slot_hash(self._slots[i].key) & mask
                while slots[j].key != 0:
                    j = (j + 1) & mask
                slots[j] = self._slots[i]
        PyMem_Free(self._slots)
        self._slots = slots
        self._cap = cap
        return 0

    cdef inline void _put(self, BufferBase buf) noexcept:
        """Enter ``buf`` (its address absent; _reserve made room) and mark it tracked."""
        cdef size_t mask = <size_t>self._cap - 1
        cdef size_t i = slot_hash(buf._ptr) & mask
        while self._slots[i].key != 0:
            i = (i + 1) & mask
        self._slots[i].key = buf._ptr
        self._slots[i].buf = <PyObject *>buf
        self._count += 1
        buf.flags |= F_TRACKED

    cdef void _remove_at(self, Py_ssize_t at) noexcept:
        """Empty a slot, shifting back the entries whose probe passed it."""
        cdef size_t mask = <size_t>self._cap - 1
        cdef size_t i = <size_t>at
        cdef size_t j = i
        cdef size_t home
        while True:
            j = (j + 1) & mask
            if self._slots[j].key == 0:
                break
            home = slot_hash(self._slots[j].key) & mask
            # The entry at j stays if its home lies cyclically in (i, j].
            if (i < j and i < home <= j) or (i > j and (home > i or home <= j)):
                continue
            self._slots[i] = self._slots[j]
            i = j
        self._slots[i].key = 0
        self._slots[i].buf = NULL
        self._count -= 1

    cdef void _untrack(self, BufferBase buf) noexcept:
        """Take a tracked buffer out of the table (and out of _kept: the caller holds it)."""
        cdef Py_ssize_t i = self._find(buf._ptr)
        if i >= 0 and self._slots[i].buf == <PyObject *>buf:
            self._remove_at(i)
        buf.flags &= ~F_TRACKED
        if buf.flags & F_KEPT:
            buf.flags &= ~F_KEPT
            if self._kept.pop(buf._key, None) is None:  # exact int key: no Python code
                pass

    cdef inline bint _tracks(self, BufferBase buf) noexcept:
        return buf.flags & F_TRACKED and buf._area is self

    cdef object _at(self, target):
        """The tracked buffer at address ``target`` (an int), or None."""
        cdef unsigned long long key = _as_ull(target)
        if key == <unsigned long long>-1 and PyErr_Occurred() != NULL:
            PyErr_Clear()  # negative or past 2**64: no mapping there
            return None
        cdef Py_ssize_t i = self._find(key)
        if i < 0:
            return None
        return <object>self._slots[i].buf

    cdef list _snapshot(self):
        """The tracked buffers, in table order, in a new list (which holds them)."""
        cdef Py_ssize_t n, i, j
        cdef list out
        while True:
            n = self._count
            out = [None] * n  # may run finalizers that untrack buffers: check after
            if n == self._count:
                break
        j = 0
        for i in range(self._cap):
            if self._slots[i].key != 0:
                out[j] = <object>self._slots[i].buf
                j += 1
        return out

    # -- state -----------------------------------------------------------------------
    @property
    def closed(self):
        """True once close() started: the area refuses every further use."""
        return self._closed

    def _check_open(self):
        """Raise AMLValueError if the area is closed."""
        if self._closed:
            raise AMLValueError(f"this {self.backend} area ({self.kind.value} memory) is closed")

    def _stats(self):
        """(bytes_in_use, peak_bytes, live_mappings, total_maps, total_unmaps), read at once."""
        return (self._bytes, self._peak, self._count, self._maps, self._unmaps)

    def buffers(self):
        """The live buffers, oldest first."""
        live = self._snapshot()
        live.sort(key=SEQ_KEY)
        return tuple(live)

    def _is_live(self, BufferBase buf not None):
        """Whether ``buf`` is a live (tracked) buffer of this area."""
        return self._tracks(buf) and not (buf.flags & F_RELEASED)

    def _tracked(self, ptr):
        """The tracked buffer at address ``ptr``, or None (never raises)."""
        if not isinstance(ptr, int):
            return None
        return self._at(ptr)

    # -- the atomic changes of the bookkeeping (no Python code runs in them) ----------
    cdef int _add(self, BufferBase buf) except -1:
        """Track a new buffer and count the map (ADDED), or do nothing and say why not:
        CLOSED, FULL (the live bytes would not fit in 64 bits), NULL_PTR or DUPLICATE (a
        native call that reported success with an impossible address), NOMEM (the table
        could not grow)."""
        if buf is None or buf._key is None:
            raise TypeError("this buffer is not bound to memory (make it with _new_buffer)")
        if buf.flags & F_TRACKED:
            raise AMLValueError(f"{buf!r} is tracked already")
        if self._closed:
            return CLOSED
        if buf._ptr == 0:
            return NULL_PTR
        cdef Py_ssize_t i = self._find(buf._ptr)
        cdef BufferBase old = None
        if i >= 0:
            old = <BufferBase>self._slots[i].buf
            if not (old.flags & F_RELEASED):
                return DUPLICATE
        if <unsigned long long>buf.size > ULLONG_MAX - self._bytes:
            return FULL
        if old is not None:
            # A stale entry (marked released by hand) at this address: replace it; it is
            # no longer tracked, so its finalizer leaves the table alone.
            old.flags &= ~F_TRACKED
            self._slots[i].buf = <PyObject *>buf
            buf.flags |= F_TRACKED
        else:
            if self._reserve() < 0:
                return NOMEM
            self._put(buf)
        buf._seq = self._next_seq
        self._next_seq += 1
        self._bytes += buf.size
        if self._bytes > self._peak:
            self._peak = self._bytes
        self._maps += 1
        return ADDED

    cdef int _detach(self, BufferBase buf) except -1:
        """Mark a looked-up buffer freed, untrack it and count the unmap, or raise (nothing
        done) if the area closed, the buffer is no longer live or it is still viewed."""
        if self._closed:
            self._check_open()
        if buf is None:
            raise TypeError("_lookup returned None, not a buffer")
        if buf.flags & F_RELEASED or not self._tracks(buf):
            raise AMLValueError(f"{buf!r} was already unmapped")
        if buf.exports:
            raise AMLBusyError(
                f"{buf!r} is still viewed ({buf.exports} memoryview/NumPy/DLPack exports); "
                "release the views first"
            )
        buf.flags |= F_RELEASED
        self._untrack(buf)  # the caller still holds buf
        self._bytes -= buf.size
        self._unmaps += 1
        return 0

    def _resized(self, BufferBase buf not None, old_size):
        """Count the new size of a buffer a subclass re-bound (a growable buffer), if it is
        still live here; return whether it was."""
        cdef Py_ssize_t old = old_size
        if not self._tracks(buf):
            return False
        cdef unsigned long long others = self._bytes - <unsigned long long>old
        if <unsigned long long>buf.size > ULLONG_MAX - others:
            raise AMLDomainError("this area's live mappings would pass 2**64 - 1 bytes")
        self._bytes = others + buf.size
        if self._bytes > self._peak:
            self._peak = self._bytes
        return True

    def _drain(self):
        """Close the area: return its live buffers, oldest first, counted as unmapped (None
        if it was already closed and holds nothing). A closed area holds buffers only where
        a native free failed (close() or a racing munmap restored them): draining it again
        hands those back, so that close() retries them."""
        if self._closed and self._count == 0:
            return None
        cdef list live = self._snapshot()  # allocated before anything changes
        self._closed = True
        cdef BufferBase buf
        for buf in live:
            buf.flags &= ~(F_TRACKED | F_KEPT)
            self._bytes -= buf.size
        self._unmaps += len(live)
        if self._cap:
            memset(self._slots, 0, <size_t>self._cap * sizeof(LiveSlot))
        self._count = 0
        self._kept.clear()  # `live` still holds every buffer
        live.sort(key=SEQ_KEY)
        return live

    def _restore(self, BufferBase buf not None):
        """Track again a buffer that munmap, close() or a finalizer detached and whose native
        free failed (the memory is still there): the area holds it from now on, so that
        munmap or close() retries the free even if nothing else references it."""
        if buf.flags & F_TRACKED:
            return
        if <unsigned long long>buf.size > ULLONG_MAX - self._bytes:  # fake pointers only
            raise AMLDomainError("this area's live mappings would pass 2**64 - 1 bytes")
        cdef Py_ssize_t i = self._find(buf._ptr)
        if i >= 0 and not ((<BufferBase>self._slots[i].buf).flags & F_RELEASED):
            raise AMLFailure(f"0x{buf._ptr:x} is live in this area again: {buf!r} cannot be restored")
        if i < 0 and self._reserve() < 0:
            raise MemoryError()
        self._kept[buf._key] = buf  # an existing dict: may resize, runs no Python code
        buf.flags = (buf.flags & ~F_RELEASED) | F_KEPT
        buf._seq = self._next_seq  # tracked again: the newest
        self._next_seq += 1
        if i >= 0:
            (<BufferBase>self._slots[i].buf).flags &= ~F_TRACKED
            self._slots[i].buf = <PyObject *>buf
            buf.flags |= F_TRACKED
        else:
            self._put(buf)
        self._bytes += buf.size
        if self._bytes > self._peak:
            self._peak = self._bytes
        self._unmaps -= 1

    def _untrack_viewed(self, BufferBase buf not None):
        """Untrack a live buffer of this area that is still viewed and count the unmap
        (its memory stays until its finalizer frees it, see _set_orphan); return False,
        doing nothing, if it is not live here. The one-buffer form of what _drain does."""
        if buf.flags & F_RELEASED or not self._tracks(buf):
            return False
        self._untrack(buf)  # the caller holds buf
        self._bytes -= buf.size
        self._unmaps += 1
        return True

    def _set_orphan(self, BufferBase buf not None):
        """Mark a buffer this area detached while it was viewed (close(), a with block):
        its finalizer (once its views and the object are gone) frees it through
        ``_free_orphan``."""
        if buf._area is not self or buf.flags & (F_TRACKED | F_RELEASED):
            raise AMLValueError(f"{buf!r} is not a detached buffer of this area")
        buf.flags |= F_ORPHAN

    def _free_orphan(self, buf):
        """Free a detached buffer once it is unreachable (Area overrides this)."""
        self._free(buf)

    def _set_below(self, AreaBase area):
        """Name the area this one takes its memory from (a pool's): a GC-driven free of
        this area's buffers also waits while someone is inside that one."""
        self._below = area

    # -- garbage collection: dropped buffers ---------------------------------------------
    cdef inline void _enter(self) noexcept:
        """Enter the area (mmap's _allocate, a _free, close(), an AreaLock section): a
        GC-driven free that would run Python code waits until this thread leaves."""
        self._inside += 1
        aml_inside_enter(<void *>self)

    cdef inline void _leave(self) noexcept:
        """Leave the area; once this thread is out of it (and of the areas below), it
        frees what waited."""
        self._inside -= 1
        aml_inside_leave(<void *>self)
        if (self._pending or self._waiting) and not self._here(self):
            self._drain_pending()

    cdef bint _here(self, AreaBase area) noexcept:
        """Whether this thread is inside ``area`` or an area below it."""
        while area is not None:
            if aml_inside_here(<void *>area):
                return True
            area = area._below
        return False

    cdef AreaBase _blocker(self):
        """The area (this one or one below) someone, in any thread, is inside now, or None."""
        cdef AreaBase a = self
        while a is not None:
            if a._inside > 0:
                return a
            a = a._below
        return None

    cdef void _defer(self, BufferBase buf, AreaBase blocker) noexcept:
        """Hold a dropped buffer until its free can run (_pending), and ask ``blocker``
        (an area below, if it is the one busy) to drain this one when it is free."""
        if not (buf.flags & F_PENDING):
            try:
                self._pending.append(buf)
            except BaseException:
                Py_INCREF(buf)  # no memory: leak the object rather than leave a stale entry
            buf.flags |= F_PENDING
        if blocker is not None and blocker is not self:
            try:
                if blocker._waiting is None:
                    blocker._waiting = []
                blocker._waiting.append(PyWeakref_NewRef(self, None))
            except BaseException:
                pass  # the next operation of this area drains it

    cdef void _dropped(self, BufferBase buf) noexcept:
        """The finalizer of a tracked or detached buffer: free it (see _reclaim). Never
        raises: failures are reported through sys.unraisablehook."""
        try:
            if aml_is_finalizing():
                # Interpreter exit: untrack it (the table must not outlive the object);
                # the process's exit returns the memory.
                if self._tracks(buf):
                    self._untrack(buf)
                    self._bytes -= buf.size
                    self._unmaps += 1
                return
            if buf.flags & F_TRACKED:
                self._reclaim(buf, M_FINALIZER)
            elif buf.flags & F_ORPHAN:
                self._reclaim_orphan(buf, M_FINALIZER)
        except BaseException as exc:
            self._report(exc, buf, None)

    cdef int _reclaim(self, BufferBase buf, int mode) except -1:
        """Free a tracked buffer that nothing references any more, as munmap would (the
        compiled pool or native path, else _free, counted inside the area), or hold it in
        _pending while that cannot run now: while a view holds it (a reference cycle
        collected with its view); from a finalizer (M_FINALIZER), while anyone is inside
        the area or an area below, unless munmap would free it in C (which never
        re-enters or waits); from a drain (M_DRAIN), while this thread is. A failed free
        keeps it tracked and held (_restore) and is reported."""
        if not self._tracks(buf):
            return 0  # munmap or close() freed it meanwhile
        cdef AreaBase blocker = None
        if buf.exports > 0:
            self._defer(buf, None)
            return 0
        if mode != M_NOW and not self._fast_free_ok(buf):
            if mode == M_FINALIZER:
                blocker = self._blocker()
                if blocker is not None:
                    self._defer(buf, blocker)
                    return 0
            elif self._here(self):
                self._defer(buf, None)
                return 0
        if self._closed:
            return 0  # only a failed free stays tracked in a closed area: close() retries it
        buf.flags |= F_RELEASED
        self._untrack(buf)
        self._bytes -= buf.size
        self._unmaps += 1
        try:
            self._free_detached(buf, True)
        except BaseException as exc:
            self._report(exc, buf, KEPT_NOTE)
        return 0

    cdef bint _fast_free_ok(self, BufferBase buf) noexcept:
        """Whether munmap would free ``buf`` in C (the pool cache or the NativeAllocator):
        atomic under the GIL, it never runs Python code, waits, or touches an area below."""
        cdef PoolCache c = self._pool
        if c is not None and c.busy == 0 and c.keep_fast:
            blk = buf.native
            try:
                if blk is not None and blk.stream is None and type(blk.size) is int:
                    return True
            except BaseException:
                PyErr_Clear()
                return False
        return bool(buf.flags & F_NATIVE and self._native is not None and not (self._nslow and buf._key in self._nslow))

    cdef int _reclaim_orphan(self, BufferBase buf, int mode) except -1:
        """Free a buffer detached while viewed once it is unreachable (_free_orphan,
        counted inside the area), or hold it as _reclaim does."""
        if not (buf.flags & F_ORPHAN) or buf.flags & (F_TRACKED | F_RELEASED):
            return 0
        cdef AreaBase blocker = None
        if buf.exports > 0:
            self._defer(buf, None)
            return 0
        if mode == M_FINALIZER:
            blocker = self._blocker()
            if blocker is not None:
                self._defer(buf, blocker)
                return 0
        elif mode == M_DRAIN and self._here(self):
            self._defer(buf, None)
            return 0
        buf.flags = (buf.flags & ~F_ORPHAN) | F_RELEASED
        self._enter()
        try:
            self._free_orphan(buf)
        except BaseException as exc:
            try:
                self._restore(buf)  # tracked again (the closed area reports it live)
            except BaseException as also:
                exc.add_note(f"tracking it again failed too: {also}")
            self._report(exc, buf, ORPHAN_NOTE)
        finally:
            self._leave()
        return 0

    cdef void _drain_pending(self) noexcept:
        """Free the dropped buffers that waited (see _reclaim), in this thread, which is
        outside the area and the areas below (others may be inside: the frees run as any
        munmap would), then let the areas above that waited for this one drain theirs."""
        cdef BufferBase buf
        cdef bint again = True
        cdef bint progress
        cdef list items
        if self._draining:
            return  # the drain running (in this thread or another) takes what came
        while again:
            again = False
            self._draining = True
            try:
                while self._pending and not self._here(self):
                    fresh = []  # made before the swap: a finalizer it runs sees a whole list
                    items = self._pending
                    self._pending = fresh
                    progress = False
                    for buf in items:
                        buf.flags &= ~F_PENDING
                        if buf.exports > 0:
                            self._defer(buf, None)  # still viewed: its last view brings it back
                            continue
                        progress = True
                        if buf.flags & F_TRACKED:
                            self._reclaim(buf, M_DRAIN)
                        elif buf.flags & F_ORPHAN:
                            self._reclaim_orphan(buf, M_DRAIN)
                    items = None  # the freed buffers go now (their finalizers ran already)
                    if not progress:
                        break  # only viewed buffers are left
                    again = True
            except BaseException as exc:
                self._report(exc, self, None)
            finally:
                self._draining = False
            # Code run meanwhile (a weakref callback, a collection) may have deferred more
            # while the drain ran and refused to start another: take it too.
            again = again and bool(self._pending) and not self._here(self)
        if self._waiting is not None and not self._here(self):
            waiting = self._waiting
            self._waiting = None
            for ref in waiting:
                above = <object>PyWeakref_GetObject(ref)
                if above is not None:
                    (<AreaBase>above)._drain_pending()

    cdef void _views_gone(self) noexcept:
        """The last view of a pending buffer went: free it, unless this thread is inside."""
        if self._pending and not self._here(self):
            self._drain_pending()

    def _settle(self, BufferBase buf not None):
        """If ``buf`` is unreachable garbage waiting for a deferred free (its identity came
        back through its address), free it now: a caller that is inside the area at a safe
        point (not in the middle of changing its own state) calls this rather than handing
        the buffer out again. Return whether it was waiting."""
        if not (buf.flags & F_PENDING) or buf._area is not self:
            return False
        try:
            self._pending.remove(buf)  # identity: buffers do not define __eq__
        except ValueError:
            pass
        buf.flags &= ~F_PENDING
        if buf.flags & F_TRACKED:
            self._reclaim(buf, M_NOW)
        elif buf.flags & F_ORPHAN:
            self._reclaim_orphan(buf, M_NOW)
        return True

    cdef void _report(self, object exc, object obj, str note) noexcept:
        """Report a failure of a GC-driven free, as Python reports an exception in
        __del__ (sys.unraisablehook)."""
        try:
            if note is not None:
                exc.add_note(note)
            _set_error(type(exc), exc)
            _write_unraisable(obj)
        except BaseException:
            pass
        PyErr_Clear()

    # -- making buffers, mmap and munmap ------------------------------------------------
    def _new_buffer(
        self,
        ptr,
        Py_ssize_t size,
        *,
        host_accessible,
        readonly=False,
        dl_device=NO_DL_DEVICE,
        device_ptr=None,
        native=None,
        device=None,
        buffer_type=None,
    ):
        """A new buffer of this area's buffer_type (or of buffer_type, a Buffer subclass),
        bound to the memory and to this area: device_ptr defaults to ptr and device to the
        area's."""
        tp = self._buffer_type(buffer_type)
        if size < 0:
            raise ValueError("size must be >= 0")
        cdef unsigned long long p = ptr
        cdef int flags = (F_HOST if host_accessible else 0) | (F_READONLY if readonly else 0)
        dt, did = dl_device
        return self._make(
            tp, ptr, p, size, flags, dt, did, self.device if device is None else device, device_ptr, native
        )

    cdef object _buffer_type(self, buffer_type):
        cdef PyObject *cls_attr
        if buffer_type is None:  # the class attribute, through the type attribute cache
            cls_attr = _PyType_Lookup(Py_TYPE(self), BUFFER_TYPE)
            tp = <object>cls_attr if cls_attr != NULL else type(self).buffer_type
        else:
            tp = buffer_type
        if not isinstance(tp, type) or not PyType_IsSubtype(<PyTypeObject *>tp, <PyTypeObject *>BufferBase):
            raise TypeError(f"buffer_type must be a Buffer class, not {tp!r}")
        if aml_tp_finalize(tp) != aml_tp_finalize(BufferBase):
            # Its finalizer frees a dropped buffer and keeps the live table sound.
            raise TypeError(f"{tp.__name__} defines __del__: a Buffer class must not override it")
        return tp

    cdef BufferBase _make(
        self, tp, ptr, unsigned long long p, Py_ssize_t size, int flags, int dl_type, int dl_id,
        device, device_ptr, native,
    ):
        """Bind a new buffer of class tp (checked by _buffer_type): _new_buffer's and the
        compiled mmap's one constructor."""
        # tp's own tp_new (BufferBase's, inherited by Python subclasses), in one C call.
        cdef BufferBase buf = <BufferBase>(<PyTypeObject *>tp).tp_new(tp, <PyObject *>EMPTY, NULL)
        buf._ptr = p
        buf._key = exact_int(ptr, p)
        buf.size = size
        buf.flags = flags
        buf.dl_device_type = dl_type
        buf.dl_device_id = dl_id
        buf._area = self
        buf.kind = self.kind
        buf.device = device
        buf.device_ptr = buf._key if device_ptr is None else device_ptr
        buf.native = native
        return buf

    # -- the compiled path ------------------------------------------------------------------
    def _set_native(
        self,
        NativeAllocator allocator,
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
        """Install ``allocator`` for this area's ``mode`` ("device": malloc/free,
        "managed": malloc_managed(flags) in ``granule`` bytes/free, "host":
        host_alloc(flags)/free_host); None uninstalls it. Then ``mmap(size)`` without
        options, when the area's device (read now: it must not change) is negative or the
        current one, runs in C: get_device, the allocation, the buffer (host_accessible,
        DLPack device (dl_device_type, the current device if dl_device_current else 0),
        device: the current device, native: ``records[allocated size]``, or
        ``record(allocated size)`` on a miss), then the bookkeeping. munmap frees such a
        buffer in C unless its pointer is a key of ``slow_free`` (the area's IPC exports),
        when _free does. _free must free both kinds of buffers: close, finalizers and
        every other case use it."""
        if allocator is None:
            self._native = None
            self._nmode = N_NONE
            return
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
        dev = self.device
        self._ndevice = -1 if dev is None else dev
        self._nmode = m
        self._nflags = flags
        self._ngranule = granule
        self._ndl_type = dl_device_type
        self._nhost = host_accessible
        self._ndl_current = dl_device_current
        self._nrecords = records
        # A bound method of this area is kept as its function: the method would be a
        # reference cycle through a C field, which the collector cannot break.
        self._nrecord_self = getattr(record, "__self__", None) is self and hasattr(record, "__func__")
        self._nrecord = record.__func__ if self._nrecord_self else record
        self._nslow = slow_free
        self._native = allocator

    @property
    def _native_allocator(self):
        """The installed NativeAllocator, or None."""
        return self._native

    cdef BufferBase _native_mmap(self, object n_obj):
        """The compiled mmap (the size is checked); None when the Python path must run
        (another device to select)."""
        cdef NativeAllocator a = self._native
        cdef int current = -1
        cdef int rc = a.c_get_device(&current)
        if rc != 0:
            a.failed(rc, "get_device", EMPTY)
        if self._ndevice >= 0 and self._ndevice != current:
            return None
        cdef Py_ssize_t n = n_obj
        cdef Py_ssize_t alloc = n
        cdef Py_ssize_t g = self._ngranule
        if self._nmode == N_MANAGED and g > 1:
            if n > PY_SSIZE_T_MAX - (g - 1):
                return None  # the Python path rounds it with ints
            alloc = (n + g - 1) // g * g
        tp = self._buffer_type(None)
        record = self._nrecords.get(alloc)
        if record is None:
            record = self._nrecord(self, alloc) if self._nrecord_self else self._nrecord(alloc)
        cdef void *p = NULL
        cdef unsigned int fl = self._nflags
        if self._nmode == N_DEVICE:
            with nogil:
                rc = a.c_malloc(&p, <size_t>n)
            if rc != 0:
                a.failed(rc, "malloc", (n_obj,))
        elif self._nmode == N_MANAGED:
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
        cdef int flags = F_NATIVE | (F_HOST if self._nhost else 0)
        try:
            return self._make(
                tp, up, up, n, flags, self._ndl_type, current if self._ndl_current else 0,
                current, None, record,
            )
        except BaseException:
            with nogil:
                if self._nmode == N_HOST:
                    a.c_free_host(p)
                else:
                    a.c_free(p)
            raise

    def _track(self, BufferBase buf not None, during="mmap"):
        """Track a new buffer (mmap's, or one a subclass made); if the area is closed, give
        the memory back and raise."""
        cdef int status = self._add(buf)
        if status != ADDED:
            self._refuse(buf, status, during)
        return buf

    cdef int _refuse(self, BufferBase buf, int status, str during) except -1:
        # Not tracked: give the memory back, then say why.
        buf._release()
        if status == NULL_PTR or status == DUPLICATE:
            # Nothing of ours to free: NULL is no memory, and a live address is another
            # buffer's. The native call lied; that is a FAILURE, never a buffer.
            what = "NULL" if status == NULL_PTR else f"0x{buf._ptr:x}, an address already live in this area"
            raise AMLFailure(
                f"the {self.backend} {self.kind.value} allocation ({during}) reported success "
                f"but returned {what}"
            )
        self._enter()
        try:
            self._free(buf)
        finally:
            self._leave()
        if status == NOMEM:
            raise AMLMemoryError(
                f"no memory to track a new mapping of this {self.backend} {self.kind.value} area"
            )
        if status == FULL:
            raise AMLDomainError(
                f"this {self.backend} {self.kind.value} area's live mappings would pass 2**64 - 1 "
                f"bytes with {buf.size} more"
            )
        raise AMLValueError(f"this {self.backend} area ({self.kind.value} memory) was closed during {during}")

    cpdef BufferBase _lookup(self, target, size):
        """The live buffer of this area that ``target`` (a Buffer or its base pointer)
        names, checking ``size`` if given; AMLValueError/AMLTypeError saying what is wrong
        otherwise. Reads only: munmap calls it, then detaches the buffer atomically."""
        cdef BufferBase buf
        if isinstance(target, BufferBase):
            buf = target
            if buf._key is None:  # made by hand, never mapped (its repr would raise)
                raise AMLValueError(f"this {type(target).__name__} was never mapped by an area")
            if buf._area is not self:
                raise AMLValueError(f"{target!r} was not mapped by this area")
            if buf.flags & F_RELEASED:
                raise AMLValueError(f"{target!r} was already unmapped")
            if not (buf.flags & F_TRACKED):
                raise AMLValueError(f"{target!r} is not live in this area")
        elif isinstance(target, int) and not isinstance(target, bool):
            found = self._at(target)
            if found is None:
                self._not_mapped(target)
            buf = found
        else:
            raise AMLTypeError(f"munmap takes a Buffer or an int pointer, not {type(target).__name__}")
        if size is not None and not (type(size) is int and size == buf.size and buf.size > 0):
            try:
                n = _check_size(size)
            except AMLDomainError:  # larger than any mapping: a mismatch, not a domain error
                raise AMLValueError(f"munmap size {size} does not match the mapping's size {buf.size}") from None
            if n != buf.size:
                raise AMLValueError(f"munmap size {n} does not match the mapping's size {buf.size}")
        return buf

    def _not_mapped(self, target):
        for live in self._snapshot():
            base = live.ptr
            if base < target < base + live.size:
                raise AMLValueError(
                    f"0x{target:x} is inside the mapping at 0x{base:x} (offset "
                    f"{target - base}); munmap takes the mapping's base pointer"
                )
        raise AMLValueError(
            f"0x{target:x} was not mapped by this area (a foreign pointer, or already unmapped)"
        )

    def mmap(self, size, options=None):
        """Allocate ``size`` bytes; aml_core.area.Area.mmap documents the options and
        errors (each area's ``mmap`` documents its own: :func:`_mmap_function`)."""
        return self._map(size, options)

    cdef object _map(self, size, options):
        """mmap itself: the one body of AreaBase.mmap and every _mmap_function."""
        cdef Py_ssize_t n = 0
        if type(size) is int:  # the common case, a plain positive int, checked in C
            n = _as_ssize(size)
            if n == -1 and PyErr_Occurred() != NULL:
                PyErr_Clear()
        n_obj = size if n > 0 else _check_size(size)
        if self._closed:
            self._check_open()
        cdef BufferBase buf = None
        if options is None:
            if self._native is not None:
                buf = self._native_mmap(n_obj)
            elif self._pool is not None:
                buf = self._pool_take(n_obj)
        if buf is None:
            self._enter()  # a finalizer run by the subclass's code defers its free
            try:
                buf = self._allocate(n_obj, self._coerce_options(options))
            finally:
                self._leave()
        cdef int status = self._add(buf)
        if status != ADDED:
            self._refuse(buf, status, "mmap")
        return buf

    def munmap(self, buffer, size=None):
        """Free a mapping made by this area, given as the Buffer or its base pointer."""
        self._unmap(buffer, size, True)

    def _munmap_slow(self, buffer, size=None):
        """munmap through _free, never the compiled pool path (a pool's munmap_on)."""
        self._unmap(buffer, size, False)

    cdef int _unmap(self, buffer, size, bint fast) except -1:
        if self._closed:
            self._check_open()
        cdef BufferBase buf = self._lookup(buffer, size)
        self._detach(buf)
        return self._free_detached(buf, fast)

    cdef int _free_detached(self, BufferBase buf, bint fast) except -1:
        """Free a buffer _detach (or a finalizer) untracked: the compiled pool path (if
        ``fast``), the compiled native free, or _free (counted inside the area). If the
        native free fails the buffer is tracked again (_restore) and the error raised."""
        if fast and self._pool is not None and self._pool_give(buf):
            return 0
        if buf.flags & F_NATIVE and self._native is not None and not (self._nslow and buf._key in self._nslow):
            try:
                self._native.free_native(self._nmode, <void *><uintptr_t>buf._ptr)
            except BaseException:
                self._restore(buf)  # the memory is still there: keep tracking it
                raise
            return 0
        self._enter()
        try:
            self._free(buf)
        except BaseException:
            self._restore(buf)  # the memory is still there: keep tracking it
            raise
        finally:
            self._leave()
        return 0

    # -- the compiled pool path ---------------------------------------------------------
    def _set_pool(self, PoolCache cache):
        """Install a pool's cache (None uninstalls it): then ``mmap(size)`` without
        options takes a cached block of the rounded size, and ``munmap`` of a block
        allocated in host order caches it, in C (see PoolCache), while nobody holds the
        cache's lock. _allocate and _free do everything else and must accept blocks
        either path made. An area runs either a NativeAllocator or a pool cache."""
        if cache is not None and self._native is not None:
            raise ValueError("this area runs a NativeAllocator already")
        if cache is not None:
            cache._owner = PyWeakref_NewRef(self, None)  # its holders count as inside
            cache._owner_key = <void *>self
        self._pool = cache

    @property
    def _pool_cache(self):
        """The installed PoolCache, or None."""
        return self._pool

    cdef BufferBase _pool_take(self, object n_obj):
        """The compiled pool mmap (the size is checked); None when the Python path must
        run. Everything is read and checked, then the state changes, then the buffer is
        made (an allocation that may run a finalizer: the state is whole by then)."""
        cdef PoolCache c = self._pool
        if c.busy or c._area._closed or not c.fast:
            return None
        cdef Py_ssize_t n = _as_ssize(n_obj)
        if n <= 0 or n > PY_SSIZE_T_MAX - c._mask:
            if n == -1 and PyErr_Occurred() != NULL:
                PyErr_Clear()
            return None
        cdef Py_ssize_t r = (n + c._mask) & ~c._mask
        stack = c.fast.get(r)
        if not stack or type(stack) is not list:
            return None
        tp = self._buffer_type(None)
        blk = (<list>stack)[len(<list>stack) - 1]
        info = blk.slab.cinfo
        addr_obj = blk.addr
        cdef unsigned long long addr = addr_obj
        cdef unsigned long long sptr = info[0]
        cdef unsigned long long sdptr = info[1]
        cdef int flags = info[2]
        cdef int dl_type = info[3]
        cdef int dl_id = info[4]
        device = info[5]
        cdef unsigned long long dptr = sdptr + (addr - sptr)
        dptr_obj = None if dptr == addr else dptr
        # Read and checked: change the state (no Python code, no tracked allocation).
        (<list>stack).pop()
        c.hits += 1
        c.blocks += r
        c.requested += n
        if c.requested > c.peak_requested:
            c.peak_requested = c.requested
        c.fast_mmaps += 1
        try:
            return self._make(
                tp, addr_obj, addr, n, (flags & (F_HOST | F_READONLY)), dl_type, dl_id, device, dptr_obj, blk
            )
        except BaseException:
            c.fast_mmaps -= 1
            c.requested -= n
            c.blocks -= r
            c.hits -= 1
            fresh = []  # may run a finalizer that replaces c.fast (a flush): read it after
            (<list>c.fast.setdefault(r, fresh)).append(blk)
            raise

    cdef bint _pool_give(self, BufferBase buf) except -1:
        """The compiled pool munmap of a detached buffer: True if its block went on its
        stack, False when _free must run."""
        cdef PoolCache c = self._pool
        if c.busy or not c.keep_fast:
            return False
        blk = buf.native
        if blk is None or blk.stream is not None:
            return False
        size_obj = blk.size
        if type(size_obj) is not int:
            return False
        cdef Py_ssize_t size = size_obj
        stack = c.fast.get(size_obj)
        if stack is None:
            # A new list may run a finalizer (a GC-tracked allocation) that frees into
            # the cache or flushes it (a new c.fast): make the list first, then read
            # c.fast and add the list only if no stack appeared meanwhile.
            fresh = []
            stack = c.fast.setdefault(size_obj, fresh)
        if type(stack) is not list:
            return False
        # No Python code or tracked allocation from here on (append may resize only).
        (<list>stack).append(blk)
        c.requested -= buf.size
        c.blocks -= size
        c.fast_munmaps += 1
        return True


def _mmap_function():
    """A new function object that runs :meth:`AreaBase.mmap` (a call of the same
    compiled body), for an area class to give its ``mmap`` its own docstring and
    signature without a Python frame on the hot path (aml_core.area.compiled_mmap)."""

    def mmap(AreaBase self, size, options=None):
        return self._map(size, options)

    return mmap


def address_of(obj, /):
    """address_of(obj) -> (address, nbytes, readonly) of a contiguous buffer exporter."""
    cdef Py_buffer view
    PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE)
    try:
        return (<unsigned long long><uintptr_t>view.buf, view.len, bool(view.readonly))
    finally:
        PyBuffer_Release(&view)
