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

The fast path
    An area may install one compiled fast path (aml_core/_fastpath.pyx: ``take``,
    ``give``, ``can_give``): a GPU runtime's ``NativeAllocator`` bound to it
    (``_set_native``, aml_core/_allocator.pyx) or a pool's ``PoolKernel``
    (``_set_pool``, aml_core/_kernel.pyx). ``mmap(size)`` without options asks it
    first; munmap and a finalizer give it the detached buffer first; what it does not
    serve takes the area's Python ``_allocate``/``_free``. This module re-exports both
    (``aml_core._buffer.NativeAllocator``, ``PoolKernel``); docs/kernel.md draws the
    layout.
"""

cimport cython
from cpython.mem cimport PyMem_RawCalloc, PyMem_RawFree, PyMem_RawMalloc
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.weakref cimport PyWeakref_GetObject, PyWeakref_NewRef
from libc.stdint cimport int64_t, uintptr_t
from libc.stdlib cimport free as cfree
from libc.string cimport memset

from ._addrmap cimport AddrSlot, addr_find, addr_grown, addr_put, addr_remove_at
from ._capi cimport PyErr_Clear, PyErr_Occurred, _as_ssize, _as_ull, aml_is_finalizing
from ._dlpack cimport (
    DLPACK_FLAG_BITMASK_READ_ONLY,
    DLPACK_MAJOR_VERSION,
    DLPACK_MINOR_VERSION,
    DLManagedTensor,
    DLManagedTensorVersioned,
    DLTensor,
    kDLUInt,
)

from .errors import (
    AMLBusyError,
    AMLDomainError,
    AMLFailure,
    AMLMemoryError,
    AMLNotSupported,
    AMLTypeError,
    AMLValueError,
)

import warnings as _warnings
from collections.abc import Mapping as _Mapping
from .checks import MAX_SIZE, size as _check_size

cdef extern from "Python.h":
    # Declared here without exception checks: the callers test and clear errors.
    void _set_error "PyErr_SetObject"(object type, object value) noexcept
    void _write_unraisable "PyErr_WriteUnraisable"(object obj) noexcept
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

cdef extern from *:
    """
    #define aml_tp_finalize(t) ((void *)((PyTypeObject *)(t))->tp_finalize)
    /* A type's attribute-cache version: 0 while it has none. Any change to the type or
       a base (an attribute set, __del__ assigned, __bases__) gives it a new one. */
    #define aml_type_tag(t) ((((PyTypeObject *)(t))->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) \
                             ? ((PyTypeObject *)(t))->tp_version_tag : 0u)
    """
    void *aml_tp_finalize(object t) noexcept
    unsigned int aml_type_tag(object t) noexcept

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


cdef void forget_inside(void *key) noexcept nogil:
    aml_inside_forget(key)

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

cdef str RELEASED_MSG = "this aml buffer was freed: its memory can no longer be viewed"
cdef tuple NO_DL_DEVICE = (0, 0)
cdef tuple EMPTY = ()
cdef str BUFFER_TYPE = "buffer_type"
cdef char *BYTE_FORMAT = b"B"


# ---- DLPack: what a capsule owns ---------------------------------------------------------
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

    @property
    def ptr(self):
        """Address of the first byte."""
        if self._key is not None:
            return self._key
        return self._ptr

    @property
    def stream(self):
        """The handle (an int) of the stream the buffer was allocated on
        (``mmap(..., stream=)``), which ``munmap`` frees it on unless told another;
        None: host order."""
        return self._stream if self._has_stream else None

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
            forget_inside(self._key)  # the area is gone: forget it in this thread
        return False


# ---- areas -------------------------------------------------------------------------------
# The live table: an AddrSlot table (_addrmap.pxd) of borrowed buffers (see the module doc).


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

    def __cinit__(self, *args, **kwargs):
        self._pending = []
        self._kept = {}

    def __dealloc__(self):
        # Tracked buffers keep the area alive: none is left but those held by _kept and
        # _pending, which are released after this.
        cfree(self._slots)
        self._slots = NULL

    # -- the live table (C only: no Python code, no tracked allocation) -----------------
    cdef inline Py_ssize_t _find(self, unsigned long long key) noexcept:
        """The slot of ``key``, or -1."""
        return addr_find(self._slots, <size_t>self._cap, key)

    cdef int _reserve(self) noexcept:
        """Make room for one more entry: 0, or -1 (nothing changed) without memory."""
        if (self._count + 1) * 4 <= self._cap * 3:
            return 0
        cdef AddrSlot *slots = addr_grown(self._slots, <size_t>self._cap)
        if slots == NULL:
            return -1
        self._slots = slots
        self._cap = 64 if self._cap == 0 else self._cap * 2
        return 0

    cdef inline void _put(self, BufferBase buf) noexcept:
        """Enter ``buf`` (its address absent; _reserve made room) and mark it tracked."""
        addr_put(self._slots, <size_t>self._cap, buf._ptr, <void *>buf)
        self._count += 1
        buf.flags |= F_TRACKED

    cdef void _remove_at(self, Py_ssize_t at) noexcept:
        """Empty a slot, shifting back the entries whose probe passed it."""
        addr_remove_at(self._slots, <size_t>self._cap, <size_t>at)
        self._count -= 1

    cdef void _untrack(self, BufferBase buf) noexcept:
        """Take a tracked buffer out of the table (and out of _kept: the caller holds it)."""
        cdef Py_ssize_t i = self._find(buf._ptr)
        if i >= 0 and self._slots[i].value == <void *>buf:
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
        return <object><PyObject *>self._slots[i].value

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
                out[j] = <object><PyObject *>self._slots[i].value
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
            old = <BufferBase><PyObject *>self._slots[i].value
            if not (old.flags & F_RELEASED):
                return DUPLICATE
        if <unsigned long long>buf.size > ULLONG_MAX - self._bytes:
            return FULL
        if old is not None:
            # A stale entry (marked released by hand) at this address: replace it; it is
            # no longer tracked, so its finalizer leaves the table alone.
            old.flags &= ~F_TRACKED
            self._slots[i].value = <void *>buf
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
        if buf.flags & F_HELD:
            self._refuse_held(buf)
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

    cdef int _refuse_held(self, BufferBase buf) except -1:
        """The one refusal of a held slab: every way to free a live buffer of this area
        (munmap by Buffer, pointer or (pointer, size), ``buf.free()``, a ``with`` block,
        munmap_on) reaches _detach or _untrack_viewed, which call this."""
        raise AMLValueError(
            f"{buf!r} is a slab that a pool holds: the pool owns it (its blocks may be live); "
            "pool.trim() or pool.close() gives it back to this area"
        )

    def _hold(self, BufferBase buf not None, bint held=True):
        """Mark a live buffer of this area as held by a pool (a slab it carves blocks
        from: munmap and a with block refuse it, EINVAL), or, ``held=False``, clear the
        mark before the pool frees it (any buffer: a detached one too). The mark is the
        buffer's flag F_HELD, so the check costs munmap one bit test."""
        if held:
            if buf.flags & F_RELEASED or not self._tracks(buf):
                raise AMLValueError(f"{buf!r} is not live in this area: a pool cannot hold it")
            buf.flags |= F_HELD
        else:
            buf.flags &= ~F_HELD

    def _held(self, BufferBase buf not None):
        """Whether a pool holds ``buf`` (see _hold)."""
        return bool(buf.flags & F_HELD)

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
            memset(self._slots, 0, <size_t>self._cap * sizeof(AddrSlot))
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
        if i >= 0 and not ((<BufferBase><PyObject *>self._slots[i].value).flags & F_RELEASED):
            raise AMLFailure(f"0x{buf._ptr:x} is live in this area again: {buf!r} cannot be restored")
        if i < 0 and self._reserve() < 0:
            raise MemoryError()
        self._kept[buf._key] = buf  # an existing dict: may resize, runs no Python code
        buf.flags = (buf.flags & ~F_RELEASED) | F_KEPT
        buf._seq = self._next_seq  # tracked again: the newest
        self._next_seq += 1
        if i >= 0:
            (<BufferBase><PyObject *>self._slots[i].value).flags &= ~F_TRACKED
            self._slots[i].value = <void *>buf
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
        if buf.flags & F_HELD:
            self._refuse_held(buf)
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
        """Whether munmap would free ``buf`` in C (the installed fast path): atomic under
        the GIL, it never runs Python code, waits, or touches an area below."""
        return self._fast is not None and self._fast.can_give(self, buf)

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
        cdef unsigned int area_tag
        if buffer_type is None:  # the class attribute, through the type attribute cache
            # The class's buffer type as last checked, while neither class changed since
            # (their attribute-cache versions are the same: a mmap's hit checks nothing else)
            area_tag = aml_type_tag(type(self))
            if area_tag != 0 and area_tag == self._tp_area_tag and self._tp_checked is not None:
                if aml_type_tag(self._tp_checked) == self._tp_buffer_tag:
                    return self._tp_checked
            cls_attr = _PyType_Lookup(Py_TYPE(self), BUFFER_TYPE)
            tp = <object>cls_attr if cls_attr != NULL else type(self).buffer_type
        else:
            tp = buffer_type
        if not isinstance(tp, type) or not PyType_IsSubtype(<PyTypeObject *>tp, <PyTypeObject *>BufferBase):
            raise TypeError(f"buffer_type must be a Buffer class, not {tp!r}")
        if aml_tp_finalize(tp) != aml_tp_finalize(BufferBase):
            # Its finalizer frees a dropped buffer and keeps the live table sound.
            raise TypeError(f"{tp.__name__} defines __del__: a Buffer class must not override it")
        if buffer_type is None:
            _PyType_Lookup(<PyTypeObject *>tp, BUFFER_TYPE)  # gives the class a version if it has none
            self._tp_buffer_tag = aml_type_tag(tp)
            self._tp_area_tag = aml_type_tag(type(self)) if self._tp_buffer_tag != 0 else 0
            self._tp_checked = tp
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

    # -- the fast path (_fastpath.pyx) -----------------------------------------------------
    def _set_native(self, allocator, mode="device", **options):
        """Install ``allocator`` (a NativeAllocator) for this area's ``mode`` (the
        ``options`` are NativePath's, which says what then runs in C); None uninstalls
        it. _free must free both kinds of buffers: close, finalizers and every other case
        use it. An area runs either a NativeAllocator or a pool cache."""
        if allocator is None:
            if isinstance(self._fast, NativePath):
                self._fast = None
            return
        if self._fast is not None and not isinstance(self._fast, NativePath):
            raise ValueError("this area runs a PoolKernel already")
        self._install(NativePath(allocator, self, mode, **options))

    def _set_pool(self, kernel):
        """Install a pool's kernel (None uninstalls it): then ``mmap(size)`` without
        options, or with a stream the kernel can read, that the kernel serves from its
        cached blocks, and ``munmap`` of its blocks while it keeps stacks, run in C (see
        PoolKernel). _allocate and _free do everything else and must accept blocks either
        path made. An area runs either a NativeAllocator or a pool kernel."""
        if kernel is None:
            if isinstance(self._fast, PoolKernel):
                self._fast = None
            return
        if not isinstance(kernel, PoolKernel):
            raise TypeError(f"_set_pool takes a PoolKernel, not {type(kernel).__name__}")
        if self._fast is not None and not isinstance(self._fast, PoolKernel):
            raise ValueError("this area runs a NativeAllocator already")
        self._install(kernel)

    cdef int _install(self, FastPath path) except -1:
        path.installed(self)
        self._fast = path
        return 0

    @property
    def _native_allocator(self):
        """The installed NativeAllocator, or None."""
        return self._fast.allocator if isinstance(self._fast, NativePath) else None

    @property
    def _pool_kernel(self):
        """The installed PoolKernel, or None."""
        return self._fast if isinstance(self._fast, PoolKernel) else None

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

    def mmap(self, size, options=None, *, stream=None):
        """Allocate ``size`` bytes; aml_core.area.Area.mmap documents the options and
        errors (each area's ``mmap`` documents its own: :func:`_mmap_function`)."""
        return self._map(size, options, stream)

    def _take_streams(self, bint ordered=True):
        """Say whether this area orders work on streams: then ``mmap(..., stream=s)``
        and ``munmap(..., stream=s)`` pass the handle (converted once) to the fast path
        and to ``_allocate(size, options, stream=handle)`` / ``_free(buffer,
        stream=handle)``; otherwise a stream is refused (AMLNotSupported, the reason
        from ``_no_streams()``)."""
        self._streams = ordered

    @property
    def _ordered(self):
        """Whether the area takes streams (_take_streams)."""
        return self._streams

    cdef int _stream_of(self, object stream, unsigned long long *handle) except -1:
        """The one conversion of a stream argument (not None) into a native handle: an
        int in 0..2**64 - 1 in C, anything else by aml_core.stream.as_stream_handle (its
        errors: AMLTypeError, AMLValueError, a closed stream's); then AMLNotSupported
        where the area orders no work on streams."""
        cdef unsigned long long h
        if type(stream) is int:
            h = _as_ull(stream)
            if h == <unsigned long long>-1 and PyErr_Occurred() != NULL:
                PyErr_Clear()
                stream = _convert_stream(stream)  # its error: out of range
                h = stream
        elif type(stream) is _stream_type and stream._closed is False and type(stream.handle) is int:
            h = stream.handle  # an open aml Stream: its handle, read in C
        else:
            h = _convert_stream(stream)
        if not self._streams:
            self._no_streams()
            raise AMLNotSupported(f"this {type(self).__name__} orders no work on streams")
        handle[0] = h
        return 0

    def _split_stream(self, options, stream):
        """The deprecated ``stream`` option (``mmap(n, {"stream": s})``, an options
        class's ``stream`` field; to be removed in the next minor version): moved to the
        ``stream`` argument, with a DeprecationWarning. Returns (options, stream)."""
        if isinstance(options, _Mapping):
            if "stream" not in options:
                return options, stream
            rest = dict(options)
            value = rest.pop("stream")
            rest_options = rest or None
        else:
            if not hasattr(options, "stream"):
                return options, stream
            value = options.stream
            if value is not None:
                import attrs

                options = attrs.evolve(options, stream=None)
            try:
                rest_options = None if options == type(options)() else options  # defaults: the fast path may serve it
            except Exception:
                rest_options = options
            if value is None:
                return rest_options, stream  # the deprecated field not used
        _warnings.warn(
            "the mmap option 'stream' is deprecated: pass mmap(size, stream=s)",
            DeprecationWarning,
            stacklevel=3,
        )
        if value is not None and stream is not None:
            raise AMLValueError("mmap got a stream twice: as stream= and in its options")
        return rest_options, stream if value is None else value

    def _no_streams(self):
        """Raise why this area takes no stream (AMLNotSupported; areas override it to
        give their reason)."""
        raise AMLNotSupported(
            f"streams need a GPU area; this {type(self).__name__} has no runtime that orders work on streams"
        )

    cdef object _map(self, size, options, stream):
        """mmap itself: the one body of AreaBase.mmap and every _mmap_function."""
        cdef Py_ssize_t n = 0
        cdef bint has_stream = False
        cdef unsigned long long handle = 0
        if type(size) is int:  # the common case, a plain positive int, checked in C
            n = _as_ssize(size)
            if n == -1 and PyErr_Occurred() != NULL:
                PyErr_Clear()
        n_obj = size if n > 0 else _check_size(size)
        if self._closed:
            self._check_open()
        cdef BufferBase buf = None
        if options is None and stream is None:  # the hot case first: one test
            if self._fast is not None:
                buf = self._fast.take(self, n_obj, False, 0)
        else:
            if options is not None:
                options, stream = self._split_stream(options, stream)  # the deprecated option
            if stream is not None:
                self._stream_of(stream, &handle)
                has_stream = True
            if self._fast is not None and options is None:
                buf = self._fast.take(self, n_obj, has_stream, handle)
        if buf is None:
            self._enter()  # a finalizer run by the subclass's code defers its free
            try:
                if has_stream:
                    buf = self._allocate(n_obj, self._coerce_options(options), stream=handle)
                else:
                    buf = self._allocate(n_obj, self._coerce_options(options))
            finally:
                self._leave()
        if has_stream:
            buf._has_stream = True
            buf._stream = handle
        cdef int status = self._add(buf)
        if status != ADDED:
            self._refuse(buf, status, "mmap")
        return buf

    def munmap(self, buffer, size=None, *, stream=None):
        """Free a mapping made by this area, given as the Buffer or its base pointer, in
        the order of ``stream`` (None: the stream the buffer was allocated on, if any)."""
        if stream is None:
            self._unmap(buffer, size, True)
        else:
            self._unmap_on(buffer, size, stream)

    def _munmap_slow(self, buffer, size=None):
        """munmap through _free, never the fast path."""
        self._unmap(buffer, size, False)

    cdef int _unmap(self, buffer, size, bint fast) except -1:
        if self._closed:
            self._check_open()
        cdef BufferBase buf = self._lookup(buffer, size)
        self._detach(buf)
        return self._free_detached(buf, fast)

    cdef int _unmap_on(self, buffer, size, object stream) except -1:
        """munmap in the order of ``stream`` (not None), converted once here."""
        if self._closed:
            self._check_open()
        cdef unsigned long long handle = 0
        self._stream_of(stream, &handle)
        cdef BufferBase buf = self._lookup(buffer, size)
        self._detach(buf)
        if self._fast is not None and self._fast.give(self, buf, True, handle):
            return 0
        self._enter()
        try:
            self._free(buf, stream=handle)
        except BaseException:
            self._restore(buf)  # the memory is still there: keep tracking it
            raise
        finally:
            self._leave()
        return 0

    cdef int _free_detached(self, BufferBase buf, bint fast) except -1:
        """Free a buffer _detach (or a finalizer) untracked, on the stream it was
        allocated on if any: the fast path (if ``fast``), else _free (counted inside the
        area; it reads the buffer's stream). If the free fails the buffer is tracked
        again (_restore) and the error raised."""
        if fast and self._fast is not None and self._fast.give(self, buf, buf._has_stream, buf._stream):
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


