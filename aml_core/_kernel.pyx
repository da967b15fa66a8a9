# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, binding=True, embedsignature.format=clinic
# distutils: language = c++
"""The allocator kernel: a pool's whole policy, in one place (docs/kernel.md).

``PoolKernel`` holds a pool's blocks and slabs in C structures and decides everything
a pool decides: size classes (a small and a large heap), best fit and splitting,
coalescing with free neighbours, the exact-size stacks that defer coalescing, the
per-stream free lists and the event hand-over between streams, slabs taken from and
returned to the area below, the limit (changed at run time: ``set_limit``), trimming
and the release threshold, ENOMEM → release → one retry → the ``on_oom`` callback → one
more retry, the ENOMEM message, the expandable segment's growth and trim, and every counter of
the statistics. ``aml_core.pool.Pool`` is the Python area over it: it checks and
converts its arguments, makes a Buffer from a block when Python asks for one, and
formats the statistics.

One mutex per kernel guards the state; every entry takes it. A thread that holds the
GIL and finds the mutex taken waits with the GIL released, so a thread without the GIL
(a framework hook) never waits for the GIL while holding the mutex in a hit; a miss
leaves the mutex first, then takes the GIL and the mutex again (the "slow path"). The
slow path calls the area below (a slab, its release) and the expandable segment's
virtual memory through Python objects, and the runtime's stream and event calls through
C function pointers (``NativeStreams``), with the GIL and the mutex held; the mutex is re-entrant for its holder thread, whose finalizers defer
their frees (``can_give`` says no) rather than re-enter a half-done operation.

The hot path, a hit, runs in C with no Python object made: the block is taken from an
exact-size stack (host order or the request's stream), else by best fit in its heap
after coalescing the stacks. A Buffer is made around it only by ``take`` (the area's
``mmap``); the framework hooks (``aml_core._hooks``) call ``hook_alloc``/``hook_free``
with no GIL and make none.
"""

cimport cython
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.weakref cimport PyWeakref_GetObject, PyWeakref_NewRef
from cython.operator cimport dereference as deref
from cython.operator cimport preincrement as inc
from libc.stdint cimport uintptr_t
from libc.stdlib cimport calloc
from libc.stdlib cimport free as cfree
from libcpp.map cimport map as cmap
from libcpp.vector cimport vector
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from ._allocator cimport NativeStreams
from ._buffer cimport F_HOST, F_READONLY, AreaBase, BufferBase, forget_inside
from ._capi cimport PY_SSIZE_T_MAX, PyErr_Clear, PyErr_Occurred, _as_ssize, _as_ull, aml_is_finalizing
from ._fastpath cimport FastPath

import sys
import warnings

from .errors import AMLError, AMLMemoryError, AMLNotSupported, AMLValueError


cdef extern from "<pthread.h>" nogil:
    int pthread_mutex_init(pthread_mutex_t *, void *)
    int pthread_mutex_destroy(pthread_mutex_t *)
    int pthread_mutex_lock(pthread_mutex_t *)
    int pthread_mutex_trylock(pthread_mutex_t *)
    int pthread_mutex_unlock(pthread_mutex_t *)
    unsigned long PyThread_get_thread_ident "pthread_self"()


cdef extern from "<sched.h>" nogil:
    int sched_yield()


cdef enum:
    MIB = 1048576

# A block's state: where it is.
cdef enum:
    B_FREE = 0  # in its heap's index (coalesced)
    B_USED = 1  # held by a buffer or a hook (in _live)
    B_HOST = 2  # on a host-order exact-size stack, not coalesced
    B_STREAM = 3  # on a stream's exact-size stack

#: What ``segments()`` calls each block state (B_*), in their order.
BLOCK_STATES = ("free", "used", "cached", "stream")

