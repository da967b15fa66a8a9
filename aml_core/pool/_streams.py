"""Stream-ordered blocks (see aml_core.pool, "Streams"): a block freed on a stream is
reused at once on that stream, handed to another through an event, and returned to host
order after its stream is synchronized. The stream operations come from the area
(:class:`~aml_core.protocols.StreamOrderedArea`)."""

from __future__ import annotations

from typing import Any

from ..buffer import Buffer
from ..errors import AMLNotSupported
from ..protocols import StreamOrderedArea, StreamOrdering
from ._layout import PoolBase, _Block

__all__ = ["Streams"]


class Streams(PoolBase):
    """The stream operations of a pool."""

    # Streams go through the options (``mmap(n, {"stream": s})``) and munmap_on, not
    # keywords of overriding mmap/munmap: those would add a Python frame to every call.
    def munmap_on(self, buffer: Buffer | int, stream: Any, size: int | None = None) -> None:
        """Free a buffer in ``stream``'s order (GPU pools): its block is reused at once
        by requests on ``stream``, elsewhere after an event (see the module doc). A plain
        munmap frees a buffer on the stream it was allocated on, if any."""
        handle = self._stream_handle(stream)
        # Inside the area: a GC-driven free run meanwhile must not take this stream.
        with self._inside_area:
            self._tls.stream = handle
            try:
                self._munmap_slow(buffer, size)  # the compiled path knows no stream
            finally:
                self._tls.stream = None

    def _streams(self) -> StreamOrdering:
        """The area's stream operations (set by the first stream used: _stream_handle)."""
        assert self._stream_ops is not None
        return self._stream_ops

    def _stream_handle(self, stream: Any) -> int:
        from ..gpu.stream import as_stream_handle

        handle = as_stream_handle(stream)
        if self._stream_ops is None:
            area = self._area
            if not isinstance(area, StreamOrderedArea):
                raise AMLNotSupported(
                    f"streams need a GPU area; the pooled {type(area).__name__} has no runtime "
                    "that orders work on streams"
                )
            self._stream_ops = area.stream_ordering()
        self._any_stream = True
        return handle

    def _take_on_stream(self, n: int, stream: int) -> _Block:
        """A block for ``stream`` (under _plock): host-free memory first; then a block of
        this size freed on another stream, which ``stream`` waits for through an event;
        then, before growing, every stream holding blocks is synchronized and its blocks
        coalesced (:meth:`_reclaim_streams`)."""
        heap = self._small if n <= self._small_max else self._large
        stack: list[_Block] | None = self._cache.fast.get(n)
        if stack:
            self._cache.hits += 1
            self._cache.blocks += n
            return stack.pop()
        if heap.best_fit(n) is not None:
            return self._take(n)
        for (other, size), stack in self._sfast.items():
            if size == n and stack:
                blk = stack.pop()
                self._stream_held[other] -= 1
                ops = self._streams()
                if self._event is None:
                    self._event = ops.event_create()
                # The wait captures the event's state now: one event serves every hand-over.
                ops.event_record(self._event, other)
                ops.stream_wait_event(stream, self._event)
                self._cache.hits += 1
                self._cache.blocks += n
                return blk
        self._reclaim_streams()
        return self._take(n)

    def _reclaim_streams(self) -> None:
        """Wait for every stream that holds freed blocks, then return them to the host
        order (fast stacks), where they can be coalesced and reused anywhere."""
        if not any(self._stream_held.values()):
            return
        streams = self._streams()
        for stream, held in list(self._stream_held.items()):
            if held:
                streams.stream_synchronize(stream)
        sfast, self._sfast = self._sfast, {}
        self._stream_held = {}
        fast = self._cache.fast
        for (_stream, size), stack in sfast.items():
            for blk in stack:
                blk.stream = None
            fast.setdefault(size, []).extend(stack)

    def _destroy_event(self) -> None:
        """Destroy the stream hand-over event, if any (under _plock); a failed destroy
        keeps it, for close() to retry."""
        if self._event is not None:
            self._streams().event_destroy(self._event)
            self._event = None
