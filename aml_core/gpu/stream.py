"""Streams: a small owned stream object, and the conversion of anything a user may
hold (an int handle, an aml Stream, a CuPy or PyTorch stream, any object with the
``__cuda_stream__`` protocol) into a native handle."""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import TYPE_CHECKING, Any

from .. import checks
from ..errors import AMLError, AMLTypeError, AMLValueError
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


class Stream:
    """A stream created by a GPU backend; ``close()`` (or ``with``) destroys it."""

    def __init__(self, runtime: Runtime, *, non_blocking: bool = False) -> None:
        """A new stream of ``runtime`` (which must provide the STREAMS group);
        ``non_blocking``: does not synchronize with the legacy default stream. Prefer the
        backend's ``stream(non_blocking=...)``."""
        self._runtime = runtime.require(Group.STREAMS)
        self._lock = threading.Lock()
        self.handle: int = self._runtime.stream_create(non_blocking)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def synchronize(self) -> None:
        """Wait for everything queued on the stream."""
        self._check()
        self._runtime.stream_synchronize(self.handle)

    def close(self) -> None:
        """Destroy the stream. If the native destroy fails, its error is raised and the
        stream stays open (a retry destroys it): it is never marked closed while alive."""
        with self._lock:
            if self._closed:
                return
            self._runtime.stream_destroy(self.handle)
            self._closed = True

    def _check(self) -> None:
        if self._closed:
            raise AMLValueError("this stream was closed")

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol (version 0, handle), understood by cuda.core."""
        self._check()
        return (0, self.handle)

    def __int__(self) -> int:
        self._check()
        return self.handle

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception as exc:  # never raise from a finalizer; never leak silently
                with contextlib.suppress(Exception):
                    warnings.warn(
                        f"the stream 0x{self.handle:x} could not be destroyed and leaks: {exc}",
                        ResourceWarning,
                        stacklevel=1,
                    )

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"0x{self.handle:x}"
        return f"<aml {self._runtime.traits.name} Stream {state}>"


def as_stream_handle(stream: Any) -> int:
    """A native stream handle from: None (the default stream, 0), an int, an aml
    :class:`Stream`, an object with ``__cuda_stream__`` (cuda.core), a CuPy stream
    (``.ptr``) or a PyTorch stream (``.cuda_stream``).

    The one check of every stream argument (a GPU area's options and ``munmap_on``, a
    pool's, prefetch and advice): whatever the form, the handle is a pointer-sized
    unsigned value, 0..2**64 - 1 (:func:`aml_core.checks.pointer`, NULL allowed: the
    default stream); a wrong type is :class:`~aml_core.errors.AMLTypeError`, a value out
    of that range :class:`~aml_core.errors.AMLValueError` (both EINVAL), before any native
    call. Whether the handle names a live stream only the runtime can tell: its
    stream-ordered calls refuse one it does not know."""
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise AMLTypeError("a stream must be a stream object or an int handle, not bool")
    if isinstance(stream, int):
        return checks.pointer(stream, "a stream handle", null=True)
    if isinstance(stream, Stream):
        return int(stream)
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        try:
            value = proto() if callable(proto) else proto
            version, handle = value
        except AMLError:
            raise
        except Exception as exc:
            raise AMLTypeError(
                f"{type(stream).__name__}.__cuda_stream__ must give (version, handle): {exc!r}"
            ) from None
        checks.integer(version, "the __cuda_stream__ version")
        return checks.pointer(handle, "the __cuda_stream__ handle", null=True)
    for attr in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return checks.pointer(value, f"the stream handle {type(stream).__name__}.{attr}", null=True)
    raise AMLTypeError(
        f"cannot use a {type(stream).__name__} as a stream: pass an int handle, an aml Stream, "
        "a CuPy or PyTorch stream, or an object with __cuda_stream__"
    )
