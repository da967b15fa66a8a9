"""Every AML CUDA area flag combination (the 16 subsets of the four flag bits), what
each allocates, and an area that maps fresh host memory for the ALLOC_MAPPED areas
that register the caller's memory (so the conformance kit can mmap(size) on them)."""

from __future__ import annotations

import mmap as _mmap
from typing import Any

import attrs

from aml_core.buffer import Buffer
from aml_core.errors import AMLMemoryError
from aml_core.gpu import AllocMode, GpuArea, GpuFlags, GpuMmapOptions
from aml_core.specs import Kind

ALL_FLAGS = tuple(range(16))


def flag_name(flags: int) -> str:
    names = [f.name for f in GpuFlags if f.value and flags & f.value and f.name]
    return "|".join(str(n) for n in names) or "DEFAULT"


def mode(flags: int) -> str:
    """What AML's area says an area of these flags allocates (docs/aml-contract.md#hip-area)."""
    if flags & GpuFlags.ALLOC_UNIFIED:
        return "managed"
    if flags & GpuFlags.ALLOC_MAPPED:
        return "host_mapped" if flags & GpuFlags.ALLOC_HOST else "registered"
    if flags & GpuFlags.ALLOC_HOST:
        return "host"
    return "device"


KIND_OF_MODE = {
    "managed": Kind.MANAGED,
    "host_mapped": Kind.MAPPED,
    "registered": Kind.MAPPED,
    "host": Kind.HOST,
    "device": Kind.DEVICE,
}


class AutoRegisteringArea(GpuArea):
    """An ALLOC_MAPPED area without ALLOC_HOST that, when mmap gets no ``ptr``, maps
    fresh anonymous host memory (kept alive by the buffer) instead of refusing."""

    def _allocate(self, size: int, options: GpuMmapOptions) -> Buffer:
        if options.ptr is None and self.decoded.mode is AllocMode.REGISTERED:
            try:
                host = _mmap.mmap(-1, max(size, 1))
            except OSError as exc:  # the system cannot provide it: AML's ENOMEM, as any area
                raise AMLMemoryError(f"cannot map {size} bytes of host memory to register: {exc}") from exc
            options = attrs.evolve(options, ptr=host)
        return super()._allocate(size, options)


def make_area(flags: int, device: int = 0) -> Any:
    import aml_cuda

    rt = aml_cuda.get_runtime()
    if mode(flags) == "registered":
        return AutoRegisteringArea(rt, device, flags)
    return aml_cuda.create(device, flags)
