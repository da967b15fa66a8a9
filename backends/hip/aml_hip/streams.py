"""HIP streams and stream-ordered allocation, a part of
:class:`aml_hip.runtime.HipRuntime` (its ``STREAMS`` and ``STREAM_ORDERED`` groups;
docs/native-abi.md#hip-stream-ordered-allocation)."""

from __future__ import annotations

import ctypes
from typing import NoReturn

from aml_core.gpu import runtime as core
from aml_core.stream import NativeStreams

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

    # -- the kernel's stream calls in C (aml_core.stream.native_streams) -------------------------
    def native_streams(self) -> NativeStreams | None:
        """hipEventCreateWithFlags, hipEventDestroy, hipEventRecord, hipStreamWaitEvent,
        hipEventQuery and hipStreamSynchronize as C function pointers of the loaded
        library, for a pool's kernel (a hook's hand-over then needs no GIL; a plain
        request after a stream request queries an event); a failure raises through the
        same table as :meth:`HipLibrary.call`. None for a subclass that replaces one of
        those methods (:data:`aml_core.gpu.runtime.STREAM_METHODS`)."""
        if core.replaces_native(self, HipStreams, core.STREAM_METHODS):
            return None
        cached: NativeStreams | None = getattr(self, "_native_streams", None)
        if cached is None:
            cached = self._native_streams = self._make_native_streams()
        return cached

    def _make_native_streams(self) -> NativeStreams:
        lib = self.lib

        def address(name: str) -> int:
            return int(ctypes.cast(lib.native.function(name), ctypes.c_void_p).value or 0)

        def fail(function: str, code: int) -> NoReturn:
            raise self.errors.error(function, code, None)

        names = {
            "event_create": "hipEventCreateWithFlags",
            "event_destroy": "hipEventDestroy",
            "event_record": "hipEventRecord",
            "stream_wait_event": "hipStreamWaitEvent",
            "event_query": "hipEventQuery",
            "stream_synchronize": "hipStreamSynchronize",
        }
        return NativeStreams(
            event_create=address(names["event_create"]),
            event_destroy=address(names["event_destroy"]),
            event_record=address(names["event_record"]),
            stream_wait_event=address(names["stream_wait_event"]),
            event_query=address(names["event_query"]),
            stream_synchronize=address(names["stream_synchronize"]),
            fail=fail,
            names=names,
            not_ready=C.hipErrorNotReady,
            event_flags=C.hipEventDisableTiming,
            owner=lib,
        )
