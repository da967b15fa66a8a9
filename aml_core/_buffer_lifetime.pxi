# Part of aml_core/_buffer.pyx (included by it: one extension module); docs/kernel.md
# says which file holds which policy.
# Lifetime: who is inside an area (the thread-local inside-table, AreaLock), a dropped
# buffer's free (the finalizer's _dropped, _reclaim, the deferral in _pending and its
# drain) and the one free of a detached buffer (_free_detached).

# Which areas this thread is inside (AreaBase._enter/_leave), and how deep: a small
# array in thread-local storage (no allocation; freed with the thread). An area is a key
# only, never dereferenced. Past AML_INSIDE_MAX distinct areas the thread counts as
# inside every area (conservative: its drains wait).
cdef extern from *:
    """
    #define AML_INSIDE_MAX 16
    typedef struct { void *area[AML_INSIDE_MAX]; int depth[AML_INSIDE_MAX]; int n; int overflow; } aml_inside_t;
    static __thread aml_inside_t aml_inside;
    static void aml_inside_enter(void *a) {
        aml_inside_t *t = &aml_inside;
        for (int i = 0; i < t->n; i++)
            if (t->area[i] == a) { t->depth[i]++; return; }
        if (t->n < AML_INSIDE_MAX) { t->area[t->n] = a; t->depth[t->n] = 1; t->n++; }
        else t->overflow++;
    }
    /* One level less of ``a`` if the thread is inside it: 1, else 0. */
    static int aml_inside_forget_one(void *a) {
        aml_inside_t *t = &aml_inside;
        for (int i = 0; i < t->n; i++)
            if (t->area[i] == a) {
                if (--t->depth[i] == 0) { t->n--; t->area[i] = t->area[t->n]; t->depth[i] = t->depth[t->n]; }
                return 1;
            }
        return 0;
    }
    static void aml_inside_leave(void *a) {
        if (!aml_inside_forget_one(a) && aml_inside.overflow > 0) aml_inside.overflow--;
    }
    static void aml_inside_forget(void *a) { (void)aml_inside_forget_one(a); }
    static int aml_inside_here(void *a) {
        aml_inside_t *t = &aml_inside;
        if (t->overflow) return 1;
        for (int i = 0; i < t->n; i++)
            if (t->area[i] == a) return 1;
        return 0;
    }
    """
    void aml_inside_enter(void *a) noexcept nogil
    void aml_inside_leave(void *a) noexcept nogil
    void aml_inside_forget(void *a) noexcept nogil
    int aml_inside_here(void *a) noexcept nogil


cdef void forget_inside(void *key) noexcept nogil:
    aml_inside_forget(key)

# How a dropped buffer is freed (AreaBase._reclaim).
cdef enum:
    M_FINALIZER = 0  # from its finalizer: never under anyone inside the area, never waiting
    M_DRAIN = 1  # from a drain: this thread is outside the area (others may be inside)
    M_NOW = 2  # the caller says this is a safe point (_settle)

cdef str KEPT_NOTE = (
    "the buffer was unreachable; its memory stays tracked (and held) by its area: "
    "munmap(ptr) or close() retries the free"
)
cdef str ORPHAN_NOTE = (
    "the buffer was detached while viewed and is now unreachable; its memory stays tracked "
    "(and held) by its area: close() retries the free"
)



