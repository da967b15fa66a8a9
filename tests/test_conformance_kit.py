"""The conformance kit catches what it promises to catch: a ``_free`` that does
nothing, a ``_free`` never called, and it skips (never fails) the thread test on memory
it cannot touch."""

from __future__ import annotations

from typing import Any

import pytest

from aml_core.buffer import Buffer
from aml_core.host import HostArea
from aml_core.testing import AreaConformance


class CountingArea(HostArea):
    """Host memory with a native live count, as a backend's driver would keep it."""

    def __init__(self) -> None:
        super().__init__()
        self.native_count = 0

    def _allocate(self, size: int, options: Any) -> Buffer:
        buf = super()._allocate(size, options)
        self.native_count += 1
        return buf

    def _free(self, buffer: Buffer) -> None:
        super()._free(buffer)
        self.native_count -= 1


class LeakyArea(CountingArea):
    """A broken backend: its _free does nothing."""

    def _free(self, buffer: Buffer) -> None:
        pass


class SilentArea(HostArea):
    """A broken area whose close() frees behind the area's back, not through _free."""

    def close(self) -> None:
        for buf in self._drain() or []:
            buf._release()
            HostArea._free(self, buf)


class HiddenArea(HostArea):
    """Memory the kit cannot touch: not host-accessible, and no write()/read()."""

    def _allocate(self, size: int, options: Any) -> Buffer:
        buf = super()._allocate(size, options)
        return self._new_buffer(buf.ptr, buf.size, host_accessible=False, native=buf.native)


class Kit(AreaConformance):
    def native_live(self, area: Any) -> int | None:
        return getattr(area, "native_count", None)


def test_leak_check_passes_a_real_free() -> None:
    area = CountingArea()
    Kit().test_free_is_called_and_frees(area)
    assert area.native_count == 0


def test_leak_check_catches_a_free_that_does_nothing() -> None:
    area = LeakyArea()
    with pytest.raises(AssertionError, match="_free did not release the native memory"):
        Kit().test_free_is_called_and_frees(area)
    assert area.native_count == Kit.leak_rounds  # what the broken backend leaked


def test_leak_check_catches_a_free_never_called() -> None:
    area = SilentArea()
    with pytest.raises(AssertionError):
        Kit().test_free_is_called_and_frees(area)


def test_enomem_on_host() -> None:
    with HostArea() as area:
        Kit().test_enomem(area)


def test_threads_skip_on_memory_the_kit_cannot_touch() -> None:
    with HiddenArea() as area, pytest.raises(pytest.skip.Exception, match="not host-accessible"):
        Kit().test_threads(area)
    assert area.stats.live_mappings == 0
