"""A fake-pointer area for the reliability tests: records every allocation and free,
reports double frees and frees of unknown pointers, and fails frees on demand."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from aml_core import Buffer
from aml_core.area import Area
from aml_core.errors import AMLFailure
from aml_core.specs import Kind

STEP = 1 << 20


class FaultyArea(Area):
    """``fail_frees``: how many next frees fail; ``during_failure``: called inside a failing
    free (before it raises), to interleave another operation deterministically."""

    def __init__(self) -> None:
        super().__init__(backend="fake", kind=Kind.DEVICE, device=0)
        self._ptrs = itertools.count(1 << 40, STEP)
        self.mu = threading.Lock()
        self.native_live: dict[int, int] = {}
        self.bad: list[str] = []
        self.fail_frees = 0
        self.during_failure: Callable[[], None] | None = None

    def _allocate(self, size: int, options: Any) -> Buffer:
        ptr = next(self._ptrs)
        with self.mu:
            self.native_live[ptr] = size
        return self._new_buffer(ptr, size, host_accessible=False, dl_device=(2, 0), native=("fake", ptr))

    def _free(self, buffer: Buffer) -> None:
        with self.mu:
            fail = self.fail_frees > 0
            if fail:
                self.fail_frees -= 1
        if fail:
            hook, self.during_failure = self.during_failure, None
            if hook is not None:
                hook()
            raise AMLFailure("the native free failed")
        with self.mu:
            if buffer.native != ("fake", buffer.ptr):
                self.bad.append(f"wrong native for 0x{buffer.ptr:x}")
            if self.native_live.pop(buffer.ptr, None) is None:
                self.bad.append(f"free of unknown or freed 0x{buffer.ptr:x}")
