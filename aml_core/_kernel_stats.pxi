# Statistics and what the pool asks: the Counters struct, by stream, a live block.
# Included by aml_core/_kernel.pyx (one extension module: see docs/kernel.md, "Layout").

cdef class _Stats(_SlowPath):
    """The statistics (the Counters struct) and the pool's questions."""

    # -- what the pool asks --------------------------------------------------------------
    def block(self, u64 addr):
        """The live block at ``addr``: (device_ptr, flags, (dl_type, dl_id), device, the
        slab's Buffer or None, the offset in the slab, the block's bytes)."""
        self.lock_gil()
        try:
            b = live_find(&self._live, addr)
            if b == NULL:
                raise AMLValueError(f"0x{addr:x} is not a live block of this pool")
            slab = b.slab
            info = <tuple>slab.cinfo
            buf = None if slab.buf == NULL else <object>slab.buf
            return (slab.dptr + (addr - slab.ptr), slab.flags, (slab.dl_type, slab.dl_id), info[5], buf,
                    addr - slab.ptr, b.size)
        finally:
            self.unlock()

    def stats(self):
        """The counters, after coalescing the host stacks: the ``Counters`` struct
        (_kernel.pxd), filled under the mutex, as a dict of its fields by name."""
        cdef Counters c
        self.lock_gil()
        try:
            if not self._fast.empty():
                self.flush()
            c.requested = self.requested
            c.peak_requested = self.peak_requested
            c.blocks = self.blocks
            c.reserved = self.reserved
            c.peak_reserved = self.peak_reserved
            c.slabs = self._chunks.size() if self._segment != NULL else self._slabs.size()
            c.native_allocs = self.native_allocs
            c.native_frees = self.native_frees
            c.hits = self.hits
            c.misses = self.misses
            c.largest_free = self.largest_free()
        finally:
            self.unlock()
        return c

    def reset_peak(self):
        self.lock_gil()
        self.peak_requested = self.requested
        self.peak_reserved = self.reserved
        self.unlock()

    def stream_stats(self):
        """Live and cached blocks by stream, walked under the mutex: {stream: (requested,
        block_bytes, cached_bytes, live_blocks, cached_blocks)}. A stream's live blocks
        are those allocated on it, its cached ones those on its free list; None is host
        order: live blocks allocated without a stream, and every other cached block (the
        host stacks and the heaps, ``reserved - blocks`` less the streams' lists). Only
        streams with a live or a cached block appear; None always does (statistics)."""
        cdef Block *b
        cdef size_t i
        self.lock_gil()
        try:
            out = {}
            for i in range(self._live.cap):
                if self._live.slots[i].key == 0:
                    continue
                b = <Block *>self._live.slots[i].value
                key = b.stream if b.has_stream else None
                r, used, cached, n, m = out.get(key, (0, 0, 0, 0, 0))
                out[key] = (r + b.requested, used + b.size, cached, n + 1, m)
            stream_bytes = 0
            it = self._sfast.begin()
            while it != self._sfast.end():
                if not deref(it).second.empty():
                    key = deref(it).first.first
                    held = deref(it).second.size()
                    size = deref(it).first.second * held
                    stream_bytes += size
                    r, used, cached, n, m = out.get(key, (0, 0, 0, 0, 0))
                    out[key] = (r, used, cached + size, n, m + held)
                inc(it)
            host_free = self._heap0.size() + self._heap1.size()
            fast_it = self._fast.begin()
            while fast_it != self._fast.end():
                host_free += deref(fast_it).second.size()
                inc(fast_it)
            r, used, cached, n, m = out.get(None, (0, 0, 0, 0, 0))
            out[None] = (r, used, self.reserved - self.blocks - stream_bytes, n, host_free)
            return out
        finally:
            self.unlock()

    def live_blocks(self):
        """How many blocks are live (handed out and not freed)."""
        return self._live.count

    @property
    def granule(self):
        return self._mask + 1
