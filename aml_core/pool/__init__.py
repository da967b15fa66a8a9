"""Pools: an :class:`~aml_core.area.Area` that keeps freed memory for reuse.

``aml_core.pool(area)`` returns a :class:`Pool`, itself an area (same ``mmap``,
``munmap``, ``stats``, ``close`` and the same error table as :mod:`aml_core.area`), over
any other area: host NUMA, CUDA, HIP, even another pool. It asks the area for large
*slabs* and hands out *blocks* carved from them, so most ``mmap`` calls make no native
call at all::

    with aml_core.pool(area, limit=8 << 30) as pool:
        buf = pool.mmap(4096)          # a normal aml Buffer at the block's address
        ...
        pool.munmap(buf)               # back to the pool, not to the area
        pool.trim()                    # give cached slabs back to the area

Layout
    Sizes are rounded up to the *granule* (512 bytes; blocks are aligned to it). Requests
    of at most ``small_max`` (1 MiB) come from a small heap whose slabs are
    ``small_slab`` (2 MiB) and are split down to the granule; larger requests come from
    a large heap whose slabs are ``medium_slab`` (20 MiB) for requests under 10 MiB and
    the request rounded up to 2 MiB otherwise. A large block is split only when at least
    ``small_max`` would remain (smaller tails stay with the block: bounded waste, no
    slivers). Each heap indexes its free blocks by (size, address): the best fit is the
    lowest-addressed free block of the smallest sufficient size (address order packs
    live blocks low and keeps large free ranges whole). A freed small block first goes on
    a stack of its exact size (the next request of that size pops it: no search, no
    split); those stacks are coalesced into the heaps (deferred coalescing) when a request
    finds no fit, and before trimming or reading the statistics. A freed large block is
    coalesced at once, as PyTorch's caching allocator does: deferring it let requests
    split other free blocks while merged ones would have fit, and a training loop of
    varying shapes reserved 1.3x PyTorch's peak (1.0x with this rule, on an H200). A block
    that is coalesced merges with its free neighbours in the same slab (blocks of a slab
    form an address-ordered linked list). With ``release_threshold`` set, freed blocks
    coalesce at once.
    Every block remembers its slab: two blocks of one slab are different buffers, with
    their own addresses, sizes and lifetimes.

Expandable pools
    ``aml_core.pool(vm, expandable=True)`` over a
    :class:`~aml_core.gpu.vmm.VirtualMemory` area (any
    :class:`~aml_core.protocols.GrowableMemory`) reserves one large virtual range
    (``capacity``) and maps physical chunks at its end on demand, as PyTorch's
    expandable segments do with CUDA VMM: the single segment grows in place instead of
    adding slabs, so a freed large block and the new bytes after it merge into one
    block, and :meth:`Pool.trim` unmaps free chunks at the end.

Limit and release
    ``limit`` caps the bytes reserved from the area. A slab that would pass it first
    makes the pool release its cached (wholly free) slabs and retry; if it still does
    not fit, :class:`~aml_core.errors.AMLMemoryError` (ENOMEM). The same trim-and-retry
    happens when the area itself reports ENOMEM. ``release_threshold`` keeps at most
    that many cached bytes: a slab that becomes wholly free beyond it is returned to the
    area at once. :meth:`Pool.trim` returns cached slabs on demand. Before any slab or
    chunk goes back (trim, the threshold, the limit's retry, close), the pool's RDMA
    registrations deregister it (:mod:`aml_core.rdma`; a failure keeps it cached).

    The limit changes at run time: ``pool.set_limit(8 << 30)``, ``pool.set_limit(
    fraction=0.5)`` (half of the device's memory; for a host pool, of its NUMA nodes'
    — any area that is a :class:`~aml_core.protocols.MemoryCapacity`),
    ``pool.set_limit(None)`` (no limit); ``pool.limit = ...`` is the same, and
    ``limit=`` at creation takes the same values (a float is a fraction). Lowering it
    below what the pool reserves releases nothing: the memory and its buffers stay,
    cached blocks are still handed out, and growth is refused (after releasing the
    cache) until the pool is under it again. An expandable pool's reservation
    (``capacity``) caps it whatever the limit: past the reservation, ENOMEM says it is
    full. EINVAL (:class:`~aml_core.errors.AMLValueError`) for a limit smaller than one
    granule, a fraction outside (0, 1], both or neither given; AMLTypeError for a
    value that is not an int, a float or None.

Out of memory
    ``on_oom=callback`` (at creation, ``pool.on_oom = callback`` or
    ``pool.set_on_oom(callback)``) is called as ``callback(requested, stats)`` when a
    growth fails (the limit, the area's ENOMEM, an expandable pool's full reservation),
    after the pool released its cache and before it raises: ``requested`` is the bytes
    needed (the request rounded up to the granule), ``stats`` the pool's
    :class:`PoolStats`. A true result retries once (a block the callback freed, else
    new memory); a false one raises ENOMEM; an exception of the callback raises ENOMEM
    ``from`` it (with a note; KeyboardInterrupt and other BaseExceptions go through as
    they are). It runs in the allocating thread with the GIL and the pool's mutex held,
    from the slow path only (a PyTorch or CuPy allocation reaches it through its miss):
    it may free this pool's buffers (``munmap``, a framework's tensors), but a buffer
    that the garbage collector frees meanwhile returns only after it; an allocation it
    makes from the pool does not call it again; closing the pool in it means no retry.

    ENOMEM's message names the bytes asked for, the pool's reserved and in-use bytes and
    the free memory of the device below where its area tells (``MemoryCapacity``:
    ``cudaMemGetInfo``/NVML, ``hipMemGetInfo``, the NUMA nodes' ``MemFree``); an ENOMEM
    of the area keeps its native cause (``error.native``) and is the ``__cause__``::

        the GpuArea below the pool has no memory for a slab of 1.0 GiB (1073741824 bytes)
        (Not enough memory): 1.0 GiB (1073741824 bytes) more asked; the pool has 2.0 MiB
        (2097152 bytes) reserved, 4.0 KiB (4096 bytes) in use; 1022.0 MiB (1071644672
        bytes) free on the device [hip: hipMalloc returned hipErrorOutOfMemory (2)]

Statistics
    :attr:`Pool.stats` is the area's :class:`~aml_core.specs.AreaStats` (requested
    bytes); :attr:`Pool.pool_stats` is a :class:`PoolStats` with block and reserved
    bytes, their peaks (:meth:`Pool.reset_peak`), native calls versus pool hits, the
    largest free block and ``fragmentation = 1 - largest_free_block / free_bytes``
    (0 when nothing is free): 0 when all cached memory is one block, near 1 when it is
    scattered in small pieces that a large request cannot use.
    :attr:`Pool.stream_stats` splits the live and cached blocks by stream
    (:class:`StreamStats`, host order first): what each stream holds and what waits on
    its free list.

History
    :meth:`Pool.record_history` records every allocation and free (address, block and
    requested bytes, stream, wall-clock time, thread) and every slab taken from or given
    back to the area in the kernel's ring of the newest ``max_entries`` events, the
    framework hooks' included; ``stacks="python"`` adds each event's Python stack.
    :meth:`Pool.snapshot` returns a :class:`Snapshot`: the slabs, their blocks (used,
    free, cached on a stack, held by a stream) and the history; ``snapshot().dump(path)``
    writes the pickle PyTorch's ``torch.cuda._memory_viz`` and memory viewer read, and
    ``python -m aml_core.plot path`` draws it. :meth:`Pool.log_to` writes each
    allocation and free as a CSV row with RMM's logging adaptor's columns, or passes a
    :class:`LogRecord` to a callback. All are off by default; what they cost:
    docs/kernel.md, "History".

Errors
    A pool over a closed area is EINVAL at creation, and so is an ``mmap`` after its
    area was closed (the area's close closes the pool first, then frees the slabs).
    Freeing a buffer the pool did not make is EINVAL as on any area. A slab is the
    pool's until it gives it back: the area refuses to free it, EINVAL (see
    aml_core.area, "Pools"). A failure of the area while
    releasing a slab leaves the slab cached (and counted); :meth:`trim` and
    :meth:`close` raise it, a release triggered by ``release_threshold`` warns
    (ResourceWarning) instead, since the block was already returned.

Streams (GPU pools)
    ``pool.mmap(size, stream=s)`` takes a block in ``s``'s order and ``pool.munmap(buf,
    stream=s)`` frees it in that order (without ``stream``: on the stream it was
    allocated on, ``buf.stream``): the block may still be used by work queued on ``s``,
    so it goes on ``s``'s own free list and is reused at once only by later requests on
    ``s``. A request on another stream ``t`` takes host-free memory first, then a block
    of its exact size freed on another stream after making ``t`` wait for an event
    recorded on that stream (no host wait); before the pool would grow, trim or close
    (and before a request without a stream takes one), every stream holding freed blocks
    is shown idle (an event recorded on it and queried; synchronized only while its work
    still runs) and the blocks return to host order. Requests without a stream never
    take a block still held by a stream. The pool has its area's stream operations (as C
    function pointers, :func:`aml_core.stream.native_streams`) from its creation, so a
    framework hook's first request on a stream finds them. This needs an area that
    orders work on streams (:class:`~aml_core.protocols.StreamOrderedArea`: a GPU area
    whose runtime provides the ``STREAMS`` and ``STREAM_ORDERED`` groups;
    AMLNotSupported otherwise); slabs are still allocated with the area's ordinary
    (synchronous) mmap. A stream handle is checked as every stream argument is, once
    (:func:`aml_core.stream.as_stream_handle`: type and range); whether it names a live
    stream only the runtime can tell, so the pool takes it as given: the runtime refuses
    an unknown one on the first stream-ordered call that uses it (the hand-over's event
    record, the event record that asks whether it is idle before growth, trim and
    close), with its error, and nothing is lost: the block stays on that handle's free
    list and the area's close frees its slab.

What the area offers
    The pool asks its area for more than mmap and munmap only through the protocols of
    :mod:`aml_core.protocols` (stream ordering, device copies for :meth:`Pool.write` and
    :meth:`Pool.read`, IPC export, growable memory for expandable pools, the device a
    pool binds to), never by testing for GPU types.

Fast path
    The pool's whole policy (blocks and slabs, the heaps, the stacks, streams, the limit,
    the expandable segment, the counters) is the allocator kernel,
    :class:`~aml_core._buffer.PoolKernel` (aml_core/_kernel.pyx, docs/kernel.md), which
    the pool installs in its area base class (``_set_pool``). ``pool.mmap(size)`` and
    ``pool.mmap(size, stream=s)`` that the kernel serves from cached memory, and
    ``pool.munmap`` (with or without ``stream``) while it keeps stacks, run in C with no
    Python frame (a stream other than an int or an aml Stream is converted by one Python
    call, :func:`aml_core.stream.as_stream_handle`). Everything else (a new slab, a hand-over between
    streams, the release threshold, a closed pool) runs the kernel's slow path, called by
    this package with the kernel's mutex held. PyTorch's and CuPy's hooks
    (aml_core.gpu.hooks) call the kernel from C without the GIL and make no Buffer.

Threads
    One mutex per pool (the kernel's; ``with pool._kernel`` holds it, re-entrant for its
    holder) guards the blocks, stacks and counters; every kernel entry takes it. A thread
    holding the GIL takes it only while it holds the GIL, and waits for a holder that runs
    Python with the GIL released; a framework hook's hit holds it for a few hundred
    nanoseconds of C. The area below is called with it held (areas are thread-safe and
    never call back into the pool). So every public method may be called from any
    thread, and PyTorch may allocate from several threads at once without the GIL. A
    pooled buffer that is itself dropped is freed by its finalizer through munmap's path
    (see aml_core.area, "Garbage collection"): in C unless a thread running the pool's
    Python side holds the mutex (then it waits until that holder leaves), and so does one
    whose free would release a slab while someone is inside the area below. What rests
    on the GIL: docs/reliability.md, "Threads and the GIL".

Garbage collection
    A pooled buffer dropped without munmap goes back to the pool when collected, as
    munmap would take it: onto its size's stack, a stream-ordered block onto its
    stream's free list (both in C), with ``release_threshold`` or after close its slab to
    the area. A pool dropped unclosed goes with its buffers, and its slabs (Buffers of the
    area) are freed by the area in turn.
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any, Unpack

from ..area import Area
from ._config import PoolConfig, PoolConfigFields
from ._history import HistoryEvent, LogRecord, Snapshot, SnapshotBlock, SnapshotSegment
from ._pool import OnOom, Pool
from ._values import KiB as KiB  # aml_core.pool.KiB and MiB, as before
from ._values import MiB as MiB
from ._values import PoolOptions, PoolOptionsDict, PoolStats, StreamStats

__all__ = [
    "HistoryEvent",
    "LogRecord",
    "OnOom",
    "Pool",
    "PoolConfig",
    "PoolConfigFields",
    "PoolOptions",
    "PoolOptionsDict",
    "PoolStats",
    "Snapshot",
    "SnapshotBlock",
    "SnapshotSegment",
    "StreamStats",
    "pool",
]


def pool(
    area: Area,
    config: PoolConfig | None = None,
    *,
    on_oom: OnOom | None = None,
    options: object = None,
    **fields: Unpack[PoolConfigFields],
) -> Pool:
    """A pool over ``area`` (see :mod:`aml_core.pool`): an area that keeps freed blocks.

    ``config``: a :class:`PoolConfig`, whose fields the keywords replace (each checked
    once, when the config is made): ``limit`` (most bytes held from the area, ENOMEM
    past it after releasing the cache; a float: that fraction of the device's memory;
    :meth:`Pool.set_limit` changes it), ``release_threshold`` (most cached bytes kept),
    ``expandable`` and ``capacity`` (one growing segment over a VirtualMemory area,
    reserving ``capacity`` bytes of addresses: default the limit, or 1 TiB),
    ``max_split_size`` (blocks above it are never split), ``initial_size`` (bytes
    reserved now), ``granule``, ``small_max``, ``small_slab``, ``medium_slab`` (the
    layout); ``on_oom``: ``callback(requested, stats) -> bool``, asked before ENOMEM
    (True: retry once; see :attr:`Pool.on_oom`); ``options``: the area's mmap options for
    every slab.
    """
    return Pool(area, config, on_oom=on_oom, options=options, **fields)


class _PoolModule(types.ModuleType):
    """``aml_core.pool`` is this module, and calling it calls its factory :func:`pool`:
    ``aml_core.pool(area, limit=...)`` makes a pool, as it always did, while
    ``import aml_core.pool as p`` gives the module (``p.Pool``, ``help(p.Pool.log_to)``),
    which used to be the function (issue 31: ``'function' object has no attribute
    'Pool'``). Nothing is renamed, so no call needs to change; ``aml_core.pool.pool`` and
    ``aml_core.Pool(area, ...)`` are the same factory by name."""

    def __call__(self, area: Area, config: PoolConfig | None = None, /, **kwargs: Any) -> Pool:
        return pool(area, config, **kwargs)


#: What ``inspect.signature(aml_core.pool)`` and ``help()`` show: the factory's.
__signature__ = inspect.signature(pool)
sys.modules[__name__].__class__ = _PoolModule
