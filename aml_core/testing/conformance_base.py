"""What the conformance classes (:mod:`aml_core.testing.conformance`) share: random
data, a reference cycle, how the kit reads and writes a buffer's bytes, and the settings
and leak-check hook of the area classes."""

from __future__ import annotations

import os
from typing import ClassVar

import pytest

from ..area import Area
from ..buffer import Buffer

__all__ = ["AreaKit", "Cycle", "DataAccess", "can_access", "pattern"]


def pattern(n: int) -> bytes:
    """``n`` random bytes (a random block repeated): never zeros, new on every call."""
    block = os.urandom(min(n, 4096))
    return (block * -(-n // len(block)))[:n] if n else b""


def can_access(area: Area, buf: Buffer) -> bool:
    """Whether the kit can reach ``buf``'s bytes (host-accessible, or the area's
    ``write`` / ``read``)."""
    return buf.host_accessible or (hasattr(area, "write") and hasattr(area, "read"))


class Cycle:
    """Holds buffers in a reference cycle: only the cyclic collector frees them."""

    def __init__(self, *held: object) -> None:
        self.held = held
        self.me = self


class DataAccess:
    """How the kit writes and reads a buffer's bytes: the buffer protocol for
    host-accessible memory, else the area's ``write(buf, data)`` / ``read(buf, size)``;
    override both if your area differs."""

    def write(self, area: Area, buf: Buffer, data: bytes) -> None:
        if buf.host_accessible:
            with memoryview(buf) as view:
                view[: len(data)] = data
        elif hasattr(area, "write"):
            area.write(buf, data)
        else:
            pytest.skip("the area's memory is not host-accessible and the area has no write()")

    def read(self, area: Area, buf: Buffer, size: int) -> bytes:
        if buf.host_accessible:
            with memoryview(buf) as view:
                return bytes(view[:size])
        if hasattr(area, "read"):
            data: bytes = area.read(buf, size)
            return data
        pytest.skip("the area's memory is not host-accessible and the area has no read()")


class AreaKit(DataAccess):
    """The settings and the leak-check hook the area classes share (override them in
    your subclass of :class:`~aml_core.testing.AreaConformance`)."""

    #: Threads and rounds of the concurrency tests.
    threads: ClassVar[int] = 8
    rounds: ClassVar[int] = 50

    # -- leak check hook, overridable ---------------------------------------------------
    def native_live(self, area: Area) -> int | None:
        """The number of native allocations of ``area`` still alive, as the backend (or
        its driver double) counts them; None (the default) when it cannot tell. With a
        count, the leak check proves that ``_free`` really frees."""
        return None
