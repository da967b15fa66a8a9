"""Fault paths of the shared bookkeeping (issue 9): when a native free fails, the error is
raised and the mapping stays tracked, so that a retry or close() frees it; nothing is
marked freed that was not; a tampered buffer cannot free the wrong memory.

=========================================================  ================================
fault                                                      what aml does
=========================================================  ================================
a native free fails in munmap                              the error; the buffer is live
                                                           again, munmap again frees it
a native free fails in close()                             the error (the first, the others
                                                           as notes); the mapping stays live
                                                           in the closed area; close() again
                                                           frees it
a munmap whose free fails while another thread closes      the buffer is restored into the
                                                           closed area; close() again frees it
an allocation that returns NULL                            AMLFailure, nothing tracked
an allocation that returns an address already live        AMLFailure, the live buffer kept
a host buffer's ``native`` record tampered with            refused (read-only), munmap frees
                                                           the real mapping
=========================================================  ================================
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from aml_core import Buffer
from aml_core.errors import AMLFailure, AMLValueError
from aml_core.host import HostArea

from .fake import FaultyArea


def test_munmap_free_failure_then_retry() -> None:
    area = FaultyArea()
    buf = area.mmap(100)
    area.fail_frees = 1
    with pytest.raises(AMLFailure):
        area.munmap(buf)
    assert not buf.freed
    assert area.buffers() == (buf,)
    area.munmap(buf)
    assert buf.freed
    assert area.native_live == {}
    assert not area.bad


def test_close_free_failures_are_all_retried() -> None:
    area = FaultyArea()
    bufs = [area.mmap(10 * (i + 1)) for i in range(4)]
    area.fail_frees = 2
    with pytest.raises(AMLFailure) as info:
        area.close()
    assert any("failed too" in note for note in info.value.__notes__)
    assert area.closed
    assert area.stats.live_mappings == 2
    assert sorted(b.freed for b in bufs) == [False, False, True, True]
    with pytest.raises(AMLValueError, match="closed"):
        area.mmap(10)
    area.close()
    assert all(b.freed for b in bufs)
    assert area.stats.live_mappings == 0
    assert area.stats.bytes_in_use == 0
    assert area.native_live == {}
    assert not area.bad
    area.close()  # idempotent once everything is freed


def test_munmap_failure_racing_close() -> None:
    """munmap detaches, its native free fails while another thread closes the area; the
    buffer is restored into the closed area and close() again frees it."""
    area = FaultyArea()
    buf, other = area.mmap(100), area.mmap(200)

    def close_from_another_thread() -> None:
        t = threading.Thread(target=area.close)
        t.start()
        t.join()

    area.fail_frees = 1
    area.during_failure = close_from_another_thread
    with pytest.raises(AMLFailure):
        area.munmap(buf)
    assert area.closed
    assert other.freed
    assert not buf.freed
    assert area.stats.live_mappings == 1
    area.close()
    assert buf.freed
    assert area.stats.live_mappings == 0
    assert area.native_live == {}
    assert not area.bad


class _NullArea(FaultyArea):
    def _allocate(self, size: int, options: Any) -> Buffer:
        return self._new_buffer(0, size, host_accessible=False, native=("fake", 0))


def test_null_allocation_is_failure() -> None:
    area = _NullArea()
    with pytest.raises(AMLFailure, match="returned NULL"):
        area.mmap(10)
    assert area.stats.live_mappings == 0
    assert area.stats.total_maps == 0
    area.close()


def test_duplicate_allocation_is_failure() -> None:
    area = FaultyArea()
    live = area.mmap(10)
    area._ptrs = iter([live.ptr])  # type: ignore[assignment]  # the "driver" hands it out again
    with pytest.raises(AMLFailure, match="already live"):
        area.mmap(10)
    assert area.buffers() == (live,)
    assert not live.freed
    area.close()
    assert area.native_live == {}
    assert not area.bad


@pytest.mark.parametrize("field", ["native", "size", "ptr", "device_ptr"])
def test_host_buffer_records_are_read_only(field: str) -> None:
    with HostArea() as area:
        buf = area.mmap(8192)
        with pytest.raises(AttributeError):
            setattr(buf, field, 1 << 40)
        with pytest.raises((AttributeError, TypeError)):
            object.__setattr__(buf, field, 1 << 40)
        area.munmap(buf)  # frees the real mapping: the record was not changed
        assert buf.freed


def test_failed_free_of_a_detached_mapping_is_kept_for_close() -> None:
    """close() detaches a viewed buffer; its free, when the last view goes, fails: the
    failure is reported (sys.unraisablehook, as any error in a finalizer), the mapping is
    tracked again by the closed area and close() again frees it."""
    import gc
    import warnings

    from aml_core.testing.lifetime import catch_unraisable

    area = HostArea()
    buf = area.mmap(4096)
    view = memoryview(buf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        area.close()
    assert area.stats.live_mappings == 0
    real_free = area._free
    calls: list[int] = []

    def failing_free(b: Buffer) -> None:
        calls.append(b.ptr)
        raise AMLFailure("the native free failed")

    area._free = failing_free  # type: ignore[method-assign]
    with catch_unraisable() as caught:
        view.release()
        del buf, view
        gc.collect()
    assert calls
    assert [type(r.exc) for r in caught] == [AMLFailure]
    assert "close() retries" in caught[0].text
    assert area.stats.live_mappings == 1
    area._free = real_free  # type: ignore[method-assign]
    area.close()
    assert area.stats.live_mappings == 0


def test_close_error_is_an_aml_error() -> None:
    area = FaultyArea()
    buf = area.mmap(10)  # kept: a dropped buffer is freed at once
    area.fail_frees = 1
    with pytest.raises(AMLFailure, match="the native free failed"):  # the free's own error
        area.close()
    area.close()
    assert buf.freed
