# Heaps and fit: the live blocks, size classes, best fit, splitting, coalescing, the exact-size stacks.
# Included by aml_core/_kernel.pyx (one extension module: see docs/kernel.md, "Layout").

@cython.final
# -- the live blocks (LiveMap, _kernel.pxd: an AddrSlot table) ---------------------------------
cdef inline Block *live_find(LiveMap *m, u64 addr) noexcept nogil:
    cdef Py_ssize_t i = addr_find(m.slots, m.cap, addr)
    if i < 0:
        return NULL
    return <Block *>m.slots[i].value


cdef void live_put(LiveMap *m, u64 addr, Block *b) noexcept nogil:
    """Enter the live block ``b`` at ``addr`` (absent: a block is live once). The slots
    grow at three quarters full; without memory for that, the entry goes into a free
    slot of the present ones, and only a table with none left aborts (as the
    unordered_map's allocation failure did)."""
    cdef AddrSlot *grown
    if (m.count + 1) * 4 > m.cap * 3:
        grown = addr_grown(m.slots, m.cap)
        if grown != NULL:
            m.slots = grown
            m.cap = 64 if m.cap == 0 else m.cap * 2
        elif m.count + 1 >= m.cap:
            abort()
    addr_put(m.slots, m.cap, addr, <void *>b)
    m.count += 1


cdef Block *live_pop(LiveMap *m, u64 addr) noexcept nogil:
    """Remove the live block at ``addr`` and return it (NULL: none)."""
    cdef Py_ssize_t i = addr_find(m.slots, m.cap, addr)
    if i < 0:
        return NULL
    cdef Block *b = <Block *>m.slots[i].value
    addr_remove_at(m.slots, m.cap, <size_t>i)
    m.count -= 1
    return b


