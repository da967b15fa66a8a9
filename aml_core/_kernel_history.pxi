# The history (record_history, log_to): the ring of events, the Python stacks, the snapshot's walk.
# Included by aml_core/_kernel.pyx (one extension module: see docs/kernel.md, "Layout").

cdef class _History(_KernelState):
    """The history's ring and the snapshot's walk of the segments."""

    # -- the history (record_history) ------------------------------------------------------
    cdef void record(self, int action, u64 addr, size_t size, size_t requested, bint has_stream,
                     u64 stream) noexcept nogil:
        """Append an event to the ring (the mutex held, ``_trace`` set: the ring is not
        empty), overwriting the oldest once it is full."""
        cdef timespec ts
        cdef Event *e = &self._ring[self._recorded % self._ring.size()]
        clock_gettime(CLOCK_REALTIME, &ts)
        e.action = action
        e.addr = addr
        e.size = size
        e.requested = requested
        e.has_stream = has_stream
        e.stream = stream
        e.time_ns = ts.tv_sec * 1000000000LL + ts.tv_nsec
        e.thread = PyThread_get_thread_ident()
        self._recorded += 1

    cdef int _attach_frames(self, u64 since) except -1:
        """The Python stack for the events recorded since event ``since`` (stacks on)."""
        if self._frames is None or self._recorded == since:
            return 0
        frames = _python_stack(self._max_frames)
        cdef u64 i
        for i in range(since, self._recorded):
            self._frames[i] = frames
        cdef u64 cap = self._ring.size()
        if <u64>len(self._frames) > 2 * cap:  # forget the stacks of events the ring dropped
            oldest = self._recorded - cap
            self._frames = {k: v for k, v in self._frames.items() if k >= oldest}
        return 0

    def set_history(self, size_t capacity, bint python=False, int max_frames=0):
        """Record events into a ring of ``capacity`` (0: stop and forget them); ``python``:
        every event goes through the slow path (the C hits decline), for a stack
        (``max_frames`` > 0: that many frames) or a log. A new capacity starts an empty
        history; the same one keeps it."""
        self.lock_gil()
        try:
            if capacity == 0:
                self._trace = 0
                self._ring.clear()
                self._ring.shrink_to_fit()
                self._first = self._recorded
                self._frames = None
                return
            if capacity != self._ring.size():
                self._ring.resize(capacity)
                self._first = self._recorded
                self._frames = None
            if max_frames <= 0:
                self._frames = None
            elif self._frames is None:
                self._frames = {}
            self._max_frames = max_frames
            self._trace = T_RECORD | (T_PYTHON if python else 0)
        finally:
            self.unlock()

    @property
    def recorded(self):
        """How many events were recorded since the kernel was made (the next event's
        number)."""
        return self._recorded

    def events(self, u64 since=0):
        """The recorded events numbered ``since`` or later still in the ring: (the first
        one's number, how many of those asked for the ring dropped, [(action, addr,
        size, requested, stream or None, time_ns, thread, frames or None), ...] oldest
        first)."""
        cdef Event *e
        cdef u64 i
        cdef u64 lo
        cdef u64 cap
        self.lock_gil()
        try:
            cap = self._ring.size()
            if cap == 0:
                return max(since, self._recorded), 0, []
            lo = max(self._first, since)
            dropped = 0
            if self._recorded > cap and self._recorded - cap > lo:
                dropped = self._recorded - cap - lo
                lo = self._recorded - cap
            frames = self._frames
            out = []
            for i in range(lo, self._recorded):
                e = &self._ring[i % cap]
                out.append((EVENTS[e.action], e.addr, e.size, e.requested,
                            e.stream if e.has_stream else None, e.time_ns, e.thread,
                            None if frames is None else frames.get(i)))
            return lo, dropped, out
        finally:
            self.unlock()

    def segments(self):
        """What the pool holds, walked under the mutex: [(ptr, size, heap, [(addr, size,
        requested, state, stream or None), ...]), ...], a slab's blocks in address order
        (they tile it), the slabs in the order they were made, the expandable segment's
        mapped part last. ``state`` is one of BLOCK_STATES; ``requested`` is 0 unless
        used."""
        self.lock_gil()
        try:
            out = [_slab_info(self._slabs[i]) for i in range(self._slabs.size())]
            if self._segment != NULL and self._segment.size:
                out.append(_slab_info(self._segment))
            return out
        finally:
            self.unlock()


cdef tuple _slab_info(Slab *s):
    cdef Block *b = s.first
    blocks = []
    while b != NULL:
        blocks.append((b.addr, b.size, b.requested if b.state == B_USED else 0, BLOCK_STATES[b.state],
                       b.stream if b.has_stream else None))
        b = b.next
    return (s.ptr, s.size, s.heap, blocks)


_AML_DIR = __file__.rpartition("/")[0] + "/"


def _python_stack(int limit):
    """The calling Python code's stack, innermost first, at most ``limit`` frames, aml's
    own frames left out: ((filename, line, function), ...)."""
    frames = []
    f = sys._getframe(0)
    while f is not None and len(frames) < limit:
        code = f.f_code
        if not code.co_filename.startswith(_AML_DIR):
            frames.append((code.co_filename, f.f_lineno, code.co_name))
        f = f.f_back
    return tuple(frames)
