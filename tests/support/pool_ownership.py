"""Who frees a pool's slab (aml_core.area, "Pools"): every way to free a live buffer of
an area, aimed at a slab its pool holds, must be EINVAL and leave the slab and the pooled
buffers live. Shared by the host tests (tests/test_pool_ownership.py) and the HIP
double's (backends/hip/tests/test_hip_pool.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from aml_core import Buffer, Pool
from aml_core.area import Area
from aml_core.errors import AMLValueError, ErrorCode

__all__ = ["FREEING", "assert_slab_refused"]


def _with_block(area: Area, slab: Buffer) -> None:
    with slab:
        pass


def _with_block_viewed(area: Area, slab: Buffer) -> None:
    view = memoryview(slab) if slab.host_accessible else None
    try:
        with slab:
            pass
    finally:
        if view is not None:
            view.release()


#: Every entry point that frees a live buffer of an area, given the area and a slab.
FREEING: dict[str, Callable[[Area, Buffer], None]] = {
    "munmap(buffer)": lambda area, slab: area.munmap(slab),
    "munmap(ptr)": lambda area, slab: area.munmap(slab.ptr),
    "munmap(ptr, size)": lambda area, slab: area.munmap(slab.ptr, slab.size),
    "munmap(buffer, size)": lambda area, slab: area.munmap(slab, slab.size),
    "buffer.free()": lambda area, slab: slab.free(),
    "with buffer": _with_block,
    "with viewed buffer": _with_block_viewed,
    "munmap without the fast path": lambda area, slab: area._munmap_slow(slab),
}


def assert_slab_refused(area: Area, pool: Pool, free: Callable[[Area, Buffer], None], *, live: bool) -> None:
    """Aim ``free`` at the slab of a pooled buffer, with the buffer live (``live``) or
    cached: EINVAL, nothing changed, and the pool still serves and frees the block."""
    buf = pool.mmap(1000)
    slab, offset = pool.slab_of(buf)
    assert slab is not None
    assert offset == 0  # the first block of a new slab: the munmap(b.ptr)
    if not live:
        pool.munmap(buf)
    before = area.stats
    with pytest.raises(AMLValueError, match="pool holds") as info:
        free(area, slab)
    assert info.value.code is ErrorCode.EINVAL
    assert area.stats == before
    assert area._is_live(slab)
    assert area._held(slab)
    if live:
        again = buf
    else:
        again = pool.mmap(1000)
        assert again.ptr == slab.ptr  # the cached block, still backed by the slab
    if again.host_accessible:
        memoryview(again)[:4] = b"aml!"
        assert bytes(memoryview(again)[:4]) == b"aml!"
    pool.munmap(again)
    pool.trim()  # the pool gives the slab back: the area frees it
    assert slab.freed
    assert not area._held(slab)
    assert area.stats.live_mappings == before.live_mappings - 1
