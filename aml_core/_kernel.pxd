# The allocator kernel (aml_core/_kernel.pyx): a pool's policy and state in C. The hooks
# (aml_core/_hooks.pyx) call hook_alloc / hook_free with no GIL.
from cpython.object cimport PyObject
from libcpp.map cimport map as cmap
from libcpp.unordered_map cimport unordered_map
from libcpp.utility cimport pair
from libcpp.vector cimport vector

from ._addrmap cimport AddrSlot
from ._allocator cimport NativeStreams
from ._buffer cimport AreaBase, BufferBase
from ._fastpath cimport FastPath

ctypedef unsigned long long u64
ctypedef pair[size_t, u64] HeapKey  # (size, address): the lowest address first among equal sizes
ctypedef pair[u64, size_t] StreamKey  # (stream, size)
ctypedef pair[u64, size_t] Chunk  # an expandable segment's mapped chunk (ptr, size)

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass

cdef struct Block
cdef struct Slab

# The live blocks by address (_live): an AddrSlot table (_addrmap.pxd, as an area's live
# table), the value a Block. No allocation per entry (an unordered_map allocated a node
# for each hit): the slots grow by doubling.
cdef struct LiveMap:
    AddrSlot *slots
    size_t cap  # a power of two, or 0
    size_t count

# Memory held from the area: a slab Buffer (buf), or the expandable segment (buf NULL).
cdef struct Slab:
    u64 ptr
    u64 dptr
    size_t size
    int heap
    int flags  # F_HOST | F_READONLY of its blocks' buffers
    int dl_type
    int dl_id
    PyObject *buf  # a strong reference, or NULL
    PyObject *cinfo  # (ptr, device_ptr, flags, dl_type, dl_id, device): a strong reference
    Block *first
    Block *last

# A piece of a slab: free (in its heap), on a stack, or live (handed out).
cdef struct Block:
    u64 addr
    size_t size
    size_t requested  # the bytes asked for, while live
    Slab *slab
    Block *prev
    Block *next
    int state
    bint has_stream
    u64 stream  # the stream it was last allocated or freed on (has_stream)
    u64 key  # its heap key's second part (its address when it was indexed), while free


# The statistics, filled by PoolKernel.stats() under the mutex; Python reads them by name
# (Cython gives a struct to Python as a dict of its fields: aml_core.pool._values.pool_stats_of).
cdef struct Counters:
    long long requested
    long long peak_requested
    long long blocks
    long long reserved
    long long peak_reserved
    long long slabs
    long long native_allocs
    long long native_frees
    long long hits
    long long misses
    long long largest_free


# One recorded event of the history (record_history, log_to): fixed size, in a ring.
cdef struct Event:
    int action  # EV_* in _kernel.pyx
    u64 addr
    size_t size  # the block's (or slab's, chunk's) bytes
    size_t requested  # the bytes asked for (a block's), else size
    bint has_stream
    u64 stream
    long long time_ns  # CLOCK_REALTIME
    unsigned long thread


# PoolKernel is a chain of classes, one per concern (each in its own .pxi, included by
# _kernel.pyx: one extension module); every field is the lowest one's.
cdef class _KernelState(FastPath):
    cdef pthread_mutex_t _mu
    cdef unsigned long _holder
    cdef int _depth
    cdef bint _gil_holder  # the holder holds the GIL (the Python side), not a hook's hit
    # A HookState calls this kernel without the GIL (set when one is made, never cleared).
    # Until then every user holds the GIL, which alone serializes a hit: the fast path
    # skips the mutex while nobody holds it (gil_only).
    cdef bint _nogil_users
    cdef AreaBase _area
    cdef object _owner
    cdef void *_owner_key
    cdef size_t _mask
    cdef size_t _small_max
    cdef size_t _small_slab
    cdef size_t _medium_slab
    cdef bint _has_max_split  # PoolConfig.max_split_size: blocks above it are never split
    cdef size_t _max_split
    cdef bint _limited
    cdef size_t _limit
    cdef bint _in_oom  # the on_oom callback runs
    cdef bint _has_threshold
    cdef size_t _threshold
    cdef object _options
    cdef bint _one_heap
    cdef bint _shut
    cdef cmap[HeapKey, Block *] _heap0
    cdef cmap[HeapKey, Block *] _heap1
    cdef unordered_map[size_t, vector[Block *]] _fast
    cdef cmap[StreamKey, vector[Block *]] _sfast
    cdef unordered_map[u64, long long] _held
    cdef LiveMap _live
    cdef vector[Slab *] _slabs
    cdef Slab *_segment
    cdef vector[Chunk] _chunks
    cdef object _vm
    cdef u64 _res_end
    cdef size_t _vm_granule
    # the history (record_history): off unless _trace; see "History" in docs/kernel.md
    cdef int _trace  # T_RECORD, T_PYTHON (stacks or a log: the C hits decline)
    cdef vector[Event] _ring
    cdef u64 _recorded  # events appended since the kernel was made (the next one's number)
    cdef u64 _first  # the first event of the current ring (earlier ones were cleared)
    cdef object _frames  # {event number: frames} (stacks="python")
    cdef int _max_frames
    cdef public object sink  # called after the outermost ``with kernel`` (a log's drain)
    # counters (the statistics)
    cdef readonly long long hits
    cdef readonly long long misses
    cdef readonly long long requested
    cdef readonly long long peak_requested
    cdef readonly long long blocks
    cdef readonly long long reserved
    cdef readonly long long peak_reserved
    cdef readonly long long native_allocs
    cdef readonly long long native_frees
    cdef readonly long long fast_mmaps
    cdef readonly long long fast_munmaps
    cdef readonly long long slow_munmaps
    cdef readonly long long hook_mmaps
    cdef readonly long long hook_munmaps
    cdef public bint keep_fast
    cdef public bint closing
    cdef NativeStreams _streams  # the runtime's stream calls (set_streams), or None: no streams
    cdef void *_event  # the hand-over and query event (made on first use), or NULL
    cdef int _last_rc  # the code of the stream call _hand_over_nogil saw fail
    cdef public object on_oom  # callback(requested, PoolStats) -> bool, or None
    cdef public object free_memory  # () -> the device's free bytes (int) or None; or None
    cdef public object release_hook  # (ptr, size) before a slab or chunk goes back; raising keeps it

    cdef void _free_slab_struct(self, Slab *s) noexcept
    cdef int lock_gil(self) except -1
    cdef int lock_nogil(self) noexcept nogil
    cdef void unlock(self) noexcept nogil
    cdef bint held_here(self) noexcept nogil
    cdef bint gil_only(self) noexcept
    cdef AreaBase _owner_area(self)