cdef class _Heaps(_History):
    """The blocks: heaps, best fit, splitting and coalescing, the stacks, a hit."""

    # -- heaps: free blocks by (size, address) ---------------------------------------------
    cdef inline cmap[HeapKey, Block *] *_heap(self, int h) noexcept nogil:
        return &self._heap0 if h == 0 else &self._heap1

    cdef inline int heap_of(self, size_t n) noexcept nogil:
        return 0 if (self._one_heap or n <= self._small_max) else 1

    cdef inline size_t split_min(self, int h) noexcept nogil:
        return self._mask + 1 if h == 0 else self._small_max

    cdef void heap_insert(self, Block *b) noexcept nogil:
        b.key = b.addr  # the lowest address first among equal sizes
        b.state = B_FREE
        deref(self._heap(b.slab.heap))[HeapKey(b.size, b.key)] = b

    cdef void heap_remove(self, Block *b) noexcept nogil:
        self._heap(b.slab.heap).erase(HeapKey(b.size, b.key))

    cdef Block *best_fit(self, int h, size_t n) noexcept nogil:
        cdef cmap[HeapKey, Block *] *heap = self._heap(h)
        it = heap.lower_bound(HeapKey(n, 0))
        if it == heap.end():
            return NULL
        if self._has_max_split and n <= self._max_split and deref(it).first.first > self._max_split:
            return NULL  # max_split_size: an oversize block (never split) is not wasted on it
        return deref(it).second

    cdef size_t largest_free(self) noexcept nogil:
        cdef size_t best = 0
        cdef int h
        for h in range(2):
            heap = self._heap(h)
            if not heap.empty() and deref(heap.rbegin()).first.first > best:
                best = deref(heap.rbegin()).first.first
        return best

    # -- blocks: take, split, coalesce ------------------------------------------------------
    cdef void use(self, Block *b, size_t n) noexcept nogil:
        """Take a free block out of its heap for a request of ``n`` rounded bytes,
        splitting off the rest when at least the heap's split minimum remains."""
        cdef Slab *slab = b.slab
        cdef Block *tail
        cdef size_t rest
        self.heap_remove(b)
        rest = b.size - n
        if self._has_max_split and b.size > self._max_split:
            rest = 0  # max_split_size: a block above it is never split
        if rest >= self.split_min(slab.heap):
            tail = <Block *>calloc(1, sizeof(Block))
            if tail != NULL:
                tail.addr = b.addr + n
                tail.size = rest
                b.size = n
                _link_after(slab, b, tail)
                self.heap_insert(tail)
            # no memory for the tail's record: the block keeps it (bounded waste)
        b.state = B_USED
        self.blocks += b.size

    cdef Slab *coalesce(self, Block *b) noexcept nogil:
        """Mark a block free, merge it with its free neighbours and index the result."""
        cdef Slab *slab = b.slab
        cdef Block *prev = b.prev
        cdef Block *nxt
        if prev != NULL and prev.state == B_FREE:
            self.heap_remove(prev)
            self.absorb(slab, prev, b)
            b = prev
        nxt = b.next
        if nxt != NULL and nxt.state == B_FREE:
            self.heap_remove(nxt)
            self.absorb(slab, b, nxt)
        self.heap_insert(b)
        return slab

    cdef void absorb(self, Slab *slab, Block *left, Block *right) noexcept nogil:
        left.size += right.size
        _unlink(slab, right)
        cfree(right)

    cdef void flush(self) noexcept nogil:
        """Coalesce the blocks of the host-order exact-size stacks into the heaps."""
        cdef size_t i
        it = self._fast.begin()
        while it != self._fast.end():
            for i in range(deref(it).second.size()):
                self.coalesce(deref(it).second[i])
            inc(it)
        self._fast.clear()

    cdef Block *pop_host(self, size_t n) noexcept nogil:
        it = self._fast.find(n)
        if it == self._fast.end() or deref(it).second.empty():
            return NULL
        cdef Block *b = deref(it).second.back()
        deref(it).second.pop_back()
        return b

    cdef Block *pop_stream(self, u64 stream, size_t n) noexcept nogil:
        it = self._sfast.find(StreamKey(stream, n))
        if it == self._sfast.end() or deref(it).second.empty():
            return NULL
        cdef Block *b = deref(it).second.back()
        deref(it).second.pop_back()
        self._held[stream] -= 1
        return b

    cdef Block *take_cached(self, size_t n, bint has_stream, u64 stream) noexcept nogil:
        """A hit without a native call or Python: the request's exact-size stack (its
        stream's, or host order's), else, in host order, or on a stream when the stream
        stacks hold nothing to hand over, the best fit after coalescing. NULL: the slow
        path decides (hand-over, streams reclaimed, growth)."""
        cdef Block *b
        cdef int h
        if has_stream:
            b = self.pop_stream(stream, n)
            if b == NULL:
                b = self.pop_host(n)
            if b != NULL:
                b.state = B_USED
                self.blocks += b.size
                return b
        else:
            b = self.pop_host(n)
            if b != NULL:
                b.state = B_USED
                self.blocks += b.size
                return b
        h = self.heap_of(n)
        b = self.best_fit(h, n)
        if b == NULL and not self._fast.empty():
            self.flush()
            b = self.best_fit(h, n)
        if b == NULL:
            return NULL
        self.use(b, n)
        return b

    cdef void hand_out(self, Block *b, size_t size, bint has_stream, u64 stream) noexcept nogil:
        """Count a taken block as live: its stream, the requested bytes and their peak."""
        b.has_stream = has_stream
        b.stream = stream
        b.requested = size
        live_put(&self._live, b.addr, b)
        if self._trace:
            self.record(EV_ALLOC, b.addr, b.size, size, has_stream, stream)
        self.hits += 1
        self.requested += size
        if self.requested > self.peak_requested:
            self.peak_requested = self.requested

    cdef int put_back(self, Block *b, bint has_stream, u64 stream) noexcept nogil:
        """A live block freed (its _live entry and requested bytes gone already): onto its
        stream's stack, or the host stack while the pool keeps stacks. 1: it must be
        returned to its heap by the slow path (release threshold, a closed pool)."""
        if self._trace:
            self.record(EV_FREE, b.addr, b.size, b.requested, has_stream, stream)
        if has_stream:
            self.blocks -= b.size
            b.has_stream = True
            b.stream = stream
            b.state = B_STREAM
            self._sfast[StreamKey(stream, b.size)].push_back(b)
            self._held[stream] += 1
            return 0
        if self.keep_fast:
            self.blocks -= b.size
            b.has_stream = False
            if b.slab.heap == 1:  # a large block coalesces at once (docs/kernel.md)
                self.coalesce(b)
                return 0
            b.state = B_HOST
            self._fast[b.size].push_back(b)
            return 0
        return 1

    cdef Block *unlive(self, u64 addr) noexcept nogil:
        cdef Block *b = live_pop(&self._live, addr)
        if b == NULL:
            return NULL
        self.requested -= b.requested
        return b

    cdef int give_live(self, u64 addr, bint has_stream, u64 stream) noexcept nogil:
        """The free of the live block at ``addr`` in C (the mutex held): onto its stack,
        its own stream's or, with ``has_stream``, ``stream``'s. 0: done; 1: the slow path
        must free it (no stacks kept, or the history's Python path); -1: no block is live
        there. While stacks are kept, put_back always takes the block."""
        if not self.keep_fast or self._trace & T_PYTHON:
            return 1
        cdef Block *b = self.unlive(addr)
        if b == NULL:
            return -1
        if has_stream:
            self.put_back(b, True, stream)
        else:
            self.put_back(b, b.has_stream, b.stream)
        return 0


cdef inline void _link_after(Slab *slab, Block *prev, Block *b) noexcept nogil:
    """Put ``b`` in ``slab``'s address-ordered list right after ``prev`` (NULL: first)."""
    b.slab = slab
    b.prev = prev
    b.next = slab.first if prev == NULL else prev.next
    if b.next == NULL:
        slab.last = b
    else:
        b.next.prev = b
    if prev == NULL:
        slab.first = b
    else:
        prev.next = b


cdef inline void _unlink(Slab *slab, Block *b) noexcept nogil:
    """Take ``b`` out of ``slab``'s address-ordered list (``_link_after``'s inverse)."""
    if b.prev == NULL:
        slab.first = b.next
    else:
        b.prev.next = b.next
    if b.next == NULL:
        slab.last = b.prev
    else:
        b.next.prev = b.prev
