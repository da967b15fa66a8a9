from collections.abc import Callable
from types import TracebackType
from typing import Any

from ._buffer import AreaBase
from ._fastpath import FastPath

BLOCK_STATES: tuple[str, ...]
EVENTS: tuple[str, ...]

#: (action, addr, size, requested, stream, time_ns, thread, frames)
KernelEvent = tuple[str, int, int, int, int | None, int, int, tuple[tuple[str, int, str], ...] | None]
#: (ptr, size, heap, [(addr, size, requested, state, stream), ...])
KernelSegment = tuple[int, int, int, list[tuple[int, int, int, str, int | None]]]

class PoolKernel(FastPath):
    hits: int
    misses: int
    requested: int
    peak_requested: int
    blocks: int
    reserved: int
    peak_reserved: int
    native_allocs: int
    native_frees: int
    fast_mmaps: int
    fast_munmaps: int
    slow_munmaps: int
    hook_mmaps: int
    hook_munmaps: int
    keep_fast: bool
    closing: bool
    streams_ready: bool
    stream_ops: Any
    event: int | None
    options_type: Any
    stream_type: Any
    on_oom: Callable[[int, Any], bool] | None
    free_memory: Callable[[], int | None] | None
    sink: Callable[[], None] | None
    def __init__(
        self,
        area: AreaBase,
        *,
        granule: int,
        small_max: int,
        small_slab: int,
        medium_slab: int,
        limit: int | None = None,
        release_threshold: int | None = None,
        options: Any = None,
    ) -> None: ...
    def __enter__(self) -> PoolKernel: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
    @property
    def held(self) -> bool: ...
    @property
    def granule(self) -> int: ...
    @property
    def limit(self) -> int | None: ...
    def set_limit(self, limit: int | None) -> None: ...
    def alloc(self, size: int, stream: int | None = None) -> int: ...
    def free(self, addr: int, stream: int | None = None) -> None: ...
    def trim(self, keep: int) -> int: ...
    def set_segment(
        self,
        vm: Any,
        ptr: int,
        reservation_size: int,
        granularity: int,
        dl_device: tuple[int, int],
        device: int | None,
    ) -> None: ...
    def block(self, addr: int) -> tuple[int, int, tuple[int, int], int | None, Any, int, int]: ...
    def stats(self) -> tuple[int, int, int, int, int, int, int, int, int, int, int]: ...
    def reset_peak(self) -> None: ...
    def stream_cached(self) -> dict[tuple[int, int], list[int]]: ...
    def stream_stats(self) -> dict[int | None, tuple[int, int, int, int, int]]: ...
    def close_stacks(self) -> None: ...
    def let_go(self, viewed: list[int]) -> None: ...
    def destroy_event(self) -> None: ...
    def segment_empty(self) -> bool: ...
    def live_blocks(self) -> int: ...
    def set_history(self, capacity: int, python: bool = False, max_frames: int = 0) -> None: ...
    @property
    def recorded(self) -> int: ...
    def events(self, since: int = 0) -> tuple[int, int, list[KernelEvent]]: ...
    def segments(self) -> list[KernelSegment]: ...
