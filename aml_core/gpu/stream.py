"""A GPU runtime's stream operations as the core's :class:`~aml_core.protocols.StreamOrdering`
(:func:`runtime_stream_ordering`). The stream object and the handle conversion live in
the core (:mod:`aml_core.stream`); ``Stream`` and ``as_stream_handle`` are re-exported
here, where users import them today."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..stream import NativeStreams, Stream, as_stream_handle
from .runtime import Group

if TYPE_CHECKING:
    from ..protocols import StreamOrdering
    from .runtime import Runtime, StreamOps, StreamOrderedOps

__all__ = ["Stream", "as_stream_handle", "runtime_stream_ordering"]


def runtime_stream_ordering(runtime: Runtime) -> StreamOrdering:
    """A runtime's STREAMS and STREAM_ORDERED groups as the core's
    :class:`~aml_core.protocols.StreamOrdering` (what a GPU area's ``stream_ordering()``
    gives a pool); :class:`~aml_core.errors.AMLNotSupported` with the reason when the
    runtime lacks either."""
    return _RuntimeStreamOrdering(runtime.require(Group.STREAMS), runtime.require(Group.STREAM_ORDERED))


class _RuntimeStreamOrdering:
    __slots__ = ("_ordered", "_streams")

    def __init__(self, streams: StreamOps, ordered: StreamOrderedOps) -> None:
        self._streams = streams
        self._ordered = ordered

    def stream_synchronize(self, stream: int) -> None:
        self._streams.stream_synchronize(stream)

    def event_create(self) -> int:
        return self._ordered.event_create()

    def event_destroy(self, event: int) -> None:
        self._ordered.event_destroy(event)

    def event_record(self, event: int, stream: int) -> None:
        self._ordered.event_record(event, stream)

    def stream_wait_event(self, stream: int, event: int) -> None:
        self._ordered.stream_wait_event(stream, event)

    def event_query(self, event: int) -> bool:
        return self._ordered.event_query(event)

    def native_streams(self) -> NativeStreams | None:
        """The runtime's stream calls as C function pointers, where it has them (see
        :func:`aml_core.stream.native_streams`)."""
        own = getattr(self._ordered, "native_streams", None)
        table: NativeStreams | None = own() if own is not None else None
        return table
