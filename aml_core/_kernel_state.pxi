# The allocator kernel's state: its lifetime and the mutex.
# Included by aml_core/_kernel.pyx (one extension module: see docs/kernel.md, "Layout").

cdef class _KernelState(FastPath):
    """A kernel's state (every field: _kernel.pxd), its lifetime and its mutex."""

    def __cinit__(self):
        pthread_mutex_init(&self._mu, NULL)

    def __dealloc__(self):
        cdef Slab *s
        cdef Block *b
        cdef Block *nxt
        cdef size_t i
        # A pool dropped without close(): its hand-over event is destroyed here (close()
        # destroys it otherwise); at interpreter exit the process's end does it. A failure
        # is ignored: nothing is left to retry it (the runtime keeps the event).
        if self._event != NULL and self._streams is not None and not aml_is_finalizing():
            if self._streams.needs_gil:
                try:
                    self._streams.c_event_destroy(self._event)
                except BaseException:
                    pass
            else:
                self._streams.c_event_destroy(self._event)
            self._event = NULL
        for i in range(self._slabs.size()):
            self._free_slab_struct(self._slabs[i])
        self._slabs.clear()
        if self._segment != NULL:
            self._free_slab_struct(self._segment)
            self._segment = NULL
        cfree(self._live.slots)
        self._live.slots = NULL
        pthread_mutex_destroy(&self._mu)

    cdef void _free_slab_struct(self, Slab *s) noexcept:
        cdef Block *b = s.first
        cdef Block *nxt
        while b != NULL:
            nxt = b.next
            cfree(b)
            b = nxt
        Py_XDECREF(s.buf)
        Py_XDECREF(s.cinfo)
        cfree(s)

    # -- the mutex -----------------------------------------------------------------------
    cdef int lock_gil(self) except -1:
        """Take the mutex, the GIL held: re-entrant for its holder. A thread holding the GIL
        takes the mutex only while it holds the GIL; so while one thread keeps the GIL,
        only a hook's hit (C, a few hundred nanoseconds, never waiting for anything) can
        hold the mutex: that one is waited for by spinning with the GIL; a holder that
        runs Python (the slow path) is waited for with the GIL released."""
        cdef unsigned long me = PyThread_get_thread_ident()
        if self._holder == me:
            self._depth += 1
            return 0
        while pthread_mutex_trylock(&self._mu) != 0:
            if self._gil_holder:
                with nogil:
                    pthread_mutex_lock(&self._mu)
                    pthread_mutex_unlock(&self._mu)
            else:
                sched_yield()
        self._holder = me
        self._depth = 1
        self._gil_holder = True
        return 0

    cdef int lock_nogil(self) noexcept nogil:
        """Take the mutex for a hook's hit; 1 if this thread holds it already (nothing
        taken: the caller must not go on), else 0. A framework may call its hook with
        the GIL held (PyTorch frees the tensor Python dropped, allocates for a Python
        thread's op): that thread never blocks on the mutex with the GIL, as in
        lock_gil, because a Python-side holder may be waiting for the GIL (a slab's
        allocation runs Python): a deadlock found by tests/test_torch_oom_harness.py."""
        cdef unsigned long me = PyThread_get_thread_ident()
        cdef PyThreadState *saved
        if self._holder == me:
            return 1
        if PyGILState_Check():
            while pthread_mutex_trylock(&self._mu) != 0:
                if self._gil_holder:
                    saved = PyEval_SaveThread()
                    pthread_mutex_lock(&self._mu)
                    pthread_mutex_unlock(&self._mu)
                    PyEval_RestoreThread(saved)
                else:
                    sched_yield()
        else:
            pthread_mutex_lock(&self._mu)
        self._holder = me
        self._depth = 1
        self._gil_holder = False
        return 0

    cdef void unlock(self) noexcept nogil:
        self._depth -= 1
        if self._depth == 0:
            self._holder = 0
            self._gil_holder = False
            pthread_mutex_unlock(&self._mu)

    cdef bint held_here(self) noexcept nogil:
        return self._holder == PyThread_get_thread_ident()

    cdef bint gil_only(self) noexcept:
        """Whether a hit, the GIL held, may skip the mutex: no hook calls this kernel
        without the GIL, and nobody holds the mutex (a Python-side holder that released the
        GIL mid-section, or this thread). Then only threads holding the GIL use the state,
        and a hit (C code that neither releases the GIL nor runs Python) is atomic under
        it. Called with the GIL: ``_holder`` is set and cleared with the GIL by its users."""
        return not self._nogil_users and self._holder == 0

    def __enter__(self):
        """Take the mutex for a section of Python code (the pool's slow path); the pool
        that installed the kernel counts the holder as inside it (a finalizer's free of
        a pooled buffer then waits for it: see _buffer.pyx)."""
        cdef AreaBase owner = self._owner_area()
        if owner is not None:
            owner._enter()
        try:
            self.lock_gil()
        except BaseException:
            if owner is not None:
                owner._leave()
            raise
        return self

    def __exit__(self, *exc):
        self.unlock()
        cdef AreaBase owner = self._owner_area()
        if owner is not None:
            owner._leave()
        elif self._owner_key != NULL:
            forget_inside(self._owner_key)
        if self.sink is not None and not self.held_here():
            self.sink()  # the outermost exit: a log drains the history (it never raises)
        return False

    @property
    def held(self):
        """Whether this thread holds the kernel's mutex."""
        return self.held_here()

    cdef AreaBase _owner_area(self):
        if self._owner is None:
            return None
        cdef PyObject *o = PyWeakref_GetObject(self._owner)
        if o == <PyObject *>None:
            return None
        return <AreaBase>o
