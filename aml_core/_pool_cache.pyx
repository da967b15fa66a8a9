# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, binding=True, embedsignature.format=clinic
"""The pool's compiled cache: one implementation of an area's fast path (aml_core/_fastpath.pyx).

``PoolCache`` holds what aml_core.pool's Python code and the compiled fast path share:
the pool's exact-size free stacks, its counters and its lock. A pool installs it
(``AreaBase._set_pool``); then ``mmap(size)`` without options that finds a cached
block of the rounded size, and ``munmap`` of a block allocated in host order, run in C,
only while nobody holds the pool's lock and without releasing the GIL or running
Python code, so they are atomic with respect to each other and to the pool's locked
Python code. The rest of the pool's policy is Python (docs/kernel.md says which
invariants the two sides keep together).
"""

cimport cython
from cpython.object cimport PyObject
from cpython.weakref cimport PyWeakref_GetObject, PyWeakref_NewRef

from ._buffer cimport F_HOST, F_READONLY, AreaBase, BufferBase, forget_inside
from ._capi cimport PY_SSIZE_T_MAX, PyErr_Clear, PyErr_Occurred, _as_ssize
from ._fastpath cimport FastPath


@cython.auto_pickle(False)
cdef class PoolCache(FastPath):
    """PoolCache(area, granule, lock)
--

    The state of an aml_core.pool.Pool that its compiled fast path shares with the
    Python pool code, and the pool's one lock.

    ``fast`` maps a block size to the LIFO stack (a list) of the freed blocks of that
    size that were not coalesced yet; ``hits``, ``requested`` (bytes asked for by live
    buffers), ``peak_requested`` and ``blocks`` (bytes of live blocks) are C counters
    the pool's statistics read; ``keep_fast`` says whether a freed block may go on its
    stack (False with a release_threshold and once the pool is closing).

    Entering the cache (``with cache:``) takes the pool's re-entrant lock and counts the
    holder in ``busy`` (left: uncounted, then released); the pool that installed it
    counts its holders and waiters as inside it (AreaBase._inside), so that a GC-driven
    free of a pooled buffer waits for them (see _buffer.pyx). A pool installs its cache
    (``AreaBase._set_pool``); then ``mmap(size)`` without options pops a block of the
    rounded size from its stack, and ``munmap`` of a block allocated in host order pushes
    it, in C with no Python frame, only while ``busy`` is 0 and without releasing the
    GIL or running Python code: so a fast operation is atomic with respect to every
    other fast operation and to the Python code that holds the lock, as if it held the
    lock itself. Anything else (a miss, options, streams, a held lock, a closed area)
    takes the pool's Python ``_allocate``/``_free``."""

    def __init__(self, area, Py_ssize_t granule, lock):
        if not isinstance(area, AreaBase):
            raise TypeError("a PoolCache is over an aml area")
        if granule < 1 or granule & (granule - 1):
            raise ValueError("granule must be a power of two")
        self._area = area
        self._mask = granule - 1
        self.fast = {}
        self.keep_fast = True
        self.lock = lock
        self._acquire = lock.acquire
        self._release = lock.release

    def __enter__(self):
        cdef AreaBase owner = self._owner_area()
        if owner is not None:
            owner._enter()  # counted before waiting: see AreaLock
        try:
            self._acquire()
        except BaseException:
            if owner is not None:
                owner._leave()
            raise
        self.busy += 1
        return self

    def __exit__(self, *exc):
        self.busy -= 1
        self._release()
        cdef AreaBase owner = self._owner_area()
        if owner is not None:
            owner._leave()
        elif self._owner_key != NULL:
            forget_inside(self._owner_key)  # the pool is gone: forget it in this thread
        return False

    cdef AreaBase _owner_area(self):
        if self._owner is None:
            return None
        cdef PyObject *o = PyWeakref_GetObject(self._owner)
        if o == <PyObject *>None:
            return None
        return <AreaBase>o

    @property
    def granule(self):
        return self._mask + 1

    # -- the fast path (FastPath) ---------------------------------------------------------
    cdef int installed(self, AreaBase area) except -1:
        self._owner = PyWeakref_NewRef(area, None)  # its holders count as inside it
        self._owner_key = <void *>area
        return 0

    cdef BufferBase take(self, AreaBase area, object n_obj):
        """The compiled pool mmap (the size is checked); None when the Python path must
        run. Everything is read and checked, then the state changes, then the buffer is
        made (an allocation that may run a finalizer: the state is whole by then)."""
        if self.busy or self._area._closed or not self.fast:
            return None
        cdef Py_ssize_t n = _as_ssize(n_obj)
        if n <= 0 or n > PY_SSIZE_T_MAX - self._mask:
            if n == -1 and PyErr_Occurred() != NULL:
                PyErr_Clear()
            return None
        cdef Py_ssize_t r = (n + self._mask) & ~self._mask
        stack = self.fast.get(r)
        if not stack or type(stack) is not list:
            return None
        tp = area._buffer_type(None)
        blk = (<list>stack)[len(<list>stack) - 1]
        info = blk.slab.cinfo
        addr_obj = blk.addr
        cdef unsigned long long addr = addr_obj
        cdef unsigned long long sptr = info[0]
        cdef unsigned long long sdptr = info[1]
        cdef int flags = info[2]
        cdef int dl_type = info[3]
        cdef int dl_id = info[4]
        device = info[5]
        cdef unsigned long long dptr = sdptr + (addr - sptr)
        dptr_obj = None if dptr == addr else dptr
        # Read and checked: change the state (no Python code, no tracked allocation).
        (<list>stack).pop()
        self.hits += 1
        self.blocks += r
        self.requested += n
        if self.requested > self.peak_requested:
            self.peak_requested = self.requested
        self.fast_mmaps += 1
        try:
            return area._make(
                tp, addr_obj, addr, n, (flags & (F_HOST | F_READONLY)), dl_type, dl_id, device, dptr_obj, blk
            )
        except BaseException:
            self.fast_mmaps -= 1
            self.requested -= n
            self.blocks -= r
            self.hits -= 1
            fresh = []  # may run a finalizer that replaces self.fast (a flush): read it after
            (<list>self.fast.setdefault(r, fresh)).append(blk)
            raise

    cdef bint give(self, AreaBase area, BufferBase buf) except -1:
        """The compiled pool munmap of a detached buffer: True if its block went on its
        stack, False when _free must run."""
        if self.busy or not self.keep_fast:
            return False
        blk = buf.native
        if blk is None or blk.stream is not None:
            return False
        size_obj = blk.size
        if type(size_obj) is not int:
            return False
        cdef Py_ssize_t size = size_obj
        stack = self.fast.get(size_obj)
        if stack is None:
            # A new list may run a finalizer (a GC-tracked allocation) that frees into
            # the cache or flushes it (a new self.fast): make the list first, then read
            # self.fast and add the list only if no stack appeared meanwhile.
            fresh = []
            stack = self.fast.setdefault(size_obj, fresh)
        if type(stack) is not list:
            return False
        # No Python code or tracked allocation from here on (append may resize only).
        (<list>stack).append(blk)
        self.requested -= buf.size
        self.blocks -= size
        self.fast_munmaps += 1
        return True

    cdef bint can_give(self, AreaBase area, BufferBase buf) noexcept:
        if self.busy == 0 and self.keep_fast:
            blk = buf.native
            try:
                if blk is not None and blk.stream is None and type(blk.size) is int:
                    return True
            except BaseException:
                PyErr_Clear()
        return False
