"""The pool's compiled fast path over a HIP device area on the driver double: repeated
mmap/munmap of one size makes no driver call (native call counts stay flat) and is
counted as pool hits; a block it hands out is shared by IPC like any pooled block."""

from __future__ import annotations

import aml_hip
from hip_helpers import HipDouble

import aml_core


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
        before = cache.fast_mmaps
        b = p.mmap(1000)  # fast
        assert cache.fast_mmaps == before + 1
        export = p.ipc_export(b)
        h = export.handle
        assert (h.offset, h.size) == (4096, 1000)
        assert h.data == p.ipc_export(keep).handle.data  # one slab, one native handle
        slab, offset = p.slab_of(b)
        assert slab is not None
        assert offset == 4096
        p.munmap(b)
        p.munmap(keep)
