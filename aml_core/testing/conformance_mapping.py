"""The conformance checks of mapping: round trips, stats, the leak check, ENOMEM, bad
input, misuse of munmap, closing and threads (a part of
:class:`~aml_core.testing.AreaConformance`)."""

from __future__ import annotations

import itertools
import threading
from typing import ClassVar

import pytest

from ..area import Area
from ..buffer import Buffer
from ..errors import (
    AMLDomainError,
    AMLError,
    AMLMemoryError,
    AMLTypeError,
    AMLValueError,
    ErrorCode,
)
from ..specs import MAX_SIZE, AreaStats, Capability
from .conformance_base import AreaKit, can_access, pattern

__all__ = ["MappingChecks"]


def _is_freed(buf: Buffer) -> bool:
    return buf.freed


class MappingChecks(AreaKit):
    """What every area's mmap, munmap and close must do. Needs a fixture ``area``."""

    #: Sizes mapped by the round-trip tests.
    sizes: ClassVar[tuple[int, ...]] = (1, 4095, 4096, 65537, 1 << 20)
    #: A size the system cannot provide (ENOMEM expected), or None to skip that test.
    enomem_size: ClassVar[int | None] = MAX_SIZE
    #: Mappings made and freed by the leak check.
    leak_rounds: ClassVar[int] = 64

    # -- mapping ---------------------------------------------------------------------
    def test_mmap_munmap_round_trip(self, area: Area) -> None:
        for size in self.sizes:
            buf = area.mmap(size)
            assert buf.size == size
            assert buf.ptr != 0
            assert buf.area is area
            assert buf.kind is area.kind
            assert not buf.freed
            data = pattern(size)
            self.write(area, buf, data)
            assert self.read(area, buf, size) == data
            area.munmap(buf)
            assert buf.freed

    def test_buffers_do_not_overlap(self, area: Area) -> None:
        bufs = [area.mmap(4096 + i) for i in range(16)]
        spans = sorted((b.ptr, b.ptr + b.size) for b in bufs)
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start
        for i, buf in enumerate(bufs):
            self.write(area, buf, bytes([i]) * 64)
        for i, buf in enumerate(bufs):
            assert self.read(area, buf, 64) == bytes([i]) * 64
        for buf in bufs:
            area.munmap(buf)

    def test_munmap_by_pointer_and_size(self, area: Area) -> None:
        buf = area.mmap(8192)
        area.munmap(buf.ptr, 8192)
        assert buf.freed

    def test_stats(self, area: Area) -> None:
        before = area.stats
        a = area.mmap(1000)
        b = area.mmap(3000)
        mid = area.stats
        assert mid.bytes_in_use == before.bytes_in_use + 4000
        assert mid.live_mappings == before.live_mappings + 2
        assert mid.total_maps == before.total_maps + 2
        assert mid.peak_bytes >= mid.bytes_in_use
        area.munmap(a)
        area.munmap(b)
        after = area.stats
        assert after.bytes_in_use == before.bytes_in_use
        assert after.total_unmaps == before.total_unmaps + 2
        assert after.peak_bytes >= mid.bytes_in_use
        assert isinstance(after, AreaStats)

    def test_free_is_called_and_frees(self, area: Area) -> None:
        """Catch a ``_free`` that is never reached or does nothing: every munmap and
        close() calls it once per mapping, the stats come back to where they were and,
        with :meth:`native_live`, the backend's own count does too. An area with a
        compiled allocator installed (``AreaBase._set_native``) frees its fast-path
        buffers without ``_free``: there the backend's native count is the witness."""
        compiled = getattr(area, "_native_allocator", None) is not None
        if compiled and self.native_live(area) is None:
            pytest.skip(
                "a compiled allocator frees without _free, and the backend gives no native live count"
            )
        # A pool's compiled kernel hands blocks back without _free: check _free itself with
        # the cache set aside, and put it back after.
        cache = getattr(area, "_pool_kernel", None)
        if cache is not None:
            area._set_pool(None)
        freed: list[int] = []
        original = area._free

        def counting_free(buffer: Buffer) -> None:
            freed.append(buffer.ptr)
            original(buffer)

        area._free = counting_free  # type: ignore[method-assign]
        try:
            before, native_before = area.stats, self.native_live(area)
            bufs = [area.mmap(4096 + i) for i in range(self.leak_rounds)]
            if native_before is not None:
                assert self.native_live(area) == native_before + self.leak_rounds
            for buf in bufs[: self.leak_rounds // 2]:
                area.munmap(buf)
            if compiled:
                assert native_before is not None  # checked above: compiled areas need the count
                assert self.native_live(area) == native_before + self.leak_rounds - self.leak_rounds // 2
            else:
                assert sorted(freed) == sorted(b.ptr for b in bufs[: self.leak_rounds // 2])
            rest = bufs[self.leak_rounds // 2 :]
            area.close()
            if not compiled:
                assert len(freed) == self.leak_rounds
            assert all(b.freed for b in rest)
            after = area.stats
            assert after.bytes_in_use == before.bytes_in_use
            assert after.live_mappings == before.live_mappings
            assert after.total_unmaps - before.total_unmaps == self.leak_rounds
            if native_before is not None:
                assert self.native_live(area) == native_before, "_free did not release the native memory"
        finally:
            del area._free
            if cache is not None and not area.closed:
                area._set_pool(cache)

    def test_enomem(self, area: Area) -> None:
        """A size the system cannot provide is ENOMEM (:class:`AMLMemoryError`, also a
        MemoryError), and nothing is tracked."""
        if self.enomem_size is None:
            pytest.skip("this backend sets no enomem_size")
        before = area.stats
        with pytest.raises(AMLMemoryError) as info:
            area.mmap(self.enomem_size)
        assert info.value.code is ErrorCode.ENOMEM
        assert isinstance(info.value, MemoryError)
        assert area.stats == before

    # -- bad input -------------------------------------------------------------------------
    @pytest.mark.parametrize(
        ("size", "error", "builtin"),
        [
            (0, AMLValueError, ValueError),
            (-1, AMLValueError, ValueError),
            (1.5, AMLTypeError, TypeError),
            ("4096", AMLTypeError, TypeError),
            (True, AMLTypeError, TypeError),
            (None, AMLTypeError, TypeError),
            (MAX_SIZE + 1, AMLDomainError, ValueError),
            (1 << 64, AMLDomainError, ValueError),
        ],
    )
    def test_bad_size(
        self, area: Area, size: object, error: type[AMLError], builtin: type[Exception]
    ) -> None:
        with pytest.raises(error) as info:
            area.mmap(size)  # type: ignore[arg-type]
        assert isinstance(info.value, builtin)
        assert area.stats.live_mappings == 0

    def test_bad_options(self, area: Area) -> None:
        with pytest.raises(AMLTypeError):
            area.mmap(4096, options=object())
        with pytest.raises(AMLTypeError):
            area.mmap(4096, options={"no_such_option_anywhere": 1})

    def test_munmap_foreign_pointer(self, area: Area) -> None:
        buf = area.mmap(4096)
        with pytest.raises(AMLValueError) as info:
            area.munmap(buf.ptr + (1 << 40))
        assert info.value.code is ErrorCode.EINVAL
        area.munmap(buf)

    def test_munmap_offset_pointer(self, area: Area) -> None:
        buf = area.mmap(8192)
        with pytest.raises(AMLValueError, match="inside the mapping"):
            area.munmap(buf.ptr + 16)
        area.munmap(buf)

    def test_double_munmap(self, area: Area) -> None:
        buf = area.mmap(4096)
        area.munmap(buf)
        with pytest.raises(AMLValueError):
            area.munmap(buf)
        with pytest.raises(AMLValueError):
            area.munmap(buf.ptr)

    def test_munmap_wrong_size(self, area: Area) -> None:
        buf = area.mmap(4096)
        with pytest.raises(AMLValueError, match="size"):
            area.munmap(buf, 8192)
        area.munmap(buf, 4096)

    def test_munmap_wrong_type(self, area: Area) -> None:
        with pytest.raises(AMLTypeError):
            area.munmap("0x1000")  # type: ignore[arg-type]
        with pytest.raises(AMLTypeError):
            area.munmap(None)  # type: ignore[arg-type]

    def test_freed_buffer_cannot_be_viewed(self, area: Area) -> None:
        buf = area.mmap(4096)
        area.munmap(buf)
        with pytest.raises(BufferError):
            memoryview(buf)
        if area.capabilities & Capability.DLPACK:
            with pytest.raises(BufferError):
                buf.__dlpack__()

    # -- lifetime ---------------------------------------------------------------------------
    def test_closed_area_raises(self, area: Area) -> None:
        buf = area.mmap(4096)
        area.close()
        assert area.closed
        assert buf.freed
        with pytest.raises(AMLValueError, match="closed"):
            area.mmap(4096)
        with pytest.raises(AMLValueError):
            area.munmap(buf)
        area.close()  # idempotent

    def test_close_frees_everything(self, area: Area) -> None:
        bufs = [area.mmap(4096) for _ in range(5)]
        area.close()
        assert all(b.freed for b in bufs)
        assert area.stats.live_mappings == 0
        assert area.stats.bytes_in_use == 0

    def test_context_managers(self, area: Area) -> None:
        with area.mmap(4096) as buf:
            assert buf.exports == 0
        assert _is_freed(buf)
        with area as same:
            assert same is area
        assert area.closed

    def test_threads(self, area: Area) -> None:
        probe = area.mmap(4096)
        accessible = can_access(area, probe)
        area.munmap(probe)
        if not accessible:  # write()/read() would skip inside a worker thread: skip here
            pytest.skip("the area's memory is not host-accessible and the area has no write()/read()")
        errors: list[BaseException] = []
        start = area.stats

        def work(worker: int) -> None:
            try:
                for i in range(self.rounds):
                    buf = area.mmap(4096 + worker * 64 + i)
                    payload = bytes([worker]) * 32
                    self.write(area, buf, payload)
                    assert self.read(area, buf, 32) == payload
                    area.munmap(buf)
            except BaseException as exc:  # collected for the main thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(self.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        end = area.stats
        assert end.live_mappings == start.live_mappings
        assert end.total_maps - start.total_maps == self.threads * self.rounds
        assert end.total_unmaps - start.total_unmaps == self.threads * self.rounds
