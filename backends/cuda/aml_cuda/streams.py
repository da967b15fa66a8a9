"""CUDA streams and stream-ordered allocation, a part of
:class:`aml_cuda.runtime.CudaRuntime` (its ``STREAMS`` and ``STREAM_ORDERED`` groups)."""

from __future__ import annotations

from aml_core.gpu import runtime as core

from .calls import CudaCalls, _rt

__all__ = ["CudaStreams"]

_E = _rt.cudaError_t
# Bound once: stream-ordered allocation is a hot path.
_cudaMallocAsync = _rt.cudaMallocAsync
_cudaFreeAsync = _rt.cudaFreeAsync
_cudaEventRecord = _rt.cudaEventRecord
_cudaEventQuery = _rt.cudaEventQuery
_ERR_NOT_READY = int(_E.cudaErrorNotReady)
_EVENT_DISABLE_TIMING = int(_rt.cudaEventDisableTiming)


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
