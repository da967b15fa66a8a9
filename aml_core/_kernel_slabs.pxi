# Slabs: their sizes, growth (release, retry, on_oom), the initial reservation, release and trim.
# Included by aml_core/_kernel.pyx (one extension module: see docs/kernel.md, "Layout").

cdef class _Slabs(_Segment):
    """Slabs taken from the area and given back: growth, trim."""

    # -- slabs ------------------------------------------------------------------------------
    cdef size_t _slab_size(self, int h, size_t n) noexcept nogil:
        if h == 0 and n <= self._small_max:
            return self._small_slab if self._small_slab > n else n
        if n < 10 * MIB:
            return max(self._medium_slab, _round_up(n, 2 * MIB))
        return _round_up(n, 2 * MIB)

    cdef Block *_grow(self, int h, size_t n) except NULL:
        """A free block of at least ``n`` bytes in heap ``h``, from new memory
        (``_grow_once``); when that is ENOMEM (the cache released already), the pool's
        ``on_oom`` callback, then, if it says so, once more: a block it freed, else new
        memory. Not while the callback runs (an allocation it makes raises at once)."""
        cdef Block *b
        try:
            return self._grow_once(h, n)
        except AMLMemoryError as exc:
            if self.on_oom is None or self._in_oom:
                raise
            error = exc
        self._call_on_oom(n, error)
        # The callback may have freed blocks of this pool (on a stream too).
        if not self._sfast.empty():
            self._reclaim_streams()
        if not self._fast.empty():
            self.flush()
        b = self.best_fit(h, n)
        if b != NULL:
            return b
        return self._grow_once(h, n)

    def reserve(self, size_t size):
        """Take ``size`` bytes (rounded up to the granule) from the area now, as one slab
        (or mapped chunk) kept free in the cache (``PoolConfig.initial_size``); its
        errors are growth's (the limit, the area's ENOMEM)."""
        cdef size_t n = (size + self._mask) & ~self._mask
        self.lock_gil()
        try:
            self._grow_once(self.heap_of(n), n)
        finally:
            self.unlock()

    cdef Block *_grow_once(self, int h, size_t n) except NULL:
        """New memory from the area holding a free block of at least ``n`` bytes, indexed
        in heap ``h``. Past the limit or on ENOMEM: trim, retry, then ENOMEM."""
        if self._segment != NULL:
            return self._grow_segment(n)
        cdef size_t want = self._slab_size(h, n)
        cdef long long before
        failed = None
        if self._limited:
            if self.reserved + want > self._limit:
                failed = _release_cache(self)
            if self.reserved + want > self._limit:
                want = n  # a slab of just the request may still fit
            if self.reserved + want > self._limit:
                raise self._oom_error(f"the pool's limit of {_fs(self._limit)} is reached", n, None, failed)
        from . import checks
        if want > checks.MAX_SIZE:
            raise AMLMemoryError(f"{_fs(n)} rounded up to the pool's granule is more than can be mapped")
        area = self._area
        buf = None
        try:
            buf = area.mmap(want, self._options)
        except AMLMemoryError as nomem:
            before = self.reserved
            failed = _release_cache(self)  # ENOMEM stays the error; what could go went
            if self.reserved == before:
                raise self._oom_error(_no_slab(area, want, nomem), n, nomem, failed) from nomem
        if buf is None:  # the cache released: one retry
            try:
                buf = area.mmap(want, self._options)
            except AMLMemoryError as nomem:
                raise self._oom_error(_no_slab(area, want, nomem), n, nomem, failed) from nomem
        try:
            cinfo = _cinfo(buf)
            area._hold(buf)  # the pool's from now on: the area refuses to free it
        except BaseException as exc:
            area._give_back(buf, exc)
            raise
        cdef Slab *slab = <Slab *>calloc(1, sizeof(Slab))
        cdef Block *b = <Block *>calloc(1, sizeof(Block))
        if slab == NULL or b == NULL:
            cfree(slab)
            cfree(b)
            area._hold(buf, False)
            area.munmap(buf)
            raise MemoryError()
        _set_slab(slab, buf.ptr, want, h, cinfo)
        Py_INCREF(buf)
        slab.buf = <PyObject *>buf
        b.slab = slab
        b.addr = slab.ptr
        b.size = want
        slab.first = slab.last = b
        self._slabs.push_back(slab)
        if self._trace:
            self.record(EV_SEGMENT_ALLOC, slab.ptr, want, want, False, 0)
        self._count_reserved(want)
        self.heap_insert(b)
        return b

    cdef int _release_slab(self, Slab *slab) except -1:
        """Give a wholly free slab back to the area; on failure it stays. The release
        hook (an RDMA registration's deregistration) runs first: if it raises, the slab
        stays the pool's, cached, and nothing else changed."""
        cdef Block *b = slab.first
        buf = <object>slab.buf
        area = self._area
        if self.release_hook is not None:
            self.release_hook(slab.ptr, slab.size)
        area._hold(buf, False)  # the area's again: only the pool frees its slabs
        if not area.closed:  # a closed area detached it: it is freed with the Buffer
            try:
                area.munmap(buf)
            except BaseException:
                if area._is_live(buf):
                    area._hold(buf)  # still there: still the pool's
                raise
        self.heap_remove(b)
        cdef size_t i
        for i in range(self._slabs.size()):
            if self._slabs[i] == slab:
                self._slabs.erase(self._slabs.begin() + i)
                break
        self.reserved -= slab.size
        self.native_frees += 1
        if self._trace:
            self.record(EV_SEGMENT_FREE, slab.ptr, slab.size, slab.size, False, 0)
        self._free_slab_struct(slab)
        return 0

    def trim(self, size_t keep):
        """Release cached memory until at most ``keep`` bytes are cached (the caller holds
        the mutex or not: it is taken); returns the bytes released."""
        self.lock_gil()
        cdef u64 since = self._recorded
        try:
            released = self._trim(keep)
            if self._trace & T_PYTHON:
                self._attach_frames(since)
            return released
        finally:
            self.unlock()

    cdef size_t _trim(self, size_t keep) except? <size_t>-1:
        cdef size_t released = 0
        cdef size_t i
        cdef Slab *s
        cdef vector[Slab *] free_slabs
        error = None
        if not self._sfast.empty():
            try:
                self._reclaim_streams()
            except AMLError as exc:
                # Their blocks stay on their streams (their slabs are not wholly free):
                # the rest can still go. The first error is raised at the end.
                error = exc
        if not self._fast.empty():
            self.flush()
        if self._segment != NULL:
            try:
                released = self._trim_segment(keep)
            except AMLError as exc:
                error = error or exc
            if error is not None:
                raise error
            return released
        for i in range(self._slabs.size()):
            if self._whole_free(self._slabs[i]):
                free_slabs.push_back(self._slabs[i])
        # Largest slabs first: fewest native calls for the bytes (stable: oldest first).
        _sort_by_size_desc(free_slabs)
        cdef size_t size
        for i in range(free_slabs.size()):
            if <size_t>(self.reserved - self.blocks) <= keep:
                break
            s = free_slabs[i]
            size = s.size
            try:
                self._release_slab(s)
            except AMLError as exc:
                error = error or exc
                continue
            released += size
        if error is not None:
            raise error
        return released

    cdef bint _whole_free(self, Slab *slab) noexcept nogil:
        return slab.first != NULL and slab.first.state == B_FREE and slab.first.next == NULL


