from collections.abc import Callable, Mapping
from typing import Any

from ._kernel import PoolKernel

class HookState:
    def __init__(
        self,
        kernel: PoolKernel | None,
        slow_malloc: Callable[[int, int, int | None], int],
        slow_free: Callable[[int, int, int | None], bool],
        raising_malloc: Callable[[int, int], int] | None = None,
    ) -> None: ...
    def cupy_malloc(self, size: int, device: int) -> int: ...
    def cupy_free(self, ptr: int, device: int) -> None: ...
    @property
    def live(self) -> int: ...
    @property
    def fast_allocs(self) -> int: ...
    @property
    def fast_frees(self) -> int: ...

def set_torch(
    states: Mapping[int, HookState],
    default: HookState | None,
    report: Callable[[str, int, int], Any],
    errors: list[BaseException] | None = None,
    throws: bool = False,
) -> None: ...
def torch_entry_points() -> tuple[int, int]: ...
def cupy_entry_points() -> tuple[int, int]: ...
def call_malloc(
    which: Literal["torch", "cupy"], st: HookState, size: int, device: int, stream: int = 0
) -> int: ...
def call_free(
    which: Literal["torch", "cupy"], st: HookState, ptr: int, size: int, device: int, stream: int = 0
) -> None: ...
