# The framework hooks' entry (aml_core/_hooks.pyx calls these): hits without the GIL, misses in C with it.
# Included by aml_core/_kernel.pyx (one extension module: see docs/kernel.md, "Layout").

cdef class _Hooks(_Stats):
    """The hooks' entry points into the kernel."""

    # -- the hooks (aml_core/_hooks.pyx): no GIL, no Python object -------------------------
    cdef int hook_alloc(self, size_t size, bint has_stream, u64 stream, u64 *out) noexcept nogil:
        """A hit for a framework: 0 and the address in ``out``; 1 when the slow path must
        run (with the GIL: ``alloc``)."""
        if size == 0 or size > <size_t>PY_SSIZE_T_MAX - self._mask or not self.keep_fast:
            return 1
        if self._trace & T_PYTHON:  # a stack or a log: the slow path (Python) records it
            return 1
        if has_stream and self._streams is None:  # the slow path says why (AMLNotSupported)
            return 1
        if self.lock_nogil():
            return 1
        cdef size_t r = (size + self._mask) & ~self._mask
        cdef Block *b = NULL
        if not self._shut:
            b = self.take_cached(r, has_stream, stream)
            if b == NULL and has_stream and not self._streams.needs_gil:
                # another stream's block through the event, in C (no GIL); a failed call
                # leaves the block where it was and the slow path retries and raises
                self._hand_over_nogil(r, stream, &b)
            if b != NULL:
                self.hand_out(b, size, has_stream, stream)
                self.hook_mmaps += 1
        self.unlock()
        if b == NULL:
            return 1
        out[0] = b.addr
        return 0

    cdef int hook_free(self, u64 addr, bint has_stream, u64 stream) noexcept nogil:
        """A framework's free (``give_live``'s statuses): 0 done; otherwise the slow path
        (``free``) must run, which also refuses an address the kernel did not hand out."""
        if has_stream and self._streams is None:
            return 1  # the slow path frees it in host order
        if self.lock_nogil():
            return 1
        cdef int status = self.give_live(addr, has_stream, stream)
        if status == 0:
            self.hook_munmaps += 1
        self.unlock()
        return status

    # -- the hooks' misses: the slow path in C, with the GIL (aml_core/_hooks.pyx) ----------
    cdef int hook_slow_alloc(self, size_t size, bint has_stream, u64 stream, u64 *out, list errors) noexcept:
        """A hook's miss (the GIL held): 0 and the address in ``out``; -1 when the slow
        path failed (its exception appended to ``errors``); 1 when Python must run it (a
        closed pool or area, a log or stacks, a stream the pool has no operations for:
        the pool's own checks and messages)."""
        cdef AreaBase owner = self._owner_area()
        cdef Block *b
        if (owner is None or owner._closed or self._shut or self._area._closed or self.held_here()
                or self._trace & T_PYTHON or size == 0 or size > <size_t>PY_SSIZE_T_MAX - self._mask
                or (has_stream and self._streams is None)):
            return 1
        owner._enter()  # as ``with kernel``: a finalizer's free of a pooled buffer waits
        try:
            b = self._alloc(<Py_ssize_t>size, has_stream, stream)
            out[0] = b.addr
            return 0
        except BaseException as exc:
            try:
                errors.append(exc)
            except BaseException:
                pass
            return -1
        finally:
            owner._leave()

    cdef int hook_slow_free(self, u64 addr, bint has_stream, u64 stream, list errors) noexcept:
        """A hook's free the C hit declined (the GIL held): 0 freed; -1 failed (its
        exception appended to ``errors``); 1 when Python must run it (as hook_slow_alloc)."""
        cdef AreaBase owner = self._owner_area()
        if owner is None or owner._closed or self._trace & T_PYTHON or self.held_here():
            return 1
        owner._enter()
        try:
            self.free(addr, stream if has_stream else None)
            return 0
        except BaseException as exc:
            try:
                errors.append(exc)
            except BaseException:
                pass
            return -1
        finally:
            owner._leave()
