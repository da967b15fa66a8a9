# Part of aml_core/_buffer.pyx (included by it: one extension module); docs/kernel.md
# says which file holds which policy.
# A buffer and its views: BufferBase (its fields' properties, the finalizer's entry, the
# buffer protocol, DLPack capsules) and what a capsule owns (its deleters).

cdef str RELEASED_MSG = "this aml buffer was freed: its memory can no longer be viewed"
cdef char *BYTE_FORMAT = b"B"


cdef inline object key_of(BufferBase buf):
    """A bound buffer's address as an exact int, made once, on first use (a pooled block's
    Buffer gets none made until something asks): the key of its area's ``_kept`` and
    what ``ptr`` returns."""
    if buf._key is None:
        if not (buf.flags & F_BOUND):
            return buf._ptr
        buf._key = buf._ptr
    return buf._key


# ---- DLPack: what a capsule owns ---------------------------------------------------------
cdef inline object exact_int(object given, unsigned long long value):
    """``given`` itself when it is an exact int (no allocation), else the int of value."""
    if type(given) is int:
        return given
    return value


# ---- buffers ---------------------------------------------------------------------------
# A free list: the objects of the compiled classes (BufferBase, Buffer: one size, not heap
# types) are reused, so that a cached pool block's Buffer costs no allocation. An object
# whose finalizer ran keeps CPython's "finalized" mark in its GC header when Cython puts it
# on the list, and CPython would never finalize it again: _make and a first _bind clear
# the mark (aml_gc_unfinalize), so a reused Buffer dropped while live is freed by its finalizer as
# any other. Where the GC header's layout is not the one known here (not CPython 3.11 to
# 3.14 with the GIL), the free list is off (CYTHON_USE_FREELISTS 0): objects are allocated.
cdef extern from *:
    """
    #if CYTHON_COMPILING_IN_CPYTHON && !defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030F0000
    /* CPython's PyGC_Head (internal/pycore_gc.h): bit 0 of _gc_prev is _PyGC_PREV_MASK_FINALIZED. */
    typedef struct { uintptr_t _gc_next; uintptr_t _gc_prev; } aml_gc_head;
    #define aml_gc_unfinalize(o) (((aml_gc_head *)(o) - 1)->_gc_prev &= ~(uintptr_t)1)
    #else
    #undef CYTHON_USE_FREELISTS
    #define CYTHON_USE_FREELISTS 0
    #define aml_gc_unfinalize(o) ((void)0)
    #endif
    """
    void aml_gc_unfinalize(object o) noexcept


@cython.freelist(16)
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
        return key_of(self)

    @property
    def device_ptr(self):
        """The address devices use (``ptr`` unless the area gave another)."""
        return key_of(self) if self._device_ptr is None else self._device_ptr

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
        if not (self.flags & F_BOUND):
            aml_gc_unfinalize(self)  # never bound: a new object (see the free list above)
        elif p != self._ptr and self._device_ptr is None:
            self._device_ptr = key_of(self)  # the device address stays the one made with it
        if self._key is None or p != self._ptr:
            self._key = exact_int(ptr, p)
        self._ptr = p
        self.size = size
        self.flags = (self.flags & ~(F_HOST | F_READONLY)) | (flags & (F_HOST | F_READONLY)) | F_BOUND
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



def address_of(obj, /):
    """address_of(obj) -> (address, nbytes, readonly) of a contiguous buffer exporter."""
    cdef Py_buffer view
    PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE)
    try:
        return (<unsigned long long><uintptr_t>view.buf, view.len, bool(view.readonly))
    finally:
        PyBuffer_Release(&view)
