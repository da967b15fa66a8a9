# The expandable segment: growth by chunks at its end, trim from its end.
# Included by aml_core/_kernel.pyx (one extension module: see docs/kernel.md, "Layout").

cdef class _Segment(_Limit):
    """The expandable segment (set_segment): one growing reservation."""

    # -- the expandable segment -------------------------------------------------------------
    def set_segment(self, vm, u64 ptr, reservation_size, granularity, dl_device, device):
        """Back the pool with one growing segment of ``vm`` (a GrowableMemory) reserved at
        ``ptr``: one heap, split down to the granule, chunks of at least 2 MiB."""
        if self._segment != NULL or self._slabs.size():
            raise ValueError("the pool has memory already")
        cdef Slab *seg = <Slab *>calloc(1, sizeof(Slab))
        if seg == NULL:
            raise MemoryError()
        _set_slab(seg, ptr, 0, 0, (ptr, ptr, 0, dl_device[0], dl_device[1], device))
        seg.dptr = ptr
        self._segment = seg
        self._vm = vm
        self._res_end = ptr + reservation_size
        self._vm_granule = granularity
        self._one_heap = True
        self._small_slab = self._medium_slab = _round_up(2 * MIB, granularity)

    cdef Block *_grow_segment(self, size_t n) except NULL:
        """Map chunks at the end of the segment until its free tail holds ``n`` bytes."""
        cdef Slab *seg = self._segment
        cdef Block *tail = seg.last if seg.last != NULL and seg.last.state == B_FREE else NULL
        cdef size_t have = tail.size if tail != NULL else 0
        cdef size_t g = self._vm_granule
        cdef size_t need = _round_up(n - have, g)
        cdef size_t chunk = max(need, self._small_slab)
        failed = None
        if self._limited:
            if self.reserved + chunk > self._limit:
                chunk = need
            if self.reserved + chunk > self._limit:
                # The free end unmapped (as the slabs' path releases its cache): an unmap
                # that fails is a note on the limit's ENOMEM, never the error; its chunk
                # stays mapped and the pool's, for trim or close to unmap again.
                failed = _release_cache(<_Slabs>self)
                tail = seg.last if seg.last != NULL and seg.last.state == B_FREE else NULL
                have = tail.size if tail != NULL else 0
                chunk = _round_up(n - have, g)
            if self.reserved + chunk > self._limit:
                raise self._oom_error(f"the pool's limit of {_fs(self._limit)} is reached", n, None, failed)
        cdef u64 end = seg.ptr + seg.size
        if end + chunk > self._res_end:
            # A limit above the reservation is accepted: the reservation caps the pool.
            raise self._oom_error(
                f"the expandable pool's reservation of {_fs(self._res_end - seg.ptr)} is full "
                f"({_fs(seg.size)} mapped, {_fs(chunk)} more needed; make the pool with a larger "
                "capacity)",
                n,
            )
        cdef Block *fresh = NULL
        if tail == NULL:
            fresh = <Block *>calloc(1, sizeof(Block))
            if fresh == NULL:
                raise MemoryError()
        try:
            self._vm.commit(end, chunk)
        except AMLMemoryError as nomem:
            cfree(fresh)
            raise self._oom_error(_area_said(f"no memory to map {_fs(chunk)} more", nomem), n, nomem) from nomem
        except BaseException:
            cfree(fresh)
            raise
        seg.size += chunk
        self._chunks.push_back(Chunk(end, chunk))
        if self._trace:
            self.record(EV_SEGMENT_MAP, end, chunk, chunk, False, 0)
        self._count_reserved(chunk)
        if tail != NULL:
            self.heap_remove(tail)
            tail.size += chunk
        else:
            tail = fresh
            tail.addr = end
            tail.size = chunk
            _link_after(seg, seg.last, tail)
        self.heap_insert(tail)
        return tail

    cdef size_t _trim_segment(self, size_t keep) except? <size_t>-1:
        """Unmap chunks at the segment's end that lie wholly in its free tail."""
        cdef Slab *seg = self._segment
        cdef size_t released = 0
        cdef Block *tail
        cdef u64 ptr
        cdef size_t size
        owner_area = self._area
        while not self._chunks.empty() and <size_t>(self.reserved - self.blocks) > keep:
            tail = seg.last
            ptr = self._chunks.back().first
            size = self._chunks.back().second
            if tail == NULL or tail.state != B_FREE or tail.addr > ptr:
                break
            if self.release_hook is not None:
                self.release_hook(ptr, size)  # raises: the chunk stays mapped and the pool's
            if not owner_area.closed:
                self._vm.unmap(ptr, size)
            self._chunks.pop_back()
            if self._trace:
                self.record(EV_SEGMENT_UNMAP, ptr, size, size, False, 0)
            self.heap_remove(tail)
            tail.size -= size
            if tail.size:
                self.heap_insert(tail)
            else:
                _unlink(seg, tail)
                cfree(tail)
            seg.size -= size
            self.reserved -= size
            self.native_frees += 1
            released += size
        return released

    def segment_empty(self):
        return self._segment != NULL and self._chunks.empty()

    def chunks(self):
        """An expandable segment's mapped chunks, in address order: [(ptr, size), ...]
        (empty for a pool of slabs)."""
        cdef size_t i
        self.lock_gil()
        try:
            return [(self._chunks[i].first, self._chunks[i].second) for i in range(self._chunks.size())]
        finally:
            self.unlock()
