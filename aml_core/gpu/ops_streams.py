"""The stream groups of a GPU runtime (:mod:`aml_core.gpu.runtime`): ``STREAMS``
(create, destroy, synchronize) and ``STREAM_ORDERED`` (allocate and free in stream order,
events). Each public method checks its arguments and calls the backend's ``_``-method.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from .. import checks

if TYPE_CHECKING:
    from ..stream import NativeStreams
    from .runtime import RuntimeTraits

__all__ = ["StreamOps", "StreamOrderedOps"]


class StreamOps(abc.ABC):
    """``STREAMS``: create, synchronize and destroy streams."""

    traits: RuntimeTraits

    def stream_create(self, non_blocking: bool) -> int:
        return self._stream_create(bool(non_blocking))

    def stream_destroy(self, stream: int) -> None:
        self._stream_destroy(checks.pointer(stream, "stream"))

    def stream_synchronize(self, stream: int) -> None:
        self._stream_synchronize(checks.pointer(stream, "stream", null=True))

    @abc.abstractmethod
    def _stream_create(self, non_blocking: bool) -> int: ...
    @abc.abstractmethod
    def _stream_destroy(self, stream: int) -> None: ...
    @abc.abstractmethod
    def _stream_synchronize(self, stream: int) -> None: ...


class StreamOrderedOps(abc.ABC):
    """``STREAM_ORDERED``: device memory allocated and freed in stream order
    (``cudaMallocAsync``/``cudaFreeAsync``, ``hipMallocAsync``/``hipFreeAsync``) from
    the device's default memory pool, and the events that order work across streams
    (a block freed on one stream is reused on another only after an event)."""

    traits: RuntimeTraits

    def malloc_async(self, size: int, stream: int) -> int:
        return self._malloc_async(checks.size(size), checks.pointer(stream, "stream", null=True))

    def free_async(self, ptr: int, stream: int) -> None:
        self._free_async(checks.pointer(ptr), checks.pointer(stream, "stream", null=True))

    def event_create(self) -> int:
        """An event without timing (the cheap kind), for ordering only."""
        return self._event_create()

    def event_destroy(self, event: int) -> None:
        self._event_destroy(checks.pointer(event, "event"))

    def event_record(self, event: int, stream: int) -> None:
        self._event_record(checks.pointer(event, "event"), checks.pointer(stream, "stream", null=True))

    def event_query(self, event: int) -> bool:
        """True once the work recorded before the event is done."""
        return self._event_query(checks.pointer(event, "event"))

    def event_synchronize(self, event: int) -> None:
        self._event_synchronize(checks.pointer(event, "event"))

    def stream_wait_event(self, stream: int, event: int) -> None:
        """Make later work on ``stream`` wait for ``event`` (without blocking the host)."""
        self._stream_wait_event(checks.pointer(stream, "stream", null=True), checks.pointer(event, "event"))

    def native_streams(self) -> NativeStreams | None:
        """The stream and event calls as C function pointers (:class:`~aml_core.stream.NativeStreams`)
        for a pool's kernel, or None: the kernel calls these Python methods through
        trampolines (and a framework hook takes the GIL for a hand-over)."""
        return None

    @abc.abstractmethod
    def _malloc_async(self, size: int, stream: int) -> int: ...
    @abc.abstractmethod
    def _free_async(self, ptr: int, stream: int) -> None: ...
    @abc.abstractmethod
    def _event_create(self) -> int: ...
    @abc.abstractmethod
    def _event_destroy(self, event: int) -> None: ...
    @abc.abstractmethod
    def _event_record(self, event: int, stream: int) -> None: ...
    @abc.abstractmethod
    def _event_query(self, event: int) -> bool: ...
    @abc.abstractmethod
    def _event_synchronize(self, event: int) -> None: ...
    @abc.abstractmethod
    def _stream_wait_event(self, stream: int, event: int) -> None: ...
