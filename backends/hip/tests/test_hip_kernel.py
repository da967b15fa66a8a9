"""The pool's compiled fast path over a HIP device area on the driver double: repeated
mmap/munmap of one size makes no driver call (native call counts stay flat) and is
counted as pool hits; a block it hands out is shared by IPC like any pooled block."""

from __future__ import annotations

import aml_hip
import pytest
from hip_helpers import HipDouble

import aml_core
from aml_core.errors import AMLValueError
from aml_core.pool import PoolOptions


def test_repeated_size_makes_no_driver_call(hip: HipDouble) -> None:
    with aml_hip.create(0, 0) as device, aml_core.pool(device) as p:
        cache = p._pool_kernel
        assert cache is not None
        p.munmap(p.mmap(4096))  # the slab: one hipMalloc
        mallocs, frees = hip.calls("hipMalloc"), hip.calls("hipFree")
        assert (mallocs, frees) == (1, 0)
        first = None
        for _ in range(500):
            buf = p.mmap(4096)
            first = first or buf.ptr
            assert buf.ptr == first
            assert buf.__cuda_array_interface__["data"][0] == buf.ptr
            p.munmap(buf)
        assert (hip.calls("hipMalloc"), hip.calls("hipFree")) == (mallocs, frees)
        assert (cache.fast_mmaps, cache.fast_munmaps) == (500, 501)
        s = p.pool_stats
        assert (s.pool_hits, s.pool_misses, s.native_allocations) == (500, 1, 1)
        assert p.trim() == 2 << 20
        assert hip.calls("hipFree") == 1


def test_a_fast_path_block_is_exported_with_its_offset(hip: HipDouble) -> None:
    with aml_hip.create(0, 0) as device, aml_core.pool(device) as p:
        keep = p.mmap(4096)
        p.munmap(p.mmap(1000))  # the block at offset 4096 goes on its stack
        cache = p._pool_kernel
        assert cache is not None
        b = p.mmap(1000)  # fast
        assert cache.fast_mmaps == 1
        export = p.ipc_export(b)
        h = export.handle
        assert (h.offset, h.size) == (4096, 1000)
        assert h.data == p.ipc_export(keep).handle.data  # one slab, one native handle
        slab, offset = p.slab_of(b)
        assert slab is not None
        assert offset == 4096
        p.munmap(b)
        p.munmap(keep)


def test_a_destroyed_stream_is_refused_with_a_block_cached(hip: HipDouble) -> None:
    """mmap on a closed aml Stream is EINVAL (the stream's own check) on the compiled
    path too: with a block of the size cached it used to be handed out on the dead
    handle, freed onto its stack, and every later reclaim failed (hipStreamSynchronize:
    hipErrorInvalidHandle), so the pool could not trim or grow (found by the pool soak)."""
    with aml_hip.create(0, 0) as device, aml_core.pool(device) as p:
        live = aml_hip.stream(non_blocking=True)
        try:
            _refuse_a_dead_stream(p, live)
        finally:
            live.close()


def _refuse_a_dead_stream(p: aml_core.Pool, live: aml_hip.Stream) -> None:
    p.munmap(p.mmap(4096, {"stream": live}))  # the pool knows streams; a block on live's stack
    p.munmap(p.mmap(4096))  # and one on the host-order stack
    dead = aml_hip.stream(non_blocking=True)
    dead.close()
    cache = p._pool_kernel
    assert cache is not None
    before = (cache.fast_mmaps, cache.hits, cache.misses)
    for options in ({"stream": dead}, PoolOptions(stream=dead)):
        with pytest.raises(AMLValueError, match="closed"):
            p.mmap(4096, options)
    assert (cache.fast_mmaps, cache.hits, cache.misses) == before
    assert cache.live_blocks() == 0
    assert p.trim() == 2 << 20  # live is synchronized; nothing is on a dead stream
