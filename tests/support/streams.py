"""A host area that stands in for a GPU area in the pool's stream tests: its stream
operations (:class:`~aml_core.protocols.StreamOrdering`) are recorded, and each of them,
the slab allocation and the slab release can be made to fail on demand (the native
calls the allocator kernel makes through the area, on the host)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from aml_core import Buffer
from aml_core.errors import AMLFailure, AMLMemoryError
from aml_core.host import HostArea

__all__ = ["S1", "S2", "S3", "ForeignStream", "StreamRecorder", "StreamedHost", "host"]

#: Stream handles (the recorder accepts any int: it runs nothing).
S1, S2, S3 = 0x1000, 0x2000, 0x3000

#: The stream operations a pool calls.
STREAM_OPS = ("event_create", "event_destroy", "event_record", "stream_wait_event", "stream_synchronize")


class StreamRecorder:
    """The stream operations a pool uses (aml_core.protocols.StreamOrdering), recorded.

    ``fail[op] = n``: the next ``n`` calls of ``op`` raise :class:`AMLFailure` (and are
    recorded as ``(op + " failed", ...)``); ``fail_destroy`` fails every event destroy;
    ``dead``: streams whose synchronize fails (a destroyed stream) until removed."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.events = 0
        self.fail_destroy = False
        self.fail: Counter[str] = Counter()
        self.dead: set[int] = set()

    def _call(self, op: str, *args: Any) -> None:
        if self.fail[op] > 0:
            self.fail[op] -= 1
            self.calls.append((op + " failed", *args))
            raise AMLFailure(f"{op} failed (injected)")
        self.calls.append((op, *args))

    def event_create(self) -> int:
        self._call("event_create")
        self.events += 1
        return 0xE0 + self.events

    def event_destroy(self, event: int) -> None:
        if self.fail_destroy:
            raise AMLFailure("event destroy failed (injected)")
        self._call("event_destroy", event)
        self.events -= 1

    def event_record(self, event: int, stream: int) -> None:
        self._call("event_record", event, stream)

    def stream_wait_event(self, stream: int, event: int) -> None:
        self._call("stream_wait_event", stream, event)

    def stream_synchronize(self, stream: int) -> None:
        if stream in self.dead:
            self.calls.append(("stream_synchronize failed", stream))
            raise AMLFailure(f"stream 0x{stream:x} was destroyed (injected)")
        self._call("stream_synchronize", stream)

    def ops(self) -> list[str]:
        """The names of the calls so far, in order."""
        return [c[0] for c in self.calls]


class StreamedHost(HostArea):
    """A host area with a runtime: stands in for a GPU area in these tests.

    ``allocs``/``frees`` count the slab allocations and frees that reached the area;
    ``fail_allocs``/``fail_frees``: how many of the next ones fail (ENOMEM, a native
    failure); ``nomem_for``: sizes whose allocation always fails with ENOMEM."""

    def __init__(self) -> None:
        super().__init__()
        self.runtime = StreamRecorder()
        self.allocs = 0
        self.frees = 0
        self.fail_allocs = 0
        self.fail_frees = 0
        self.nomem_for: set[int] = set()

    def stream_ordering(self) -> StreamRecorder:
        """A StreamOrderedArea, as a GPU area is."""
        return self.runtime

    def _allocate(self, size: int, options: Any) -> Buffer:
        if self.fail_allocs > 0 or size in self.nomem_for:
            self.fail_allocs = max(self.fail_allocs - 1, 0)
            raise AMLMemoryError(f"no memory for {size} bytes (injected)")
        self.allocs += 1
        return super()._allocate(size, options)

    def _free(self, buffer: Buffer) -> None:
        if self.fail_frees > 0:
            self.fail_frees -= 1
            raise AMLFailure(f"the free of 0x{buffer.ptr:x} failed (injected)")
        super()._free(buffer)
        self.frees += 1


class ForeignStream:
    """A foreign stream object (``__cuda_stream__``, as cuda.core streams have)."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


@pytest.fixture
def host() -> Iterator[StreamedHost]:
    """A :class:`StreamedHost`, closed after the test, which must leave no mapping live
    (a pytest plugin of tests/conftest.py: the pool and kernel tests take it; a module
    with a ``host`` fixture of its own, of another area, overrides it)."""
    area = StreamedHost()
    yield area
    area.close()
    assert area.stats.live_mappings == 0