def _mmap_function():
    """A new function object that runs :meth:`AreaBase.mmap` (a call of the same
    compiled body), for an area class to give its ``mmap`` its own docstring and
    signature without a Python frame on the hot path (aml_core.area.compiled_mmap)."""

    def mmap(AreaBase self, size, options=None, *, stream=None):
        return self._map(size, options, stream)

    return mmap


cdef object _stream_module = None
cdef object _stream_type = None  # aml_core.stream.Stream, once that module is imported


cdef object _convert_stream(object stream):
    """aml_core.stream.as_stream_handle (imported on first use: it imports this module)."""
    global _stream_module, _stream_type
    if _stream_module is None:
        from . import stream as _mod
        _stream_module = _mod
        _stream_type = _mod.Stream
    return _stream_module.as_stream_handle(stream)


def address_of(obj, /):
    """address_of(obj) -> (address, nbytes, readonly) of a contiguous buffer exporter."""
    cdef Py_buffer view
    PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE)
    try:
        return (<unsigned long long><uintptr_t>view.buf, view.len, bool(view.readonly))
    finally:
        PyBuffer_Release(&view)


# ---- peer copies: the checks of both buffers (aml_core.gpu.peer.copy_peer) ------------
cdef object _kind_device = None  # aml_core.specs.Kind.DEVICE, imported on first use


