# The live table and buffer lifetime (aml_core/_buffer.pyx), as the other compiled
# modules see it: the buffer's and the area's C fields and the area's bookkeeping
# methods. A fast path (aml_core/_fastpath.pxd: the NativeAllocator's, the pool cache's)
# reads these fields and calls _buffer_type and _make; it changes the live table only
# through the area, which calls it (docs/kernel.md).
from cpython.object cimport PyObject
from ._addrmap cimport AddrSlot

from libc.stdint cimport int64_t

from ._dlpack cimport DLTensor
from ._fastpath cimport FastPath

# A buffer's flags (BufferBase.flags).
cdef enum:
    F_HOST = 1
    F_READONLY = 2
    F_RELEASED = 4  # freed: no new export
    F_NATIVE = 8  # made by the area's NativeAllocator: munmap may free it in C
    F_TRACKED = 16  # in its area's live table
    F_ORPHAN = 32  # detached while viewed (close, a with block): its finalizer frees it
    F_PENDING = 64  # unreachable, waiting in its area's _pending for a deferred free
    F_KEPT = 128  # held by its area's _kept: a native free failed, a retry frees it
    F_HELD = 256  # a slab a pool holds: its area refuses to free it (AreaBase._hold)
    F_BOUND = 512  # bound to memory (_make, _bind): an area may track it

# An area's live table is an AddrSlot table (_addrmap.pxd): the key is the buffer's
# address (NULL is never tracked), the value the buffer, borrowed.


# What a DLPack capsule of a buffer owns.
cdef struct DLContext:
    PyObject *owner  # a strong reference to the BufferBase, counted in its exports
    int64_t shape[1]


# Forget ``key`` (an area's address) in this thread's inside-table: the area is gone.
# The table is this module's thread-local state: other modules call this, never a copy.
cdef void forget_inside(void *key) noexcept nogil


cdef class BufferBase:
    cdef unsigned long long _ptr
    cdef readonly Py_ssize_t size
    cdef readonly Py_ssize_t exports
    cdef int flags
    cdef int dl_device_type
    cdef int dl_device_id
    cdef object _key  # ptr as an exact int, made on first use (key_of) where none was given
    cdef object _area
    cdef readonly object kind
    cdef readonly object device
    cdef object _device_ptr  # None: the same as ptr
    cdef readonly object native
    cdef object __weakref__
    cdef unsigned long long _seq  # when its area tracked it (buffers() is oldest first)
    cdef bint _has_stream  # allocated in a stream's order (mmap(..., stream=)): munmap's default
    cdef unsigned long long _stream  # that stream's handle

    cdef void _fill(self, DLTensor *dl, DLContext *ctx) noexcept


cdef class Buffer(BufferBase):
    pass


cdef class AreaLock:
    cdef object _ref
    cdef void *_key  # the area's address: its key in the thread's inside-table
    cdef object _acquire
    cdef object _release
    cdef readonly object lock

    cdef AreaBase _area(self)


# An area's compiled part is a chain of classes, lowest first, one file each
# (_buffer_table.pxi, _buffer_lifetime.pxi, _buffer_make.pxi, _buffer_map.pxi:
# docs/kernel.md); every field is declared once, on the lowest.
cdef class _LiveTable:
    cdef public object kind
    cdef public object device
    cdef bint _closed
    # The live table: _cap slots (a power of two, or 0), _count used.
    cdef AddrSlot *_slots
    cdef Py_ssize_t _cap
    cdef Py_ssize_t _count
    # C counters. Live mappings are disjoint address ranges, so their total fits in 64
    # bits: _add refuses a mapping that would pass it (only fake pointers can).
    cdef unsigned long long _bytes
    cdef unsigned long long _peak
    cdef unsigned long long _maps
    cdef unsigned long long _unmaps
    cdef unsigned long long _next_seq  # the order of tracking: buffers() is oldest first
    # Garbage collection: who is inside the area now, the buffers whose GC-driven free
    # waits for them, the tracked buffers whose native free failed, whether a drain
    # runs, the area a pool takes its memory from, and the areas above (weak
    # references) whose frees wait for this one.
    cdef int _inside
    cdef list _pending
    cdef dict _kept
    cdef bint _draining
    cdef AreaBase _below
    cdef list _waiting
    # The installed fast path (_set_native, _set_pool), or None.
    cdef FastPath _fast
    # Whether the area orders work on streams (_take_streams): else mmap and munmap
    # refuse a stream (AMLNotSupported, _no_streams says why).
    cdef bint _streams
    # The class's buffer type as _buffer_type last checked it, and the attribute-cache
    # versions of the area's class and that type then (0: not cached).
    cdef object _tp_checked
    cdef unsigned int _tp_area_tag
    cdef unsigned int _tp_buffer_tag
    # The attribute-cache version of the area's class when munmap last found that the
    # class does not override _lookup (0: not found), so munmap's check skips the
    # cpdef dispatch (_own_lookup).
    cdef unsigned int _tp_lookup_tag
    cdef object __weakref__

    # the live table
    cdef Py_ssize_t _find(self, unsigned long long key) noexcept
    cdef int _reserve(self) noexcept
    cdef void _put(self, BufferBase buf) noexcept
    cdef void _remove_at(self, Py_ssize_t at) noexcept
    cdef void _untrack(self, BufferBase buf) noexcept
    cdef bint _tracks(self, BufferBase buf) noexcept
    cdef object _at(self, target)
    cdef list _snapshot(self)
    # the atomic changes of the bookkeeping
    cdef int _add(self, BufferBase buf) except -1
    cdef int _detach(self, BufferBase buf) except -1
    cdef int _refuse_held(self, BufferBase buf) except -1


cdef class _Lifetime(_LiveTable):
    # garbage collection: a dropped buffer's free
    cdef void _enter(self) noexcept
    cdef void _leave(self) noexcept
    cdef bint _here(self, _LiveTable area) noexcept
    cdef _LiveTable _blocker(self)
    cdef void _defer(self, BufferBase buf, _LiveTable blocker) noexcept
    cdef void _dropped(self, BufferBase buf) noexcept
    cdef int _reclaim(self, BufferBase buf, int mode) except -1
    cdef bint _fast_free_ok(self, BufferBase buf) noexcept
    cdef int _reclaim_orphan(self, BufferBase buf, int mode) except -1
    cdef void _drain_pending(self) noexcept
    cdef void _views_gone(self) noexcept
    cdef void _report(self, object exc, object obj, str note) noexcept
    # the one free of a detached buffer (munmap's and a finalizer's)
    cdef int _free_detached(self, BufferBase buf, bint fast) except -1


cdef class _Maker(_Lifetime):
    # making buffers
    cdef object _buffer_type(self, buffer_type)
    cdef BufferBase _make(
        self, tp, ptr, unsigned long long p, Py_ssize_t size, int flags, int dl_type, int dl_id,
        device, device_ptr, native,
    )
    cdef int _refuse(self, BufferBase buf, int status, str during) except -1
    # the fast path
    cdef int _install(self, FastPath path) except -1


cdef class AreaBase(_Maker):
    # munmap's target, mmap and munmap, the stream conversion
    cpdef BufferBase _lookup(self, target, size)
    cdef bint _own_lookup(self) noexcept
    cdef object _map(self, size, options, stream)
    cdef int _stream_of(self, object stream, unsigned long long *handle) except -1
    cdef int _unmap(self, buffer, size, bint fast) except -1
    cdef int _unmap_on(self, buffer, size, object stream) except -1
