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

One mutex per kernel guards the state; every entry takes it, but a hit with the GIL while
no hook uses the kernel and nobody holds the mutex (``gil_only``: the GIL alone serializes
every user then; docs/kernel.md, "The mutex and the GIL"). A thread that holds the
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
from libc.stdlib cimport abort, calloc
from libc.stdlib cimport free as cfree
from libcpp.map cimport map as cmap
from libcpp.vector cimport vector
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

from ._addrmap cimport AddrSlot, addr_find, addr_grown, addr_put, addr_remove_at
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


cdef extern from "Python.h":
    ctypedef struct PyThreadState:
        pass
    int PyGILState_Check() noexcept nogil
    PyThreadState *PyEval_SaveThread() noexcept nogil
    void PyEval_RestoreThread(PyThreadState *) noexcept nogil


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

# The kernel is one extension module cut into files by concern (docs/kernel.md, "Layout"):
# each includes one class of PoolKernel's chain of bases, the lowest first.
include "_kernel_state.pxi"
include "_kernel_history.pxi"
include "_kernel_heaps.pxi"
include "_kernel_streams.pxi"
include "_kernel_limit.pxi"
include "_kernel_segment.pxi"
include "_kernel_slabs.pxi"
include "_kernel_slow.pxi"
include "_kernel_stats.pxi"
include "_kernel_hooks.pxi"


cdef class PoolKernel(_Hooks):
    """PoolKernel(area, config, *, limit=None, options=None)
--

    A pool's policy and state over ``area`` (see the module doc), configured by
    ``config`` (an ``aml_core.pool.PoolConfig``, checked when it was made: its fields are
    read by name here), ``limit`` (bytes, resolved by the pool) and ``options`` (the
    area's mmap options for every slab); made by ``aml_core.pool.Pool``."""

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

    @property
    def max_split_size(self):
        return self._max_split if self._has_max_split else None

    # -- the fast path (FastPath) ----------------------------------------------------------
    cdef int installed(self, AreaBase area) except -1:
        self._owner = PyWeakref_NewRef(area, None)
        self._owner_key = <void *>area
        return 0

    cdef BufferBase take(self, AreaBase area, object n_obj, Py_ssize_t n, bint has_stream, u64 stream):
        """A hit, made into the area's Buffer; None when the slow path must run (a miss,
        a hand-over, a stream the pool has no operations for). The state changes under
        the mutex; the buffer is made after it is released (an allocation may run a
        finalizer that frees into this kernel)."""
        cdef bint gil_only = self.gil_only()  # no mutex needed (see gil_only)
        if self._shut or self._area._closed or self._trace & T_PYTHON or (not gil_only and self.held_here()):
            return None
        if has_stream and self._streams is None:
            return None
        if n <= 0 or n > PY_SSIZE_T_MAX - <Py_ssize_t>self._mask:  # n: n_obj in C
            return None
        cdef size_t r = (<size_t>n + self._mask) & ~self._mask
        tp = area._buffer_type(None)
        cdef Block *b
        cdef bint slow = False
        if not gil_only:
            self.lock_gil()
        b = self.take_cached(r, has_stream, stream)
        if b != NULL:
            self.hand_out(b, n, has_stream, stream)
            self.fast_mmaps += 1
        if not gil_only:
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
        try:
            return area._make(tp, None, addr, n, slab.flags, slab.dl_type, slab.dl_id, info[5],
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
        cdef bint gil_only = self.gil_only()  # no mutex needed (see gil_only)
        if not self.keep_fast or self._trace & T_PYTHON or (not gil_only and self.held_here()):
            return False
        if has_stream and self._streams is None:
            return False
        if not gil_only:
            self.lock_gil()
        cdef int status = self.give_live(buf._ptr, has_stream, stream)
        if status == 0:
            self.fast_munmaps += 1
        if not gil_only:
            self.unlock()
        return status == 0

    cdef bint can_give(self, AreaBase area, BufferBase buf) noexcept:
        # A finalizer frees in C unless a thread that runs Python holds the mutex (the slow
        # path, this thread's or another's, which may wait for what this thread holds):
        # then the free is deferred. A hook's hit holding it is waited for by spinning
        # (see lock_gil): no thread that holds the GIL can take the mutex meanwhile.
        return self.keep_fast and not self._gil_holder and not self._trace & T_PYTHON
