# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, binding=False
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
    bookkeeping methods (_add, _detach, _restore, _resized, _drain), each of which runs
    under the GIL without releasing it, so each change is atomic; the backend's native
    _allocate and _free calls happen outside them.

"Without releasing it" means those methods run no Python code while they change
state: they use a dict keyed by exact ints, the buffers' C fields and C counters, they
allocate no object the garbage collector tracks between reading and writing, and
every buffer they drop from the table is still referenced by the caller. Errors are
raised before anything changes.
"""

cimport cython
from cpython.mem cimport PyMem_RawCalloc, PyMem_RawFree, PyMem_RawMalloc
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport int64_t, uintptr_t

from ._dlpack cimport (
    DLPACK_FLAG_BITMASK_READ_ONLY,
    DLPACK_MAJOR_VERSION,
    DLPACK_MINOR_VERSION,
    DLManagedTensor,
    DLManagedTensorVersioned,
    DLTensor,
    kDLUInt,
)

from .errors import AMLBusyError, AMLDomainError, AMLFailure, AMLTypeError, AMLValueError
from .specs import as_size

cdef extern from "Python.h":
    # Declared here without exception checks: the callers test and clear errors.
    Py_ssize_t _as_ssize "PyLong_AsSsize_t"(object) noexcept
    PyObject *PyErr_Occurred() noexcept
    void PyErr_Clear() noexcept
    int Py_IsInitialized() noexcept nogil
    int PyType_IsSubtype(PyTypeObject *a, PyTypeObject *b) noexcept
    PyObject *_PyType_Lookup(PyTypeObject *type, object name) noexcept  # borrowed, no error
    PyTypeObject *Py_TYPE(object o) noexcept
    object PyDict_Values(object d)
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

# What AreaBase._add did.
cdef enum:
    ADDED = 0
    CLOSED = 1
    FULL = 2
    NULL_PTR = 3  # the native allocation "succeeded" with NULL
    DUPLICATE = 4  # ... or with an address that is already live here

cdef enum:
    F_HOST = 1
    F_READONLY = 2
    F_RELEASED = 4  # freed: no new export

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
cdef class BufferBase:
    """Base of aml buffers: an address range with counted zero-copy exports.

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
    (<BufferBase><object>owner).exports -= 1
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


