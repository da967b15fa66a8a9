# The slow path (alloc, free: GIL and mutex held), the release threshold and closing.
# Included by aml_core/_kernel.pyx (one extension module: see docs/kernel.md, "Layout").

cdef class _SlowPath(_Slabs):
    """The slow path: what the fast path and the hooks' hits decline."""

    # -- the slow path (GIL and mutex held: callers use ``with kernel``) ------------------
    def alloc(self, Py_ssize_t size, object stream=None):
        """Take a block for ``size`` bytes (checked by the caller) in host order
        (``stream`` None) or in a stream's order (its handle): the cached paths, the
        hand-over from another stream, the streams reclaimed, a new slab or chunk (past the
        limit or on ENOMEM: the cache released, one retry). Returns the address."""
        cdef bint has_stream = stream is not None
        cdef u64 s = stream if has_stream else 0
        if has_stream and self._streams is None:
            raise AMLNotSupported("this pool orders no work on streams (its area has no stream operations)")
        return self._alloc(size, has_stream, s).addr

    cdef Block *_alloc(self, Py_ssize_t size, bint has_stream, u64 s) except NULL:
        """alloc's body (the mutex taken here): the live block, counted."""
        cdef size_t n = (<size_t>size + self._mask) & ~self._mask
        cdef Block *b
        self.lock_gil()
        cdef u64 since = self._recorded
        try:
            b = self.take_cached(n, has_stream, s)
            if b == NULL and has_stream:
                b = self._hand_over(n, s)
                if b == NULL:
                    self._reclaim_streams()
            if b == NULL:
                b = self._take_slow(n)
            self.hand_out(b, size, has_stream, s)
            if self._trace & T_PYTHON:
                self._attach_frames(since)
            return b
        finally:
            self.unlock()

    cdef Block *_take_slow(self, size_t n) except NULL:
        """Best fit after the stacks and the streams are reclaimed, else a new slab."""
        cdef int h = self.heap_of(n)
        cdef Block *b = self.best_fit(h, n)
        if b == NULL and not self._fast.empty():
            self.flush()
            b = self.best_fit(h, n)
        if b == NULL and not self._sfast.empty():
            self._reclaim_streams()
            self.flush()
            b = self.best_fit(h, n)
        if b == NULL:
            b = self._grow(h, n)
            self.misses += 1
            self.hits -= 1  # hand_out counts a hit: a miss is not one
        self.use(b, n)
        return b

    def free(self, u64 addr, object stream=None):
        """Free the live block at ``addr`` (the slow path): onto its stream's stack (its
        own, or ``stream``, the one munmap named), the host stack, or back to its heap, releasing
        what the release threshold or a closed pool asks."""
        self.lock_gil()
        cdef u64 since = self._recorded
        try:
            b = self.unlive(addr)
            if b == NULL:
                raise AMLValueError(f"0x{addr:x} is not a live block of this pool")
            has_stream = b.has_stream
            s = b.stream
            if stream is not None:
                has_stream = True
                s = stream
            if has_stream and self._streams is None:
                has_stream = False  # no stream operations: host order (see set_streams)
            owner = self._owner_area()
            closed = owner is None or owner.closed
            if has_stream and closed and not self.closing:
                # freed after close() detached it: its slab goes now, after its stream
                try:
                    self._streams.synchronize(s)
                except BaseException:
                    live_put(&self._live, b.addr, b)  # still live: the caller keeps the buffer, a retry frees it
                    self.requested += b.requested
                    raise
                has_stream = False
            if self.put_back(b, has_stream, s):
                self._give(b, closed)
            else:
                self.slow_munmaps += 1
            if self._trace & T_PYTHON:
                self._attach_frames(since)
        finally:
            self.unlock()

    cdef int _give(self, Block *b, bint closed) except -1:
        """Return a live block to its heap now, and release what is due."""
        self.blocks -= b.size
        cdef Slab *slab = self.coalesce(b)
        if closed:
            if not self.closing:  # a buffer close() detached while viewed: its slab goes now
                self._auto_release(slab, 0)
        elif self._has_threshold:
            self._auto_release(slab, self._threshold)
        return 0

    cdef int _auto_release(self, Slab *slab, size_t keep) except -1:
        try:
            if self._segment != NULL:
                self._trim_segment(keep)
            elif self._whole_free(slab) and <size_t>(self.reserved - self.blocks) > keep:
                self._release_slab(slab)
        except AMLError as exc:
            warnings.warn(f"the pool could not return cached memory: {exc}", ResourceWarning, stacklevel=3)
        return 0

    # -- closing --------------------------------------------------------------------------
    def close_stacks(self):
        """close() begins: no more stacks, the host stacks coalesced."""
        self.lock_gil()
        self.keep_fast = False
        self._shut = True
        self.flush()
        self.unlock()

    def let_go(self, viewed):
        """After close(): every slab still held whose range holds no address of
        ``viewed`` (buffers detached while viewed) and no block a framework hook still
        holds is the area's again; the others stay the pool's until those go."""
        cdef size_t i
        cdef Slab *s
        cdef Block *b
        cdef bint used
        self.lock_gil()
        try:
            for i in range(self._slabs.size()):
                s = self._slabs[i]
                used = False
                b = s.first
                while b != NULL and not used:
                    used = b.state == B_USED
                    b = b.next
                lo = s.ptr
                hi = s.ptr + s.size
                if s.buf != NULL and not used and not any(lo <= p < hi for p in viewed):
                    self._area._hold(<object>s.buf, False)
        finally:
            self.unlock()
