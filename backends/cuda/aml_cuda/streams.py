"""CUDA streams and stream-ordered allocation, a part of
:class:`aml_cuda.runtime.CudaRuntime` (its ``STREAMS`` and ``STREAM_ORDERED`` groups)."""

from __future__ import annotations

from typing import NoReturn

from aml_core.errors import AMLNotSupported
from aml_core.gpu import runtime as core
from aml_core.stream import NativeStreams

from .calls import CudaCalls, _rt
from .native import CYRUNTIME_SENTINEL, cyruntime_functions

__all__ = ["STREAM_FUNCTIONS", "STREAM_SIGNATURES", "CudaStreams"]

_E = _rt.cudaError_t
# Bound once: stream-ordered allocation is a hot path.
_cudaMallocAsync = _rt.cudaMallocAsync
_cudaFreeAsync = _rt.cudaFreeAsync
_cudaEventRecord = _rt.cudaEventRecord
_cudaEventQuery = _rt.cudaEventQuery
_ERR_NOT_READY = int(_E.cudaErrorNotReady)
_EVENT_DISABLE_TIMING = int(_rt.cudaEventDisableTiming)

#: NativeStreams operation -> the cyruntime function behind it.
STREAM_FUNCTIONS = {
    "event_create": "cudaEventCreateWithFlags",
    "event_destroy": "cudaEventDestroy",
    "event_record": "cudaEventRecord",
    "stream_wait_event": "cudaStreamWaitEvent",
    "event_query": "cudaEventQuery",
    "stream_synchronize": "cudaStreamSynchronize",
}
#: The C signature each capsule must name: NativeStreams' function pointer types
#: (aml_core/_allocator.pxd), with cudaEvent_t and cudaStream_t opaque pointers
#: (docs/native-abi.md, "CUDA compiled allocator (cyruntime capsules)").
STREAM_SIGNATURES = {
    "cudaEventCreateWithFlags": "cudaError_t (cudaEvent_t *, unsigned int)",
    "cudaEventDestroy": "cudaError_t (cudaEvent_t)",
    "cudaEventRecord": "cudaError_t (cudaEvent_t, cudaStream_t)",
    "cudaStreamWaitEvent": "cudaError_t (cudaStream_t, cudaEvent_t, unsigned int)",
    "cudaEventQuery": "cudaError_t (cudaEvent_t)",
    "cudaStreamSynchronize": "cudaError_t (cudaStream_t)",
}


class CudaStreams(CudaCalls, core.StreamOps, core.StreamOrderedOps):
    """``cudaStream*``, ``cudaMallocAsync`` / ``cudaFreeAsync`` and ``cudaEvent*``."""

    # -- streams ---------------------------------------------------------------------------
    def _stream_create(self, non_blocking: bool) -> int:
        flags = int(_rt.cudaStreamNonBlocking) if non_blocking else int(_rt.cudaStreamDefault)
        return int(self._call("cudaStreamCreateWithFlags", flags))

    def _stream_destroy(self, stream: int) -> None:
        self._call("cudaStreamDestroy", stream)

    def _stream_synchronize(self, stream: int) -> None:
        self._call("cudaStreamSynchronize", stream)

    # -- stream-ordered allocation ---------------------------------------------------------
    def _malloc_async(self, size: int, stream: int) -> int:
        return int(self._hot("cudaMallocAsync", _cudaMallocAsync(size, stream), size))

    def _free_async(self, ptr: int, stream: int) -> None:
        self._hot("cudaFreeAsync", _cudaFreeAsync(ptr, stream))

    def _event_create(self) -> int:
        return int(self._call("cudaEventCreateWithFlags", _EVENT_DISABLE_TIMING))

    def _event_destroy(self, event: int) -> None:
        self._call("cudaEventDestroy", event)

    def _event_record(self, event: int, stream: int) -> None:
        self._hot("cudaEventRecord", _cudaEventRecord(event, stream))

    def _event_query(self, event: int) -> bool:
        (err,) = _cudaEventQuery(event)
        if not err:
            return True
        if int(err) == _ERR_NOT_READY:
            return False
        self._fail("cudaEventQuery", err)

    def _event_synchronize(self, event: int) -> None:
        self._call("cudaEventSynchronize", event)

    def _stream_wait_event(self, stream: int, event: int) -> None:
        self._call("cudaStreamWaitEvent", stream, event, 0)

    # -- the kernel's stream calls in C (aml_core.stream.native_streams) -------------------
    def native_streams(self) -> NativeStreams | None:
        """cudaEventCreateWithFlags, cudaEventDestroy, cudaEventRecord,
        cudaStreamWaitEvent, cudaEventQuery and cudaStreamSynchronize as the C functions of
        cuda-bindings' cyruntime, for a pool's kernel (a hook's hand-over then needs no
        GIL; a plain request after a stream request queries an event). A failure raises
        through :meth:`_fail`, as the Python methods' do. None if this cuda-bindings does
        not export them with the expected signatures, and for a subclass that replaces
        one of those methods (:data:`aml_core.gpu.runtime.STREAM_METHODS`)."""
        cached: NativeStreams | None
        try:
            cached = self.__dict__["_native_streams"]
        except KeyError:
            cached = self.__dict__["_native_streams"] = self._make_native_streams()
        return cached

    def _make_native_streams(self) -> NativeStreams | None:
        if core.replaces_native(self, CudaStreams, core.STREAM_METHODS):
            return None
        try:
            found = cyruntime_functions(STREAM_FUNCTIONS.values())
        except AMLNotSupported:
            return None
        if any(found[name][1] != signature for name, signature in STREAM_SIGNATURES.items()):
            return None

        def fail(function: str, code: int) -> NoReturn:
            self._fail(function, code)

        address = {op: found[name][0] for op, name in STREAM_FUNCTIONS.items()}
        return NativeStreams(
            event_create=address["event_create"],
            event_destroy=address["event_destroy"],
            event_record=address["event_record"],
            stream_wait_event=address["stream_wait_event"],
            event_query=address["event_query"],
            stream_synchronize=address["stream_synchronize"],
            fail=fail,
            names=dict(STREAM_FUNCTIONS),
            not_ready=_ERR_NOT_READY,
            event_flags=_EVENT_DISABLE_TIMING,
            error_sentinel=CYRUNTIME_SENTINEL,
        )