cdef BufferBase _peer_side(object buffer, str what, object backend):
    """``buffer`` as a copy_peer side: a live buffer of ``backend``'s, of device memory
    with a device index; AMLTypeError/AMLValueError saying which rule it breaks."""
    global _kind_device
    if _kind_device is None:
        from .specs import Kind
        _kind_device = Kind.DEVICE
    if not isinstance(buffer, BufferBase):
        raise AMLTypeError(f"{what} must be an aml Buffer, not {type(buffer).__name__}")
    cdef BufferBase buf = buffer
    if buf._area is None:
        raise AMLValueError(f"{what} was never mapped by an area")
    if buf.flags & F_RELEASED:
        raise AMLValueError(f"{what} was freed")
    area_backend = buf._area.backend
    if area_backend != backend:
        raise AMLValueError(f"{what} belongs to the {area_backend!r} backend, not {backend!r}")
    device = buf.device
    if buf.kind is not _kind_device or device is None or device < 0:
        raise AMLValueError(
            f"copy_peer copies device memory; {what} is {buf.kind.value} memory "
            "(use the area's read and write for host and managed memory)"
        )
    return buf


cdef inline object _offset(object value, str what):
    """An offset by the size rule (checks.size, zero allowed): exact ints in range at C
    speed, anything else through the rule itself."""
    if type(value) is int and 0 <= value <= MAX_SIZE:
        return value
    return _check_size(value, what, zero=True)


