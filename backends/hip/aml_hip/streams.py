"""HIP streams and stream-ordered allocation, a part of
:class:`aml_hip.runtime.HipRuntime` (its ``STREAMS`` and ``STREAM_ORDERED`` groups;
docs/native-abi.md#hip-stream-ordered-allocation)."""

from __future__ import annotations

from aml_core.gpu import runtime as core

from . import abi as C
from .calls import HipCalls
from .calls import vp as _vp

__all__ = ["HipStreams"]


class HipStreams(HipCalls, core.StreamOps, core.StreamOrderedOps):
    """``hipStream*``, ``hipMallocAsync`` / ``hipFreeAsync`` and ``hipEvent*``."""

    # -- streams -----------------------------------------------------------------------------
    def _stream_create(self, non_blocking: bool) -> int:
        flags = C.hipStreamNonBlocking if non_blocking else C.hipStreamDefault
        return self._out_ptr("hipStreamCreateWithFlags", flags)

    def _stream_destroy(self, stream: int) -> None:
        self.lib.call("hipStreamDestroy", _vp(stream))

    def _stream_synchronize(self, stream: int) -> None:
        self.lib.call("hipStreamSynchronize", _vp(stream))

    # -- stream-ordered allocation (docs/native-abi.md#hip-stream-ordered-allocation) ----------
    def _malloc_async(self, size: int, stream: int) -> int:
        return self._out_ptr_message(
            "hipMallocAsync", f"hipMallocAsync of {size} bytes failed", size, _vp(stream)
        )

    def _free_async(self, ptr: int, stream: int) -> None:
        self.lib.call("hipFreeAsync", _vp(ptr), _vp(stream))

    def _event_create(self) -> int:
        return self._out_ptr("hipEventCreateWithFlags", C.hipEventDisableTiming)

    def _event_destroy(self, event: int) -> None:
        self.lib.call("hipEventDestroy", _vp(event))

    def _event_record(self, event: int, stream: int) -> None:
        self.lib.call("hipEventRecord", _vp(event), _vp(stream))

    def _event_query(self, event: int) -> bool:
        rc = self.lib.raw("hipEventQuery", _vp(event))
        if rc == C.hipSuccess:
            return True
        if rc == C.hipErrorNotReady:  # the recorded work is still running: not an error
            return False
        raise self.errors.error("hipEventQuery", rc, None)

    def _event_synchronize(self, event: int) -> None:
        self.lib.call("hipEventSynchronize", _vp(event))

    def _stream_wait_event(self, stream: int, event: int) -> None:
        self.lib.call("hipStreamWaitEvent", _vp(stream), _vp(event), 0)