# ---- sections of an area ------------------------------------------------------------------
@cython.final
@cython.auto_pickle(False)
cdef class AreaLock:
    """AreaLock(area, lock=None)
--

    A re-entrant lock of an area's own state, or (``lock`` None) a section without a
    lock, whose holders and waiters count as *inside* the area: a buffer of the area that
    becomes unreachable meanwhile (its finalizer may run at any allocation, in this thread
    too) is not freed by Python code under them, but by the next thread that leaves the
    area and is outside it (see the module doc).

    ``AreaLock(area, threading.RLock())`` is what ``Area._lock`` is; a subclass whose
    ``_free`` uses state of its own guards that state with an AreaLock of the area (never
    a bare ``threading.Lock``: a finalizer would wait on it, or enter half-done state).
    It holds the area weakly (no reference cycle)."""

    def __init__(self, area, lock=None):
        if not isinstance(area, AreaBase):
            raise TypeError(f"an AreaLock is over an aml area, not {type(area).__name__}")
        self._ref = PyWeakref_NewRef(area, None)
        self._key = <void *>area
        self.lock = lock
        if lock is not None:
            self._acquire = lock.acquire
            self._release = lock.release

    cdef AreaBase _area(self):
        cdef PyObject *o = PyWeakref_GetObject(self._ref)
        if o == <PyObject *>None:
            return None
        return <AreaBase>o

    def __enter__(self):
        cdef AreaBase area = self._area()
        if area is not None:
            # Counted before waiting for the lock: a finalizer that sees nobody inside
            # can take it without waiting.
            area._enter()
        if self._acquire is not None:
            try:
                self._acquire()
            except BaseException:
                if area is not None:
                    area._leave()
                raise
        return self

    def __exit__(self, *exc):
        if self._release is not None:
            self._release()
        cdef AreaBase area = self._area()
        if area is not None:
            area._leave()  # frees what waited, unless this thread is still inside
        else:
            forget_inside(self._key)  # the area is gone: forget it in this thread
        return False