cdef object _release_cache(_Slabs kernel):
    """Release the cache before growing (past the limit, or on ENOMEM): None, or the
    error of a failed release (a synchronize, a slab's free), for a note on the growth's
    own error: whatever else could go went."""
    try:
        kernel._trim(0)
    except AMLError as exc:
        return exc
    return None


def _no_slab(area, size_t want, nomem):
    return _area_said(f"the {type(area).__name__} below the pool has no memory for a slab of {_fs(want)}", nomem)


cdef inline size_t _round_up(size_t n, size_t to) noexcept nogil:
    return (n + to - 1) // to * to


cdef tuple _cinfo(buf):
    """What a slab's blocks are made from: (ptr, device_ptr, flags, DLPack type, id,
    device)."""
    dl = buf.__dlpack_device__()
    flags = (F_HOST if buf.host_accessible else 0) | (F_READONLY if buf.readonly else 0)
    return (buf.ptr, buf.device_ptr, flags, dl[0], dl[1], buf.device)


cdef void _set_slab(Slab *slab, u64 ptr, size_t size, int heap, tuple cinfo):
    slab.ptr = ptr
    slab.dptr = cinfo[1]
    slab.size = size
    slab.heap = heap
    slab.flags = cinfo[2]
    slab.dl_type = cinfo[3]
    slab.dl_id = cinfo[4]
    Py_INCREF(cinfo)
    slab.cinfo = <PyObject *>cinfo


cdef void _sort_by_size_desc(vector[Slab *] &v) noexcept:
    # insertion sort, stable: a handful of slabs
    cdef size_t i, j
    cdef Slab *x
    for i in range(1, v.size()):
        x = v[i]
        j = i
        while j > 0 and v[j - 1].size < x.size:
            v[j] = v[j - 1]
            j -= 1
        v[j] = x