# ---- areas -------------------------------------------------------------------------------
@cython.no_gc_clear  # finalizers that run after a collection may still use the table
cdef class AreaBase:
    """The compiled part of aml_core.area.Area: its live mappings, counters and closed
    flag, mmap, munmap, the checks of munmap's target (_lookup) and _new_buffer.

    Every change to the live mappings happens inside one of the bookkeeping methods
    (_add, _detach, _restore, _resized, _drain), each of which runs under the GIL without
    releasing it, so each change is atomic; the subclass's _allocate and _free run
    outside them."""

    #: The kind of memory this area allocates.
    cdef public object kind
    #: The area's device index, or None.
    cdef public object device
    #: The live mappings, base address (exact int) -> buffer, oldest first. Read it; only
    #: this class changes it.
    cdef readonly dict _live
    cdef bint _closed
    # C counters. Live mappings are disjoint address ranges, so their total fits in 64
    # bits: _add refuses a mapping that would pass it (only fake pointers can).
    cdef unsigned long long _bytes
    cdef unsigned long long _peak
    cdef unsigned long long _maps
    cdef unsigned long long _unmaps

    def __cinit__(self, *args, **kwargs):
        self._live = {}

    # -- state -----------------------------------------------------------------------
    @property
    def closed(self):
        """True once close() started: the area refuses every further use."""
        return self._closed

    def _check_open(self):
        """Raise AMLValueError if the area is closed."""
        if self._closed:
            raise AMLValueError(f"this {self.backend} {self.kind.value} area is closed")

    def _stats(self):
        """(bytes_in_use, peak_bytes, live_mappings, total_maps, total_unmaps), read at once."""
        return (self._bytes, self._peak, len(self._live), self._maps, self._unmaps)

    def buffers(self):
        """The live buffers, oldest first."""
        return tuple(PyDict_Values(self._live))

    # -- the atomic changes of the bookkeeping (no Python code runs in them) ----------
    cdef int _add(self, BufferBase buf) except -1:
        """Track a new buffer and count the map (ADDED), or do nothing and say why not:
        CLOSED, FULL (the live bytes would not fit in 64 bits), NULL_PTR or DUPLICATE (a
        native call that reported success with an impossible address)."""
        if buf is None or buf._key is None:
            raise TypeError("this buffer is not bound to memory (make it with _new_buffer)")
        if self._closed:
            return CLOSED
        if buf._ptr == 0:
            return NULL_PTR
        old = self._live.get(buf._key)
        if old is not None and old is not buf and not ((<BufferBase>old).flags & F_RELEASED):
            return DUPLICATE
        if <unsigned long long>buf.size > ULLONG_MAX - self._bytes:
            return FULL
        key = buf._key
        replaced = self._live.setdefault(key, buf)
        if replaced is not buf:  # a stale entry at this address: `replaced` holds it
            self._live[key] = buf
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
        key = buf._key
        if buf.flags & F_RELEASED or self._live.get(key) is not buf:
            raise AMLValueError(f"{buf!r} was already unmapped")
        if buf.exports:
            raise AMLBusyError(
                f"{buf!r} is still viewed ({buf.exports} memoryview/NumPy/DLPack exports); "
                "release the views first"
            )
        buf.flags |= F_RELEASED
        del self._live[key]  # the caller still holds buf
        self._bytes -= buf.size
        self._unmaps += 1
        return 0

    def _resized(self, BufferBase buf not None, old_size):
        """Count the new size of a buffer a subclass re-bound (a growable buffer), if it is
        still live here; return whether it was."""
        cdef Py_ssize_t old = old_size
        if self._live.get(buf._key) is not buf:
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
        if self._closed and not self._live:
            return None
        live = PyDict_Values(self._live)  # the snapshot: allocated before anything changes
        self._closed = True
        cdef BufferBase buf
        for buf in live:
            self._bytes -= buf.size
        self._unmaps += len(live)
        self._live.clear()  # `live` still holds every buffer
        return live

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
        cdef PyObject *cls_attr
        if buffer_type is None:  # the class attribute, through the type attribute cache
            cls_attr = _PyType_Lookup(Py_TYPE(self), BUFFER_TYPE)
            tp = <object>cls_attr if cls_attr != NULL else type(self).buffer_type
        else:
            tp = buffer_type
        if not isinstance(tp, type) or not PyType_IsSubtype(<PyTypeObject *>tp, <PyTypeObject *>BufferBase):
            raise TypeError(f"buffer_type must be a Buffer class, not {tp!r}")
        if size < 0:
            raise ValueError("size must be >= 0")
        cdef unsigned long long p = ptr
        cdef int flags = (F_HOST if host_accessible else 0) | (F_READONLY if readonly else 0)
        dt, did = dl_device
        cdef int dl_type = dt, dl_id = did
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
        buf.device = self.device if device is None else device
        buf.device_ptr = buf._key if device_ptr is None else device_ptr
        buf.native = native
        return buf

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
        self._free(buf)
        if status == FULL:
            raise AMLDomainError(
                f"this {self.backend} {self.kind.value} area's live mappings would pass 2**64 - 1 "
                f"bytes with {buf.size} more"
            )
        raise AMLValueError(f"this {self.backend} {self.kind.value} area was closed during {during}")

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
            if self._live.get(buf._key) is not buf:
                raise AMLValueError(f"{target!r} is not live in this area")
        elif isinstance(target, int) and not isinstance(target, bool):
            found = self._live.get(target)
            if found is None:
                self._not_mapped(target)
            buf = found
        else:
            raise AMLTypeError(f"munmap takes a Buffer or an int pointer, not {type(target).__name__}")
        if size is not None and not (type(size) is int and size == buf.size and buf.size > 0):
            try:
                n = as_size(size)
            except AMLDomainError:  # larger than any mapping: a mismatch, not a domain error
                raise AMLValueError(f"munmap size {size} does not match the mapping's size {buf.size}") from None
            if n != buf.size:
                raise AMLValueError(f"munmap size {n} does not match the mapping's size {buf.size}")
        return buf

    def _not_mapped(self, target):
        for live in tuple(PyDict_Values(self._live)):
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
        """Allocate ``size`` bytes; see aml_core.area for the errors."""
        cdef Py_ssize_t n = 0
        if type(size) is int:  # the common case, a plain positive int, checked in C
            n = _as_ssize(size)
            if n == -1 and PyErr_Occurred() != NULL:
                PyErr_Clear()
        n_obj = size if n > 0 else as_size(size)
        if self._closed:
            self._check_open()
        cdef BufferBase buf = self._allocate(n_obj, self._coerce_options(options))
        cdef int status = self._add(buf)
        if status != ADDED:
            self._refuse(buf, status, "mmap")
        return buf

    def munmap(self, buffer, size=None):
        """Free a mapping made by this area, given as the Buffer or its base pointer."""
        if self._closed:
            self._check_open()
        cdef BufferBase buf = self._lookup(buffer, size)
        self._detach(buf)
        try:
            self._free(buf)
        except BaseException:
            self._restore(buf)  # the memory is still there: keep tracking it
            raise

    def _restore(self, BufferBase buf not None):
        """Track again a buffer munmap detached whose native free failed (the memory is
        still there, and a retry frees it)."""
        if <unsigned long long>buf.size > ULLONG_MAX - self._bytes:  # fake pointers only
            raise AMLDomainError("this area's live mappings would pass 2**64 - 1 bytes")
        key = buf._key
        replaced = self._live.get(key)
        buf.flags &= ~F_RELEASED
        self._live[key] = buf
        self._bytes += buf.size
        self._unmaps -= 1


def address_of(obj, /):
    """address_of(obj) -> (address, nbytes, readonly) of a contiguous buffer exporter."""
    cdef Py_buffer view
    PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE)
    try:
        return (<unsigned long long><uintptr_t>view.buf, view.len, bool(view.readonly))
    finally:
        PyBuffer_Release(&view)
