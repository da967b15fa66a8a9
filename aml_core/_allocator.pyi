from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from ._buffer import AreaBase
from ._fastpath import FastPath

OPS: tuple[str, ...]

class NativeAllocator:
    def __init__(
        self,
        *,
        get_device: int,
        malloc: int,
        free: int,
        fail: Callable[..., NoReturn],
        names: Mapping[str, str],
        malloc_managed: int | None = None,
        host_alloc: int | None = None,
        free_host: int | None = None,
        error_sentinel: int | None = None,
        attach_host: int = 0,
        attach_global: int = 0,
        host_portable: int = 0,
        owner: object = None,
    ) -> None: ...
    @property
    def fail(self) -> Callable[..., NoReturn]: ...
    @property
    def names(self) -> dict[str, str]: ...
    @property
    def owner(self) -> object: ...
    @property
    def attach_host(self) -> int: ...
    @property
    def attach_global(self) -> int: ...
    @property
    def host_portable(self) -> int: ...
    def has(self, op: str, /) -> bool: ...
    def get_device(self) -> int: ...

def _noop_functions() -> dict[str, int]: ...
def _noop_control(fail_code: int = 0, fail_count: int = 0, skip: int = 0) -> int: ...

class NativePath(FastPath):
    def __init__(
        self,
        allocator: NativeAllocator,
        area: AreaBase,
        mode: str = "device",
        *,
        dl_device_type: int = 0,
        host_accessible: bool = False,
        dl_device_current: bool = True,
        flags: int = 0,
        granule: int = 1,
        records: dict[int, Any] | None = None,
        record: Callable[[int], Any] | None = None,
        slow_free: dict[int, Any] | None = None,
    ) -> None: ...
    @property
    def allocator(self) -> NativeAllocator: ...

STREAM_OPS: tuple[str, ...]

class NativeStreams:
    def __init__(
        self,
        *,
        event_create: int,
        event_destroy: int,
        event_record: int,
        stream_wait_event: int,
        stream_synchronize: int,
        fail: Callable[..., NoReturn] | Callable[[str, int], None],
        names: Mapping[str, str],
        event_query: int | None = None,
        not_ready: int = 0,
        event_flags: int = 0,
        needs_gil: bool = False,
        error_sentinel: int | None = None,
        owner: object = None,
    ) -> None: ...
    @property
    def needs_gil(self) -> bool: ...
    @property
    def queries(self) -> bool: ...
    @property
    def fail(self) -> Callable[..., Any]: ...
    @property
    def names(self) -> tuple[str, ...]: ...
    @property
    def owner(self) -> object: ...
    def _synchronize(self, stream: int) -> None: ...
