"""The conformance checks of garbage collection: buffers dropped without munmap, in
cycles, still viewed, from threads, with a failing free (a part of
:class:`~aml_core.testing.AreaConformance`; ``aml_core.area``, "Garbage collection")."""

from __future__ import annotations

import weakref
from typing import Any

import pytest

from ..area import Area
from ..buffer import Buffer
from ..errors import (
    AMLValueError,
)
from ..specs import AreaStats, Capability
from .conformance_base import AreaKit, Cycle, can_access, pattern
from .lifetime import catch_unraisable, collect, collect_often, drop_hammer

__all__ = ["LifetimeChecks"]


class LifetimeChecks(AreaKit):
    """Buffers freed by the garbage collector, and nothing lost. Needs a fixture ``area``."""

    def _assert_back(self, area: Area, before: AreaStats, native_before: int | None, freed: int) -> None:
        """The stats (and the backend's native count, if it gives one) are back to
        ``before``, with ``freed`` more unmaps."""
        after = area.stats
        assert after.live_mappings == before.live_mappings, after
        assert after.bytes_in_use == before.bytes_in_use, after
        assert after.total_unmaps - before.total_unmaps == freed, after
        if native_before is not None:
            assert self.native_live(area) == native_before, "a dropped buffer's native memory was not freed"

    def test_dropped_buffer_is_freed(self, area: Area) -> None:
        """A buffer dropped without munmap is freed when it is garbage collected (at once,
        when nothing else references it), through the area's munmap path."""
        before, native_before = area.stats, self.native_live(area)
        buf = area.mmap(4096)
        if can_access(area, buf):
            self.write(area, buf, pattern(64))
        if native_before is not None:
            assert self.native_live(area) == native_before + 1
        ref = weakref.ref(buf)
        del buf
        collect()
        assert ref() is None
        self._assert_back(area, before, native_before, 1)
        assert area.buffers() == ()

    def test_dropped_buffer_in_a_cycle_is_freed(self, area: Area) -> None:
        """A buffer held only by a reference cycle is freed by the cyclic collector."""
        before, native_before = area.stats, self.native_live(area)
        Cycle(area.mmap(4096), area.mmap(100))
        assert area.stats.live_mappings == before.live_mappings + 2
        collect()
        self._assert_back(area, before, native_before, 2)

    def test_views_keep_a_dropped_buffer(self, area: Area) -> None:
        """A buffer still viewed (a memoryview, a DLPack consumer) is not freed when its
        Buffer object is dropped, but once its last view is gone."""
        caps = area.capabilities
        if not caps & (Capability.BUFFER_PROTOCOL | Capability.DLPACK):
            pytest.skip("the area declares neither BUFFER_PROTOCOL nor DLPACK")
        before, native_before = area.stats, self.native_live(area)
        buf = area.mmap(4096)
        view: Any = memoryview(buf) if caps & Capability.BUFFER_PROTOCOL else buf.__dlpack__()
        del buf
        collect()
        assert area.stats.live_mappings == before.live_mappings + 1
        if isinstance(view, memoryview):
            view[:4] = b"kept"  # still mapped
            view.release()
        del view
        collect()
        self._assert_back(area, before, native_before, 1)

    def test_collector_inside_area_operations(self, area: Area) -> None:
        """With the collector running at every allocation, finalizers run inside mmap,
        munmap and the area's own code: their frees wait for it, and nothing is lost."""
        before, native_before = area.stats, self.native_live(area)
        with collect_often(1):
            for i in range(30):
                buf = area.mmap(1000 + i)
                if i % 3 == 0:
                    Cycle(buf)
                elif i % 3 == 1:
                    area.munmap(buf)
                del buf
        collect()
        self._assert_back(area, before, native_before, 30)

    def test_dropped_buffers_from_threads(self, area: Area) -> None:
        """Many threads dropping buffers, freed in whatever thread the collector runs."""
        before, native_before = area.stats, self.native_live(area)
        drop_hammer(area, threads=self.threads, rounds=self.rounds)
        self._assert_back(area, before, native_before, self.threads * self.rounds)

    def test_failed_free_of_a_dropped_buffer_is_kept(self, area: Area) -> None:
        """A GC-driven free that fails is reported (sys.unraisablehook) and the mapping
        stays tracked, held by the area, until close() frees it."""
        if getattr(area, "_native_allocator", None) is not None:
            pytest.skip(
                "a compiled allocator frees without _free: the backend's tests inject its native error"
            )
        # A pool's compiled kernel hands blocks back without _free: set it aside.
        cache = getattr(area, "_pool_kernel", None)
        if cache is not None:
            area._set_pool(None)
        before, native_before = area.stats, self.native_live(area)
        original = area._free

        def failing_free(buffer: Buffer) -> None:
            area._free = original  # type: ignore[method-assign]  # once
            raise AMLValueError("the native free failed (injected by the conformance kit)")

        buf = area.mmap(4096)
        ptr = buf.ptr
        area._free = failing_free  # type: ignore[method-assign]
        try:
            with catch_unraisable() as caught:
                del buf
                collect()
        finally:
            if "_free" in vars(area):
                del area._free
        assert [type(r.exc) for r in caught] == [AMLValueError], caught
        assert "close() retries" in caught[0].text
        del caught
        collect()
        assert [b.ptr for b in area.buffers()] == [ptr], "the mapping whose free failed is not tracked"
        assert area.stats.live_mappings == before.live_mappings + 1
        area.close()
        assert area.stats.live_mappings == 0
        if native_before is not None:
            assert self.native_live(area) == native_before
        if cache is not None and not area.closed:
            area._set_pool(cache)
