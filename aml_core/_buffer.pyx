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

The files
    This file holds the module's C declarations and includes one part per concern
    (docs/kernel.md, "The buffer module's files"): ``_buffer_views.pxi`` (BufferBase,
    its views and DLPack), ``_buffer_public.pxi`` (the public ``Buffer``, compiled),
    ``_buffer_table.pxi`` (the live table and its atomic changes:
    ``_LiveTable``), ``_buffer_lifetime.pxi`` (who is inside an area, AreaLock, a
    dropped buffer's free: ``_Lifetime``), ``_buffer_make.pxi`` (making buffers and the
    fast path an area installs: ``_Maker``), ``_buffer_map.pxi`` (``AreaBase``: mmap,
    munmap, the stream conversion) and ``_buffer_peer.pxi`` (a peer copy's checks).
    AreaBase's methods are a chain of bases, lowest first, one per file; every field is
    declared once, on ``_LiveTable`` (_buffer.pxd).
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
    AMLError,
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


include "_buffer_views.pxi"
include "_buffer_public.pxi"
include "_buffer_table.pxi"
include "_buffer_lifetime.pxi"
include "_buffer_make.pxi"
include "_buffer_map.pxi"
include "_buffer_peer.pxi"


# The fast paths this module's areas install, re-exported here (aml_core._buffer.X is
# their public import path). Imported last: they cimport this module's types.
from ._allocator import OPS, STREAM_OPS, NativeAllocator, NativePath, NativeStreams, _noop_control, _noop_functions
from ._kernel import PoolKernel