def peer_copy_args(dst, src, size, dst_offset, src_offset, backend, /):
    """peer_copy_args(dst, src, size, dst_offset, src_offset, backend, /) -> (dst_ptr, dst_device, src_ptr, src_device, n)

    The native arguments of a copy of ``size`` bytes (None: the rest of ``src`` after
    ``src_offset``) from ``src`` to ``dst`` (aml_core.gpu.peer.copy_peer documents the
    rules), or the error of the first rule broken; nothing is copied here."""
    cdef BufferBase d = _peer_side(dst, "dst", backend)
    cdef BufferBase s = _peer_side(src, "src", backend)
    d_off = _offset(dst_offset, "dst_offset")
    s_off = _offset(src_offset, "src_offset")
    if size is None:
        n = s.size - s_off
    elif type(size) is int and 0 < size <= MAX_SIZE:
        n = size
    else:
        n = _check_size(size)
    if n <= 0 or s_off + n > s.size:
        raise AMLValueError(f"{n} bytes at src_offset {s_off} are not inside src ({s.size} bytes)")
    if d_off + n > d.size:
        raise AMLValueError(f"{n} bytes at dst_offset {d_off} do not fit in dst ({d.size} bytes)")
    # The areas check the buffers are still theirs and live (a concurrent free raises).
    (<AreaBase>d._area)._lookup(d, None)
    (<AreaBase>s._area)._lookup(s, None)
    return d.device_ptr + d_off, d.device, s.device_ptr + s_off, s.device, n


# The fast paths this module's areas install, re-exported here (aml_core._buffer.X is
# their public import path). Imported last: they cimport this module's types.
from ._allocator import OPS, STREAM_OPS, NativeAllocator, NativePath, NativeStreams, _noop_control, _noop_functions
from ._kernel import PoolKernel