@cython.no_gc_clear  # finalizers that run after a collection may still use the table
@cython.auto_pickle(False)
cdef class _Lifetime(_LiveTable):
    """_Lifetime(*args, **kwargs)
--

    A buffer's end (AreaBase's second base): the finalizer's free of a dropped buffer,
    deferred while anyone is inside the area (_enter/_leave, _pending, _drain_pending),
    and the one free of a detached buffer (_free_detached)."""

    def _set_orphan(self, BufferBase buf not None):
        """Mark a buffer this area detached while it was viewed (close(), a with block):
        its finalizer (once its views and the object are gone) frees it through
        ``_free_orphan``."""
        if buf._area is not self or buf.flags & (F_TRACKED | F_RELEASED):
            raise AMLValueError(f"{buf!r} is not a detached buffer of this area")
        buf.flags |= F_ORPHAN

    def _free_orphan(self, buf):
        """Free a detached buffer once it is unreachable (Area overrides this)."""
        self._free(buf)

    def _set_below(self, AreaBase area):
        """Name the area this one takes its memory from (a pool's): a GC-driven free of
        this area's buffers also waits while someone is inside that one."""
        self._below = area

    # -- garbage collection: dropped buffers ---------------------------------------------
    cdef inline void _enter(self) noexcept:
        """Enter the area (mmap's _allocate, a _free, close(), an AreaLock section): a
        GC-driven free that would run Python code waits until this thread leaves."""
        self._inside += 1
        aml_inside_enter(<void *>self)

    cdef inline void _leave(self) noexcept:
        """Leave the area; once this thread is out of it (and of the areas below), it
        frees what waited."""
        self._inside -= 1
        aml_inside_leave(<void *>self)
        if (self._pending or self._waiting) and not self._here(self):
            self._drain_pending()

    cdef bint _here(self, _LiveTable area) noexcept:
        """Whether this thread is inside ``area`` or an area below it."""
        while area is not None:
            if aml_inside_here(<void *>area):
                return True
            area = area._below
        return False

    cdef _LiveTable _blocker(self):
        """The area (this one or one below) someone, in any thread, is inside now, or None."""
        cdef _LiveTable a = self
        while a is not None:
            if a._inside > 0:
                return a
            a = a._below
        return None

    cdef void _defer(self, BufferBase buf, _LiveTable blocker) noexcept:
        """Hold a dropped buffer until its free can run (_pending), and ask ``blocker``
        (an area below, if it is the one busy) to drain this one when it is free."""
        if not (buf.flags & F_PENDING):
            try:
                self._pending.append(buf)
            except BaseException:
                Py_INCREF(buf)  # no memory: leak the object rather than leave a stale entry
            buf.flags |= F_PENDING
        if blocker is not None and blocker is not self:
            try:
                if blocker._waiting is None:
                    blocker._waiting = []
                blocker._waiting.append(PyWeakref_NewRef(self, None))
            except BaseException:
                pass  # the next operation of this area drains it

    cdef void _dropped(self, BufferBase buf) noexcept:
        """The finalizer of a tracked or detached buffer: free it (see _reclaim). Never
        raises: failures are reported through sys.unraisablehook."""
        try:
            if aml_is_finalizing():
                # Interpreter exit: untrack it (the table must not outlive the object);
                # the process's exit returns the memory.
                if self._tracks(buf):
                    self._untrack(buf)
                    self._bytes -= buf.size
                    self._unmaps += 1
                return
            if buf.flags & F_TRACKED:
                self._reclaim(buf, M_FINALIZER)
            elif buf.flags & F_ORPHAN:
                self._reclaim_orphan(buf, M_FINALIZER)
        except BaseException as exc:
            self._report(exc, buf, None)

    cdef int _reclaim(self, BufferBase buf, int mode) except -1:
        """Free a tracked buffer that nothing references any more, as munmap would (the
        compiled pool or native path, else _free, counted inside the area), or hold it in
        _pending while that cannot run now: while a view holds it (a reference cycle
        collected with its view); from a finalizer (M_FINALIZER), while anyone is inside
        the area or an area below, unless munmap would free it in C (which never
        re-enters or waits); from a drain (M_DRAIN), while this thread is. A failed free
        keeps it tracked and held (_restore) and is reported."""
        if not self._tracks(buf):
            return 0  # munmap or close() freed it meanwhile
        cdef _LiveTable blocker = None
        if buf.exports > 0:
            self._defer(buf, None)
            return 0
        if mode != M_NOW and not self._fast_free_ok(buf):
            if mode == M_FINALIZER:
                blocker = self._blocker()
                if blocker is not None:
                    self._defer(buf, blocker)
                    return 0
            elif self._here(self):
                self._defer(buf, None)
                return 0
        if self._closed:
            return 0  # only a failed free stays tracked in a closed area: close() retries it
        buf.flags |= F_RELEASED
        self._untrack(buf)
        self._bytes -= buf.size
        self._unmaps += 1
        try:
            self._free_detached(buf, True)
        except BaseException as exc:
            self._report(exc, buf, KEPT_NOTE)
        return 0

    cdef bint _fast_free_ok(self, BufferBase buf) noexcept:
        """Whether munmap would free ``buf`` in C (the installed fast path): atomic under
        the GIL, it never runs Python code, waits, or touches an area below."""
        return self._fast is not None and self._fast.can_give(<AreaBase>self, buf)

    cdef int _reclaim_orphan(self, BufferBase buf, int mode) except -1:
        """Free a buffer detached while viewed once it is unreachable (_free_orphan,
        counted inside the area), or hold it as _reclaim does."""
        if not (buf.flags & F_ORPHAN) or buf.flags & (F_TRACKED | F_RELEASED):
            return 0
        cdef _LiveTable blocker = None
        if buf.exports > 0:
            self._defer(buf, None)
            return 0
        if mode == M_FINALIZER:
            blocker = self._blocker()
            if blocker is not None:
                self._defer(buf, blocker)
                return 0
        elif mode == M_DRAIN and self._here(self):
            self._defer(buf, None)
            return 0
        buf.flags = (buf.flags & ~F_ORPHAN) | F_RELEASED
        self._enter()
        try:
            self._free_orphan(buf)
        except BaseException as exc:
            try:
                self._restore(buf)  # tracked again (the closed area reports it live)
            except BaseException as also:
                exc.add_note(f"tracking it again failed too: {also}")
            self._report(exc, buf, ORPHAN_NOTE)
        finally:
            self._leave()
        return 0

    cdef void _drain_pending(self) noexcept:
        """Free the dropped buffers that waited (see _reclaim), in this thread, which is
        outside the area and the areas below (others may be inside: the frees run as any
        munmap would), then let the areas above that waited for this one drain theirs."""
        cdef BufferBase buf
        cdef bint again = True
        cdef bint progress
        cdef list items
        if self._draining:
            return  # the drain running (in this thread or another) takes what came
        while again:
            again = False
            self._draining = True
            try:
                while self._pending and not self._here(self):
                    fresh = []  # made before the swap: a finalizer it runs sees a whole list
                    items = self._pending
                    self._pending = fresh
                    progress = False
                    for buf in items:
                        buf.flags &= ~F_PENDING
                        if buf.exports > 0:
                            self._defer(buf, None)  # still viewed: its last view brings it back
                            continue
                        progress = True
                        if buf.flags & F_TRACKED:
                            self._reclaim(buf, M_DRAIN)
                        elif buf.flags & F_ORPHAN:
                            self._reclaim_orphan(buf, M_DRAIN)
                    items = None  # the freed buffers go now (their finalizers ran already)
                    if not progress:
                        break  # only viewed buffers are left
                    again = True
            except BaseException as exc:
                self._report(exc, self, None)
            finally:
                self._draining = False
            # Code run meanwhile (a weakref callback, a collection) may have deferred more
            # while the drain ran and refused to start another: take it too.
            again = again and bool(self._pending) and not self._here(self)
        if self._waiting is not None and not self._here(self):
            waiting = self._waiting
            self._waiting = None
            for ref in waiting:
                above = <object>PyWeakref_GetObject(ref)
                if above is not None:
                    (<AreaBase>above)._drain_pending()

    cdef void _views_gone(self) noexcept:
        """The last view of a pending buffer went: free it, unless this thread is inside."""
        if self._pending and not self._here(self):
            self._drain_pending()

    def _settle(self, BufferBase buf not None):
        """If ``buf`` is unreachable garbage waiting for a deferred free (its identity came
        back through its address), free it now: a caller that is inside the area at a safe
        point (not in the middle of changing its own state) calls this rather than handing
        the buffer out again. Return whether it was waiting."""
        if not (buf.flags & F_PENDING) or buf._area is not self:
            return False
        try:
            self._pending.remove(buf)  # identity: buffers do not define __eq__
        except ValueError:
            pass
        buf.flags &= ~F_PENDING
        if buf.flags & F_TRACKED:
            self._reclaim(buf, M_NOW)
        elif buf.flags & F_ORPHAN:
            self._reclaim_orphan(buf, M_NOW)
        return True

    cdef void _report(self, object exc, object obj, str note) noexcept:
        """Report a failure of a GC-driven free, as Python reports an exception in
        __del__ (sys.unraisablehook)."""
        try:
            if note is not None:
                exc.add_note(note)
            _set_error(type(exc), exc)
            _write_unraisable(obj)
        except BaseException:
            pass
        PyErr_Clear()

    cdef int _free_detached(self, BufferBase buf, bint fast) except -1:
        """Free a buffer _detach (or a finalizer) untracked, on the stream it was
        allocated on if any: the fast path (if ``fast``), else _free (counted inside the
        area; it reads the buffer's stream). If the free fails the buffer is tracked
        again (_restore) and the error raised."""
        if fast and self._fast is not None and self._fast.give(<AreaBase>self, buf, buf._has_stream, buf._stream):
            return 0
        self._enter()
        try:
            self._free(buf)
        except BaseException:
            self._restore(buf)  # the memory is still there: keep tracking it
            raise
        finally:
            self._leave()
        return 0
