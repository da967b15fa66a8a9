# Streams: the hand-over through one event, the streams reclaimed, the pool's stream calls.
# Included by aml_core/_kernel.pyx (one extension module: see docs/kernel.md, "Layout").

cdef class _Streams(_Heaps):
    """The per-stream lists' hand-over and reclaim, through NativeStreams."""

    # -- streams: hand-over and reclaim (NativeStreams' C calls) ------------------------
    cdef Block *_hand_over(self, size_t n, u64 stream) except? NULL:
        """A block of exactly ``n`` bytes freed on another stream: ``stream`` waits for it
        through the pool's event (recorded on the other stream now; no host wait). A
        failed stream call raises its translated error, the block left where it was."""
        cdef Block *b = NULL
        cdef int rc = self._hand_over_nogil(n, stream, &b)
        if rc > 0:
            self._stream_failed(self._last_rc, rc - 1)
        return b

    cdef int _hand_over_nogil(self, size_t n, u64 stream, Block **out) noexcept nogil:
        """The hand-over's search and calls (the mutex held): 0 with the block in ``out``
        (or NULL: none of that size on another stream); else 1 + the failing call's S_*,
        its code in ``_last_rc``, nothing moved. One event serves every hand-over: the
        wait captures its state when it is queued."""
        cdef Block *b
        cdef u64 other
        cdef int op = 0
        cdef int rc
        out[0] = NULL
        it = self._sfast.begin()
        while it != self._sfast.end():
            if deref(it).first.second == n and not deref(it).second.empty():
                other = deref(it).first.first
                rc = self._streams.hand_over(&self._event, other, stream, &op)
                if rc != 0:
                    self._last_rc = rc
                    return 1 + op
                b = deref(it).second.back()
                deref(it).second.pop_back()
                self._held[other] -= 1
                b.state = B_USED
                self.blocks += b.size
                out[0] = b
                return 0
            inc(it)
        return 0

    cdef int _stream_failed(self, int code, int op) except -1:
        """A stream call of the kernel failed with ``code``: raise its translated error."""
        return self._streams.failed(code, op)

    cdef int _reclaim_streams(self) except -1:
        """Wait for every stream that holds freed blocks, then return the blocks to host
        order (onto the exact-size stacks, where they can be coalesced and reused)."""
        cdef bint any_held = False
        hit = self._held.begin()
        while hit != self._held.end():
            if deref(hit).second:
                any_held = True
                break
            inc(hit)
        if not any_held:
            return 0
        cdef NativeStreams st = self._streams
        cdef int rc
        cdef int op = 0
        hit = self._held.begin()
        while hit != self._held.end():
            if deref(hit).second:
                # The stream's work so far done (its event queried, no host wait), else
                # waited for (a runtime without a query synchronizes).
                rc = st.idle(&self._event, deref(hit).first, &op)
                if rc == -1:
                    st.synchronize(deref(hit).first)
                elif rc != 0:
                    st.failed(rc, op)
            inc(hit)
        cdef size_t i
        cdef Block *b
        it = self._sfast.begin()
        while it != self._sfast.end():
            for i in range(deref(it).second.size()):
                b = deref(it).second[i]
                b.has_stream = False
                b.state = B_HOST
                self._fast[b.size].push_back(b)
            inc(it)
        self._sfast.clear()
        self._held.clear()
        return 0

    def stream_cached(self):
        """The blocks held on streams' stacks: {(stream, size): [addresses, oldest
        first]} (tests, statistics)."""
        self.lock_gil()
        try:
            out = {}
            it = self._sfast.begin()
            while it != self._sfast.end():
                if not deref(it).second.empty():
                    out[(deref(it).first.first, deref(it).first.second)] = [
                        deref(it).second[i].addr for i in range(deref(it).second.size())
                    ]
                inc(it)
            return out
        finally:
            self.unlock()

    def destroy_event(self):
        """Destroy the stream hand-over event, if any; a failed destroy keeps it."""
        self.lock_gil()
        try:
            if self._event != NULL:
                self._streams.destroy(self._event)
                self._event = NULL
        finally:
            self.unlock()

    def set_streams(self, NativeStreams streams):
        """The runtime's stream calls (a NativeStreams; None: the pool orders no work on
        streams: a stream request is refused, a hook's free on a stream is in host
        order). Set once, before any block is handed out: a pool made over a
        StreamOrderedArea has them from the start, so a framework hook's first request
        on a stream finds them (issue 32, root cause 1)."""
        self.lock_gil()
        try:
            if self._streams is not None or self._live.count or self._slabs.size():
                raise ValueError("set_streams comes once, before the pool hands out memory")
            self._streams = streams
        finally:
            self.unlock()

    @property
    def streams(self):
        """The pool's NativeStreams, or None."""
        return self._streams

    @property
    def event(self):
        """The hand-over event's handle (an int), or None before the first hand-over."""
        return None if self._event == NULL else <u64><uintptr_t>self._event
