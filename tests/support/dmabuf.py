"""dma-buf export checked alike on every backend (docs/dmabuf.md): a pooled block is its
slab's dma-buf at the block's offset, an expandable pool refuses, and bad input is refused
with the documented AML errors before any native call."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

import aml_core
from aml_core.buffer import Buffer
from aml_core.dmabuf import DmabufHandle
from aml_core.errors import AMLNotSupported, AMLTypeError, AMLValueError


def check_pooled_block(
    area: Any, slab_at: int = 0, more: Callable[[DmabufHandle, Buffer], None] | None = None
) -> None:
    """Over a pool of ``area``: the second of two blocks exports as its slab's dma-buf, at
    ``slab_at`` (the slab's own offset in its dma-buf) plus the block's offset in the slab,
    with the block's size, the handle holding the block; ``more(handle, block)`` checks
    what a backend can see of the fd; a freed block is refused."""
    with aml_core.pool(area) as pool:
        first = pool.mmap(4096)
        second = pool.mmap(4096)
        slab, offset = pool.slab_of(second)
        assert slab is not None
        assert offset > 0
        handle = pool.export_dmabuf(second)
        try:
            assert (handle.offset, handle.size) == (slab_at + offset, second.size)
            assert handle.buffer is second
            if more is not None:
                more(handle, second)
        finally:
            os.close(handle.fd)
        pool.munmap(first)
        pool.munmap(second)
        with pytest.raises(AMLValueError, match="already unmapped"):
            pool.export_dmabuf(second)


def check_expandable_pool_refuses(vm: Any) -> None:
    """An expandable pool over the virtual memory ``vm`` (closed after) answers ENOTSUP."""
    try:
        with aml_core.pool(vm, expandable=True) as pool:
            buf = pool.mmap(4096)
            with pytest.raises(AMLNotSupported, match="expandable"):
                pool.export_dmabuf(buf)
            pool.munmap(buf)
    finally:
        vm.close()


def check_bad_input(area: Any, other: Any) -> None:
    """``area`` refuses a buffer of ``other`` (another area of its kind), a freed buffer and
    something that is no buffer or pointer, as munmap does."""
    theirs = other.mmap(4096)
    with pytest.raises(AMLValueError, match="not mapped by this area"):
        area.export_dmabuf(theirs)
    other.munmap(theirs)
    with pytest.raises(AMLValueError, match="already unmapped"):
        other.export_dmabuf(theirs)
    with pytest.raises(AMLTypeError):
        area.export_dmabuf(b"buffer")
    with pytest.raises(AMLTypeError):
        aml_core.export_dmabuf(3.5)  # type: ignore[arg-type]
