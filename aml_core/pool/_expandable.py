"""The expandable segment (see aml_core.pool, "Expandable pools"): one reservation of
the area's :class:`~aml_core.protocols.GrowableMemory`, mapped chunk by chunk at its end as
the pool grows and unmapped from the end when it trims."""

from __future__ import annotations

from .. import checks
from ..area import Area
from ..errors import AMLMemoryError, AMLNotSupported
from ..protocols import GrowableMemory
from ._layout import MiB, PoolBase, _Block, _Heap, _round_up, _Slab

__all__ = ["Expandable"]


class Expandable(PoolBase):
    """The expandable segment of a pool."""

    @property
    def expandable(self) -> bool:
        return self._segment is not None

    def _init_expandable(self, area: Area, capacity: int | None) -> None:
        if not isinstance(area, GrowableMemory):
            raise AMLNotSupported(
                f"an expandable pool maps physical memory on demand: it needs a VirtualMemory "
                f"area, not {type(area).__name__}"
            )
        g = area.granularity()
        if capacity is None:
            capacity = self._limit if self._limit is not None else 1 << 40
        cap = _round_up(checks.size(capacity, "capacity"), g)
        self._vm = area
        self._reservation = area.reserve(cap)
        seg = _Slab(
            self._large,
            None,
            self._reservation.ptr,
            0,
            device_ptr=self._reservation.ptr,
            host_accessible=False,
            readonly=False,
            dl_device=area.dlpack_device(),
            device=area.device,
        )
        self._segment = seg
        # One heap: every size comes from the one segment, split down to the granule.
        self._small = self._large = _Heap(self._granule)
        seg.heap = self._large
        self._small_slab = self._medium_slab = _round_up(2 * MiB, g)

    def _grow_segment(self, n: int) -> _Block:
        """Map chunks at the end of the segment until its free tail holds ``n`` bytes."""
        seg = self._segment
        vm = self._vm
        res = self._reservation
        assert seg is not None
        assert vm is not None
        assert res is not None
        tail = seg.last if seg.last is not None and seg.last.free else None
        have = tail.size if tail is not None else 0
        g = vm.granularity()
        need = _round_up(n - have, g)
        chunk = max(need, self._small_slab)
        if self._limit is not None:
            if self._reserved + chunk > self._limit:
                chunk = need
            if self._reserved + chunk > self._limit:
                self._trim_segment(0)
                tail = seg.last if seg.last is not None and seg.last.free else None
                have = tail.size if tail is not None else 0
                chunk = _round_up(n - have, g)
            if self._reserved + chunk > self._limit:
                raise AMLMemoryError(
                    f"the pool's limit of {self._limit} bytes is reached: {self._reserved} mapped "
                    f"({self._cache.blocks} in live blocks), {n} more asked"
                )
        end = seg.ptr + seg.size
        if end + chunk > res.ptr + res.size:
            raise AMLMemoryError(
                f"the expandable pool's reservation of {res.size} bytes is full "
                f"({seg.size} mapped, {chunk} more needed); make the pool with a larger capacity"
            )
        vm.commit(end, chunk)
        seg.size += chunk
        seg.chunks.append((end, chunk))
        self._count_reserved(chunk)
        if tail is not None:
            seg.heap.remove(tail)
            tail.size += chunk
        else:
            tail = _Block(seg, end, chunk, seg.last, None)
            if seg.last is None:
                seg.first = tail
            else:
                seg.last.next = tail
            seg.last = tail
        seg.heap.insert(tail)
        return tail

    def _trim_segment(self, keep: int) -> int:
        """Unmap chunks at the segment's end that lie wholly in its free tail."""
        seg = self._segment
        vm = self._vm
        assert seg is not None
        assert vm is not None
        released = 0
        while seg.chunks and self._reserved - self._cache.blocks > keep:
            tail = seg.last
            ptr, size = seg.chunks[-1]
            if tail is None or not tail.free or tail.addr > ptr:
                break
            if not self._area.closed:
                vm.unmap(ptr, size)
            seg.chunks.pop()
            seg.heap.remove(tail)
            tail.size -= size
            if tail.size:
                seg.heap.insert(tail)
            else:
                seg.last = tail.prev
                if tail.prev is None:
                    seg.first = None
                else:
                    tail.prev.next = None
            seg.size -= size
            self._reserved -= size
            self._native_frees += 1
            released += size
        return released