# An event of the history (record_history): EVENTS names them, in their order.
cdef enum:
    EV_ALLOC = 0  # a block handed out
    EV_FREE = 1  # a live block freed
    EV_SEGMENT_ALLOC = 2  # a slab taken from the area
    EV_SEGMENT_FREE = 3  # a slab given back
    EV_SEGMENT_MAP = 4  # a chunk mapped at the end of the expandable segment
    EV_SEGMENT_UNMAP = 5  # a chunk unmapped from its end

#: The names of the history's events (PyTorch's trace actions, a free being one event).
EVENTS = ("alloc", "free", "segment_alloc", "segment_free", "segment_map", "segment_unmap")

# _trace: what the history does (0: nothing, one test on the hot path).
cdef enum:
    T_RECORD = 1  # append every event to the ring
    T_PYTHON = 2  # Python wants each event (stacks, a log): the C hits decline


@cython.final
cdef class PoolKernel(FastPath):
    """PoolKernel(area, config, *, limit=None, options=None)
--

    A pool's policy and state over ``area`` (see the module doc), configured by
    ``config`` (an ``aml_core.pool.PoolConfig``, checked when it was made: its fields are
    read by name here), ``limit`` (bytes, resolved by the pool) and ``options`` (the
    area's mmap options for every slab); made by ``aml_core.pool.Pool``."""

    def __cinit__(self):
        pthread_mutex_init(&self._mu, NULL)

    def __init__(self, area, config, *, limit=None, options=None):
        from .pool._config import PoolConfig

        if not isinstance(area, AreaBase):
            raise TypeError("a PoolKernel is over an aml area")
        if not isinstance(config, PoolConfig):
            raise TypeError(f"a PoolKernel takes a PoolConfig (checked once), not {type(config).__name__}")
        granule, small_max, small_slab, medium_slab = config.layout()
        release_threshold = config.release_threshold
        max_split = config.max_split_size
        self._area = area
        self._mask = granule - 1
        self._small_max = small_max
        self._small_slab = small_slab
        self._medium_slab = medium_slab
        self._has_max_split = max_split is not None
        self._max_split = max_split if max_split is not None else 0
        self._limited = limit is not None
        self._limit = limit if limit is not None else 0
        self._has_threshold = release_threshold is not None
        self._threshold = release_threshold if release_threshold is not None else 0
        self._options = options
        self.keep_fast = release_threshold is None
        self.on_oom = None
        self.free_memory = None
        self.release_hook = None

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
        """Take the mutex without the GIL (a hook); 1 if this thread holds it already
        (nothing taken: the caller must not go on), else 0."""
        cdef unsigned long me = PyThread_get_thread_ident()
        if self._holder == me:
            return 1
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
        self._live[b.addr] = b
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
        it = self._live.find(addr)
        if it == self._live.end():
            return NULL
        cdef Block *b = deref(it).second
        self._live.erase(it)
        self.requested -= b.requested
        return b

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

    # -- the fast path (FastPath) ----------------------------------------------------------
    cdef int installed(self, AreaBase area) except -1:
        self._owner = PyWeakref_NewRef(area, None)
        self._owner_key = <void *>area
        return 0

    cdef BufferBase take(self, AreaBase area, object n_obj, bint has_stream, u64 stream):
        """A hit, made into the area's Buffer; None when the slow path must run (a miss,
        a hand-over, a stream the pool has no operations for). The state changes under
        the mutex; the buffer is made after it is released (an allocation may run a
        finalizer that frees into this kernel)."""
        if self._shut or self._area._closed or self.held_here() or self._trace & T_PYTHON:
            return None
        if has_stream and self._streams is None:
            return None
        cdef Py_ssize_t n = _as_ssize(n_obj)
        if n <= 0 or n > PY_SSIZE_T_MAX - <Py_ssize_t>self._mask:
            if n == -1 and PyErr_Occurred() != NULL:
                PyErr_Clear()
            return None
        cdef size_t r = (<size_t>n + self._mask) & ~self._mask
        tp = area._buffer_type(None)
        cdef Block *b
        cdef bint slow = False
        self.lock_gil()
        b = self.take_cached(r, has_stream, stream)
        if b != NULL:
            self.hand_out(b, n, has_stream, stream)
            self.fast_mmaps += 1
        self.unlock()
        if b == NULL:
            # A miss (a hand-over, the streams reclaimed, a new slab): the slow path, here
            # in C with the GIL, counted inside the pool as ``with kernel`` does (a
            # finalizer's free of a pooled buffer meanwhile waits). No Python frame but the
            # area's own mmap for a slab.
            area._enter()
            try:
                b = self._alloc(n, has_stream, stream)
            finally:
                area._leave()
            slow = True
        cdef Slab *slab = b.slab
        info = <tuple>slab.cinfo
        cdef u64 addr = b.addr
        cdef u64 dptr = slab.dptr + (addr - slab.ptr)
        addr_obj = addr
        try:
            return area._make(tp, addr_obj, addr, n, slab.flags, slab.dl_type, slab.dl_id, info[5],
                              None if dptr == addr else dptr, None)
        except BaseException:
            self.lock_gil()
            if not slow:
                self.fast_mmaps -= 1
                self.hits -= 1
            b = self.unlive(addr)
            if b != NULL and self.put_back(b, has_stream, stream):
                self.blocks -= b.size
                self.coalesce(b)
            self.unlock()
            raise

    cdef bint give(self, AreaBase area, BufferBase buf, bint has_stream, u64 stream) except -1:
        """munmap or a finalizer (in host order, or ``stream``'s: the buffer's own unless
        munmap named another): the block back onto its stack in C, or False (the slow
        path: a release threshold, a closed pool, this thread inside the kernel, a
        stream the pool has no operations for)."""
        if not self.keep_fast or self._trace & T_PYTHON or self.held_here():
            return False
        if has_stream and self._streams is None:
            return False
        self.lock_gil()
        cdef int status = self.give_live(buf._ptr, has_stream, stream)
        if status == 0:
            self.fast_munmaps += 1
        self.unlock()
        return status == 0

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

    cdef bint can_give(self, AreaBase area, BufferBase buf) noexcept:
        # A finalizer frees in C unless a thread that runs Python holds the mutex (the slow
        # path, this thread's or another's, which may wait for what this thread holds):
        # then the free is deferred. A hook's hit holding it is waited for by spinning
        # (see lock_gil): no thread that holds the GIL can take the mutex meanwhile.
        return self.keep_fast and not self._gil_holder and not self._trace & T_PYTHON

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

    # -- the slow path (GIL and mutex held: callers use ``with kernel``) ------------------
    def alloc(self, Py_ssize_t size, object stream=None):
        """Take a block for ``size`` bytes (checked by the caller) in host order
        (``stream`` None) or in a stream's order (its handle): the cached paths, the
        hand-over from another stream, the streams reclaimed, a new slab or chunk (past the
        limit or on ENOMEM: the cache released, one retry). Returns the address."""
        cdef bint has_stream = stream is not None
        cdef u64 s = stream if has_stream else 0
        if has_stream and self._streams is None:
            raise AMLNotSupported("this pool orders no work on streams (its area has no stream operations)")
        return self._alloc(size, has_stream, s).addr

    cdef Block *_alloc(self, Py_ssize_t size, bint has_stream, u64 s) except NULL:
        """alloc's body (the mutex taken here): the live block, counted."""
        cdef size_t n = (<size_t>size + self._mask) & ~self._mask
        cdef Block *b
        self.lock_gil()
        cdef u64 since = self._recorded
        try:
            b = self.take_cached(n, has_stream, s)
            if b == NULL and has_stream:
                b = self._hand_over(n, s)
                if b == NULL:
                    self._reclaim_streams()
            if b == NULL:
                b = self._take_slow(n)
            self.hand_out(b, size, has_stream, s)
            if self._trace & T_PYTHON:
                self._attach_frames(since)
            return b
        finally:
            self.unlock()

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

    cdef Block *_take_slow(self, size_t n) except NULL:
        """Best fit after the stacks and the streams are reclaimed, else a new slab."""
        cdef int h = self.heap_of(n)
        cdef Block *b = self.best_fit(h, n)
        if b == NULL and not self._fast.empty():
            self.flush()
            b = self.best_fit(h, n)
        if b == NULL and not self._sfast.empty():
            self._reclaim_streams()
            self.flush()
            b = self.best_fit(h, n)
        if b == NULL:
            b = self._grow(h, n)
            self.misses += 1
            self.hits -= 1  # hand_out counts a hit: a miss is not one
        self.use(b, n)
        return b

    def free(self, u64 addr, object stream=None):
        """Free the live block at ``addr`` (the slow path): onto its stream's stack (its
        own, or ``stream``, the one munmap named), the host stack, or back to its heap, releasing
        what the release threshold or a closed pool asks."""
        self.lock_gil()
        cdef u64 since = self._recorded
        try:
            b = self.unlive(addr)
            if b == NULL:
                raise AMLValueError(f"0x{addr:x} is not a live block of this pool")
            has_stream = b.has_stream
            s = b.stream
            if stream is not None:
                has_stream = True
                s = stream
            if has_stream and self._streams is None:
                has_stream = False  # no stream operations: host order (see set_streams)
            owner = self._owner_area()
            closed = owner is None or owner.closed
            if has_stream and closed and not self.closing:
                # freed after close() detached it: its slab goes now, after its stream
                try:
                    self._streams.synchronize(s)
                except BaseException:
                    self._live[b.addr] = b  # still live: the caller keeps the buffer, a retry frees it
                    self.requested += b.requested
                    raise
                has_stream = False
            if self.put_back(b, has_stream, s):
                self._give(b, closed)
            else:
                self.slow_munmaps += 1
            if self._trace & T_PYTHON:
                self._attach_frames(since)
        finally:
            self.unlock()

    cdef int _give(self, Block *b, bint closed) except -1:
        """Return a live block to its heap now, and release what is due."""
        self.blocks -= b.size
        cdef Slab *slab = self.coalesce(b)
        if closed:
            if not self.closing:  # a buffer close() detached while viewed: its slab goes now
                self._auto_release(slab, 0)
        elif self._has_threshold:
            self._auto_release(slab, self._threshold)
        return 0

    cdef int _auto_release(self, Slab *slab, size_t keep) except -1:
        try:
            if self._segment != NULL:
                self._trim_segment(keep)
            elif self._whole_free(slab) and <size_t>(self.reserved - self.blocks) > keep:
                self._release_slab(slab)
        except AMLError as exc:
            warnings.warn(f"the pool could not return cached memory: {exc}", ResourceWarning, stacklevel=3)
        return 0

    cdef bint _whole_free(self, Slab *slab) noexcept nogil:
        return slab.first != NULL and slab.first.state == B_FREE and slab.first.next == NULL

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

    cdef int _call_on_oom(self, size_t n, object error) except -1:
        """Ask the pool's ``on_oom`` callback (the GIL and the mutex held): 0 to retry;
        ``error`` (the pool's ENOMEM) when it declines, closes the pool or raises (then
        chained from the callback's exception, with a note)."""
        from .pool import _callbacks
        from .pool._values import pool_stats_of

        callback = self.on_oom
        self._in_oom = True
        try:
            retry = bool(callback(n, pool_stats_of(self.stats())))
        except Exception as exc:
            # An interrupted callback (aml_core.pool._callbacks): its interrupt, not the
            # ENOMEM; no block is taken yet, so the pool is whole (a miss in C too).
            _callbacks.deliver()
            error.add_note(f"the pool's on_oom callback raised {type(exc).__name__}: {exc}")
            raise error from exc
        finally:
            self._in_oom = False
        if retry and self._shut:
            error.add_note("the pool's on_oom callback closed the pool")
            retry = False
        if not retry:
            raise error
        return 0

    cdef object _oom_error(self, str reason, size_t n, object cause=None, object failed=None):
        """The pool's ENOMEM (the one message builder): ``reason``, the bytes asked, what
        the pool holds, the free memory of its device where the area can tell; the native
        cause of ``cause`` (the area's own ENOMEM), a note for ``failed`` (a release of the
        cache that failed)."""
        free = None
        if self.free_memory is not None:
            try:
                free = self.free_memory()
            except Exception:  # not known: the message goes without it
                free = None
        text = (
            f"{reason}: {_fs(n)} more asked; the pool has {_fs(self.reserved)} reserved, "
            f"{_fs(self.requested)} in use"
        )
        if type(free) is int and free >= 0:
            text += f"; {_fs(free)} free on the device"
        error = AMLMemoryError(text, native=getattr(cause, "native", None))
        if failed is not None:
            error.add_note(f"releasing the pool's cached memory failed: {failed}")
        return error

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

    @property
    def max_split_size(self):
        return self._max_split if self._has_max_split else None

    def set_limit(self, limit):
        """The most bytes the pool may hold from the area (None: no limit), changed under
        the mutex (checked by the caller). Nothing is released now: growth past it is
        refused (after the cache is released) until the pool is under it again."""
        self.lock_gil()
        self._limited = limit is not None
        self._limit = limit if limit is not None else 0
        self.unlock()

    @property
    def limit(self):
        return self._limit if self._limited else None

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

    cdef void _count_reserved(self, size_t n) noexcept nogil:
        self.native_allocs += 1
        self.reserved += n
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved

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
                failed = _release_cache(self)
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

    # -- what the pool asks --------------------------------------------------------------
    def block(self, u64 addr):
        """The live block at ``addr``: (device_ptr, flags, (dl_type, dl_id), device, the
        slab's Buffer or None, the offset in the slab, the block's bytes)."""
        self.lock_gil()
        try:
            it = self._live.find(addr)
            if it == self._live.end():
                raise AMLValueError(f"0x{addr:x} is not a live block of this pool")
            b = deref(it).second
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
            live_it = self._live.begin()
            while live_it != self._live.end():
                b = deref(live_it).second
                key = b.stream if b.has_stream else None
                r, used, cached, n, m = out.get(key, (0, 0, 0, 0, 0))
                out[key] = (r + b.requested, used + b.size, cached, n + 1, m)
                inc(live_it)
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

    def close_stacks(self):
        """close() begins: no more stacks, the host stacks coalesced."""
        self.lock_gil()
        self.keep_fast = False
        self._shut = True
        self.flush()
        self.unlock()

    def let_go(self, viewed):
        """After close(): every slab still held whose range holds no address of
        ``viewed`` (buffers detached while viewed) and no block a framework hook still
        holds is the area's again; the others stay the pool's until those go."""
        cdef size_t i
        cdef Slab *s
        cdef Block *b
        cdef bint used
        self.lock_gil()
        try:
            for i in range(self._slabs.size()):
                s = self._slabs[i]
                used = False
                b = s.first
                while b != NULL and not used:
                    used = b.state == B_USED
                    b = b.next
                lo = s.ptr
                hi = s.ptr + s.size
                if s.buf != NULL and not used and not any(lo <= p < hi for p in viewed):
                    self._area._hold(<object>s.buf, False)
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
            if self._streams is not None or self._live.size() or self._slabs.size():
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

    def live_blocks(self):
        """How many blocks are live (handed out and not freed)."""
        return self._live.size()

    @property
    def granule(self):
        return self._mask + 1



cdef object _release_cache(PoolKernel kernel):
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


def _area_said(what, nomem):
    """The reason of an ENOMEM from the area: ``what`` and the area's own message (its
    native cause goes with the pool's error, as ``native``)."""
    detail = str(nomem)
    native = getattr(nomem, "native", None)
    if native is not None:
        detail = detail.removesuffix(f" [{native}]")
    return f"{what} ({detail})"


def _fs(n):
    """A size in an error message: readable, with the exact count."""
    from .specs import format_size

    return format_size(n, exact=True)


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
