"""Streams, in the core: the stream object a GPU backend makes (:class:`Stream`), the
conversion of anything a user may hold (an int handle, an aml Stream, a CuPy or PyTorch
stream, any object with the ``__cuda_stream__`` protocol) into a native handle
(:func:`as_stream_handle`: every area's ``mmap(..., stream=)`` and ``munmap(...,
stream=)`` run it once, in the compiled core), and the C table of a runtime's stream
calls that a pool's kernel uses (:func:`native_streams`).

``aml_core.gpu.stream`` re-exports these names (their import path before 0.x)."""

from __future__ import annotations

import contextlib
import ctypes
import threading
import warnings
from typing import TYPE_CHECKING, Any

from . import checks
from ._buffer import NativeStreams
from .errors import AMLError, AMLTypeError, AMLValueError

if TYPE_CHECKING:
    from .protocols import StreamOrdering

__all__ = ["NativeStreams", "Stream", "StreamLike", "as_stream_handle", "native_streams"]

#: What a ``stream`` argument takes: None (host order), an int handle, an aml
#: :class:`Stream`, or any stream object :func:`as_stream_handle` reads (cuda.core's,
#: CuPy's, PyTorch's). Typed as ``object``: those classes are other packages'.
StreamLike = object


class Stream:
    """A stream created by a GPU backend; ``close()`` (or ``with``) destroys it."""

    def __init__(self, runtime: Any, *, non_blocking: bool = False) -> None:
        """A new stream of ``runtime`` (a GPU runtime, which must provide the STREAMS
        group); ``non_blocking``: does not synchronize with the legacy default stream.
        Prefer the backend's ``stream(non_blocking=...)``."""
        from .gpu.runtime import Group  # the runtime's groups; the stream itself is the core's

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

    The one check of every stream argument (every area's ``mmap(..., stream=)`` and
    ``munmap(..., stream=)``, run once by the compiled core; prefetch and advice):
    whatever the form, the handle is a pointer-sized unsigned value, 0..2**64 - 1
    (:func:`aml_core.checks.pointer`, NULL allowed: the default stream); a wrong type is
    :class:`~aml_core.errors.AMLTypeError`, a value out of that range
    :class:`~aml_core.errors.AMLValueError` (both EINVAL), before any native call.
    Whether the handle names a live stream only the runtime can tell: its
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


def native_streams(ordering: StreamOrdering) -> NativeStreams:
    """The C table of ``ordering``'s stream calls for a pool's kernel: the runtime's own
    (``ordering.native_streams()``, C function pointers: a hook's hand-over then needs no
    GIL), else trampolines over its Python methods (``needs_gil``: a hook takes the GIL
    first). A Python method that raises fails its C call; the kernel then raises that
    same exception."""
    own = getattr(ordering, "native_streams", None)
    if own is not None:
        table = own()
        if table is not None:
            assert isinstance(table, NativeStreams)
            return table
    return _Trampolines(ordering).table


_P = ctypes.c_void_p
_CREATE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_P), ctypes.c_uint)
_ONE = ctypes.CFUNCTYPE(ctypes.c_int, _P)
_TWO = ctypes.CFUNCTYPE(ctypes.c_int, _P, _P)
_WAIT = ctypes.CFUNCTYPE(ctypes.c_int, _P, _P, ctypes.c_uint)

#: The trampolines' codes: a Python method raised (its exception is kept for ``fail``),
#: an event query found the work still running.
_RAISED, _NOT_READY = 1, 2


class _Trampolines:
    """C functions over a Python :class:`~aml_core.protocols.StreamOrdering` (ctypes
    callbacks: each takes the GIL), as a NativeStreams."""

    def __init__(self, ops: StreamOrdering) -> None:
        self._ops = ops
        self._raised = threading.local()
        query = getattr(ops, "event_query", None)

        def guard(call: Any) -> int:
            try:
                call()
            except BaseException as exc:  # kept for fail(), which raises it in the kernel
                self._raised.exc = exc
                return _RAISED
            return 0

        def create(out: Any, _flags: int) -> int:
            def run() -> None:
                out[0] = ops.event_create()

            return guard(run)

        def query_call(event: int | None) -> int:
            assert query is not None
            done: list[bool] = []
            rc = guard(lambda: done.append(bool(query(event or 0))))
            return rc if rc else (0 if done[0] else _NOT_READY)

        self._functions = functions = {
            "event_create": _CREATE(create),
            "event_destroy": _ONE(lambda e: guard(lambda: ops.event_destroy(e or 0))),
            "event_record": _TWO(lambda e, s: guard(lambda: ops.event_record(e or 0, s or 0))),
            "stream_wait_event": _WAIT(lambda s, e, _f: guard(lambda: ops.stream_wait_event(s or 0, e or 0))),
            "stream_synchronize": _ONE(lambda s: guard(lambda: ops.stream_synchronize(s or 0))),
        }
        if query is not None:
            functions["event_query"] = _ONE(query_call)
        addresses = {op: int(ctypes.cast(fn, _P).value or 0) for op, fn in functions.items()}
        self.table = NativeStreams(
            **addresses,
            fail=self._fail,
            names={op: op for op in addresses},
            not_ready=_NOT_READY,
            needs_gil=True,
            owner=self,
        )

    def _fail(self, name: str, code: int) -> None:
        exc = getattr(self._raised, "exc", None)
        self._raised.exc = None
        if exc is None:  # pragma: no cover - only the guard returns a code
            raise AMLError(f"{name} failed ({code})")
        raise exc