# the history: _kernel_history.pxi
cdef class _History(_KernelState):
    cdef void record(self, int action, u64 addr, size_t size, size_t requested, bint has_stream,
                     u64 stream) noexcept nogil
    cdef int _attach_frames(self, u64 since) except -1


# heaps and fit, the stacks, a hit: _kernel_heaps.pxi
cdef class _Heaps(_History):
    cdef cmap[HeapKey, Block *] *_heap(self, int h) noexcept nogil
    cdef int heap_of(self, size_t n) noexcept nogil
    cdef size_t split_min(self, int h) noexcept nogil
    cdef void heap_insert(self, Block *b) noexcept nogil
    cdef void heap_remove(self, Block *b) noexcept nogil
    cdef Block *best_fit(self, int h, size_t n) noexcept nogil
    cdef size_t largest_free(self) noexcept nogil
    cdef void use(self, Block *b, size_t n) noexcept nogil
    cdef Slab *coalesce(self, Block *b) noexcept nogil
    cdef void absorb(self, Slab *slab, Block *left, Block *right) noexcept nogil
    cdef void flush(self) noexcept nogil
    cdef Block *pop_host(self, size_t n) noexcept nogil
    cdef Block *pop_stream(self, u64 stream, size_t n) noexcept nogil
    cdef Block *take_cached(self, size_t n, bint has_stream, u64 stream) noexcept nogil
    cdef void hand_out(self, Block *b, size_t size, bint has_stream, u64 stream) noexcept nogil
    cdef int put_back(self, Block *b, bint has_stream, u64 stream) noexcept nogil
    cdef Block *unlive(self, u64 addr) noexcept nogil
    cdef int give_live(self, u64 addr, bint has_stream, u64 stream) noexcept nogil


# streams: hand-over and reclaim: _kernel_streams.pxi
cdef class _Streams(_Heaps):
    cdef int _hand_over_nogil(self, size_t n, u64 stream, Block **out) noexcept nogil
    cdef Block *_hand_over(self, size_t n, u64 stream) except? NULL
    cdef int _reclaim_streams(self) except -1
    cdef int _stream_failed(self, int code, int op) except -1


# the limit and out of memory: _kernel_limit.pxi
cdef class _Limit(_Streams):
    cdef int _call_on_oom(self, size_t n, object error) except -1
    cdef object _oom_error(self, str reason, size_t n, object cause=*, object failed=*)
    cdef void _count_reserved(self, size_t n) noexcept nogil


# the expandable segment: _kernel_segment.pxi
cdef class _Segment(_Limit):
    cdef Block *_grow_segment(self, size_t n) except NULL
    cdef size_t _trim_segment(self, size_t keep) except? <size_t>-1


# slabs: growth, release, trim: _kernel_slabs.pxi
cdef class _Slabs(_Segment):
    cdef bint _whole_free(self, Slab *slab) noexcept nogil
    cdef size_t _slab_size(self, int h, size_t n) noexcept nogil
    cdef Block *_grow(self, int h, size_t n) except NULL
    cdef Block *_grow_once(self, int h, size_t n) except NULL
    cdef int _release_slab(self, Slab *slab) except -1
    cdef size_t _trim(self, size_t keep) except? <size_t>-1


# the slow path and closing: _kernel_slow.pxi
cdef class _SlowPath(_Slabs):
    cdef Block *_take_slow(self, size_t n) except NULL
    cdef Block *_alloc(self, Py_ssize_t size, bint has_stream, u64 s) except NULL
    cdef int _give(self, Block *b, bint closed) except -1
    cdef int _auto_release(self, Slab *slab, size_t keep) except -1


# statistics: _kernel_stats.pxi
cdef class _Stats(_SlowPath):
    pass


# the hooks' entry: _kernel_hooks.pxi
cdef class _Hooks(_Stats):
    cdef int hook_alloc(self, size_t size, bint has_stream, u64 stream, u64 *out) noexcept nogil
    cdef int hook_free(self, u64 addr, bint has_stream, u64 stream) noexcept nogil
    cdef int hook_slow_alloc(self, size_t size, bint has_stream, u64 stream, u64 *out, list errors) noexcept
    cdef int hook_slow_free(self, u64 addr, bint has_stream, u64 stream, list errors) noexcept


cdef class PoolKernel(_Hooks):
    pass
