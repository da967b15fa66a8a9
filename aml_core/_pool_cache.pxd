# The pool's compiled cache (aml_core/_pool_cache.pyx): the state aml_core.pool.Pool's
# Python code shares with the fast path, and the pool's lock (docs/kernel.md lists what
# crosses the boundary).
from ._buffer cimport AreaBase
from ._fastpath cimport FastPath


cdef class PoolCache(FastPath):
    # size -> list of free blocks of that size (Python objects with ``addr``, ``size``,
    # ``stream`` and ``slab.cinfo``).
    cdef public dict fast
    cdef public bint keep_fast
    cdef public long long hits
    cdef public long long requested
    cdef public long long peak_requested
    cdef public long long blocks
    # How many mmaps and munmaps the compiled path served (tests, benchmarks).
    cdef readonly long long fast_mmaps
    cdef readonly long long fast_munmaps
    # The depth of the lock's holder (0: nobody holds it).
    cdef readonly int busy
    # The re-entrant lock.
    cdef readonly object lock
    cdef object _acquire
    cdef object _release
    cdef AreaBase _area  # the pooled area (a closed one: the Python path raises)
    cdef Py_ssize_t _mask
    cdef object _owner  # a weak reference to the pool that installed it (installed())
    cdef void *_owner_key  # the pool's address: its key in the thread's inside-table

    cdef AreaBase _owner_area(self)
