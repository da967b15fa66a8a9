# Part of aml_core/_buffer.pyx (included by it: one extension module); docs/kernel.md
# says which file holds which policy.
# The live table and its bookkeeping: _LiveTable, the lowest class of AreaBase's chain
# (every field of an area is declared on it, in _buffer.pxd).

# What AreaBase._add did.
cdef enum:
    ADDED = 0
    CLOSED = 1
    FULL = 2
    NULL_PTR = 3  # the native allocation "succeeded" with NULL
    DUPLICATE = 4  # ... or with an address that is already live here
    NOMEM = 5  # the live table could not grow


# The live table: an AddrSlot table (_addrmap.pxd) of borrowed buffers (see the module doc).


cdef object _seq_of(BufferBase buf):
    return buf._seq


cdef object SEQ_KEY = _seq_of  # buffers() and _drain() sort by it: oldest first


@cython.no_gc_clear  # finalizers that run after a collection may still use the table
@cython.auto_pickle(False)
cdef class _LiveTable:
    """_LiveTable(*args, **kwargs)
--

    The live table of an area (AreaBase's lowest base): its live mappings, counters and
    closed flag, and the atomic changes of that bookkeeping (_add, _detach, _restore,
    _resized, _drain, _untrack_viewed), each of which runs under the GIL without releasing
    it. The table does not keep buffers alive (see the module doc)."""

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
            if self._kept.pop(key_of(buf), None) is None:  # exact int key: no Python code
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
        if buf is None or not (buf.flags & F_BOUND):
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
        self._kept[key_of(buf)] = buf  # an existing dict: may resize, runs no Python code
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
