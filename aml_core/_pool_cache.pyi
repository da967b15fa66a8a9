from types import TracebackType
from typing import Any

from ._buffer import AreaBase
from ._fastpath import FastPath

class PoolCache(FastPath):
    fast: dict[int, list[Any]]
    keep_fast: bool
    hits: int
    requested: int
    peak_requested: int
    blocks: int
    def __init__(self, area: AreaBase, granule: int, lock: Any) -> None: ...
    @property
    def fast_mmaps(self) -> int: ...
    @property
    def fast_munmaps(self) -> int: ...
    @property
    def busy(self) -> int: ...
    @property
    def lock(self) -> Any: ...
    @property
    def granule(self) -> int: ...
    def __enter__(self) -> PoolCache: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...
