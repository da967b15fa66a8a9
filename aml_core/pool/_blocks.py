"""Blocks and slabs: taking a block from the heaps (best fit, split), giving it back
(coalescing with its free neighbours), the exact-size stacks' deferred coalescing, new
slabs from the area and their release (see aml_core.pool, "Layout" and "Limit and
release"). Every method runs under the pool's lock."""

from __future__ import annotations

import warnings

from .. import checks
from ..errors import AMLError, AMLMemoryError, AMLValueError
from ._layout import MiB, PoolBase, _Block, _Heap, _round_up, _Slab

__all__ = ["Blocks"]


class Blocks(PoolBase):
    """The block and slab operations of a pool."""

    def _take(self, n: int) -> _Block:
        """A live block of at least ``n`` bytes (under _plock)."""
        heap = self._small if n <= self._small_max else self._large
        blk = heap.best_fit(n)
        if blk is None and self._cache.fast:
            self._flush()
            blk = heap.best_fit(n)
        if blk is None and self._sfast:
            self._reclaim_streams()
            self._flush()
            blk = heap.best_fit(n)
        if blk is None:
            blk = self._grow(heap, n)
            self._misses += 1
        else:
            self._cache.hits += 1
        heap.remove(blk)
        rest = blk.size - n
        if rest >= heap.split_min:
            slab = blk.slab
            tail = _Block(slab, blk.addr + n, rest, blk, blk.next)
            if blk.next is None:
                slab.last = tail
            else:
                blk.next.prev = tail
            blk.next = tail
            blk.size = n
            heap.insert(tail)
        blk.free = False
        self._cache.blocks += blk.size
        return blk

    def _give(self, blk: _Block) -> None:
        """Return a live block to its heap now (under _plock)."""
        self._cache.blocks -= blk.size
        slab = self._coalesce(blk)
        if self.closed:
            if not self._closing:  # a buffer close() detached while viewed: its slab goes now
                self._auto_release(slab, 0)
        elif self._release_threshold is not None:
            self._auto_release(slab, self._release_threshold)

    def _coalesce(self, blk: _Block) -> _Slab:
        """Mark a block free, merge it with its free neighbours and index the result."""
        if blk.free:  # pragma: no cover - the base class never frees a buffer twice
            raise AMLValueError(f"{blk!r} is already free")
        slab = blk.slab
        heap = slab.heap
        blk.free = True
        prev = blk.prev
        if prev is not None and prev.free:
            heap.remove(prev)
            _absorb(slab, prev, blk)
            blk = prev
        nxt = blk.next
        if nxt is not None and nxt.free:
            heap.remove(nxt)
            _absorb(slab, blk, nxt)
        heap.insert(blk)
        return slab

    def _flush(self) -> None:
        """Coalesce the blocks kept on the exact-size stacks into the heaps (deferred
        coalescing: done when a request finds no fit, and before trimming or stats)."""
        fast = self._cache.fast
        self._cache.fast = {}
        for stack in fast.values():
            for blk in stack:
                self._coalesce(blk)

    def _auto_release(self, slab: _Slab, keep: int) -> None:
        """Release what close() or release_threshold asks for once ``slab`` is wholly
        free; a failure leaves the slab cached and warns (the block was returned already:
        nothing may raise here)."""
        try:
            if self._segment is not None:
                self._trim_segment(keep)
            elif slab.whole_free() and self._reserved - self._cache.blocks > keep:
                self._release_slab(slab)
        except AMLError as exc:
            warnings.warn(f"the pool could not return cached memory: {exc}", ResourceWarning, stacklevel=3)

    # -- slabs ----------------------------------------------------------------------------
    def _slab_size(self, heap: _Heap, n: int) -> int:
        if heap is self._small and n <= self._small_max:
            return max(self._small_slab, n)
        if n < 10 * MiB:
            return max(self._medium_slab, _round_up(n, 2 * MiB))
        return _round_up(n, 2 * MiB)

    def _grow(self, heap: _Heap, n: int) -> _Block:
        """New memory from the area holding a free block of at least ``n`` bytes, indexed
        in ``heap`` (under _plock). Past the limit or on ENOMEM: trim, retry, then ENOMEM."""
        if self._segment is not None:
            return self._grow_segment(n)
        want = self._slab_size(heap, n)
        if self._limit is not None:
            if self._reserved + want > self._limit:
                self._trim_locked(0)
            if self._reserved + want > self._limit:
                want = n  # a slab of just the request may still fit
            if self._reserved + want > self._limit:
                raise AMLMemoryError(
                    f"the pool's limit of {self._limit} bytes is reached: {self._reserved} reserved "
                    f"({self._cache.blocks} in live blocks), {n} more asked"
                )
        if want > checks.MAX_SIZE:
            raise AMLMemoryError(f"{n} bytes rounded up to the pool's granule is more than can be mapped")
        try:
            buf = self._area.mmap(want, self._options)
        except AMLMemoryError:
            if not self._trim_locked(0):
                raise
            buf = self._area.mmap(want, self._options)
        self._area._hold(buf)  # the pool's from now on: the area refuses to free it
        slab = _Slab(
            heap,
            buf,
            buf.ptr,
            want,
            device_ptr=buf.device_ptr,
            host_accessible=buf.host_accessible,
            readonly=buf.readonly,
            dl_device=buf.__dlpack_device__(),
            device=buf.device,
        )
        blk = _Block(slab, buf.ptr, want, None, None)
        slab.first = slab.last = blk
        self._slabs.append(slab)
        self._count_reserved(want)
        heap.insert(blk)
        return blk

    def _count_reserved(self, n: int) -> None:
        self._native_allocs += 1
        self._reserved += n
        if self._reserved > self._peak_reserved:
            self._peak_reserved = self._reserved

    def _release_slab(self, slab: _Slab) -> None:
        """Give a wholly free slab back to the area (under _plock); on failure it stays."""
        blk = slab.first
        assert blk is not None
        assert blk.free
        assert blk.next is None
        assert slab.buf is not None
        area = self._area
        buf = slab.buf
        area._hold(buf, False)  # the area's again: only the pool frees its slabs
        if not area.closed:  # a closed area detached it: it is freed with the Buffer (below)
            try:
                area.munmap(buf)
            except BaseException:
                if area._is_live(buf):
                    area._hold(buf)  # still there: still the pool's
                raise
        slab.buf = None
        slab.heap.remove(blk)
        self._slabs.remove(slab)
        self._reserved -= slab.size
        self._native_frees += 1

    def _trim_locked(self, keep: int) -> int:
        """Release cached memory until at most ``keep`` bytes are cached; returns the
        bytes released. Raises the first failure after trying every slab."""
        if self._sfast:
            self._reclaim_streams()
        if self._cache.fast:
            self._flush()
        if self._segment is not None:
            return self._trim_segment(keep)
        released = 0
        error: AMLError | None = None
        # Largest slabs first: fewest native calls for the bytes.
        for slab in sorted((s for s in self._slabs if s.whole_free()), key=lambda s: -s.size):
            if self._reserved - self._cache.blocks <= keep:
                break
            try:
                self._release_slab(slab)
            except AMLError as exc:
                error = error or exc
                continue
            released += slab.size
        if error is not None:
            raise error
        return released


def _absorb(slab: _Slab, left: _Block, right: _Block) -> None:
    """Coalescing: ``right``, the free block just after ``left`` in ``slab``, joins it."""
    left.size += right.size
    left.next = right.next
    if right.next is None:
        slab.last = left
    else:
        right.next.prev = left
