"""AML's GPU area flags (``AML_AREA_HIP_FLAG_*``, docs/aml-contract.md#hip-area), shared by CUDA and HIP."""

from __future__ import annotations

import enum

from .. import checks
from ..errors import AMLValueError
from ..specs import Kind

__all__ = ["AllocMode", "GpuFlags", "check_flags", "flags_for_kind", "kind_of_flags", "mode_of_flags"]


class GpuFlags(enum.IntFlag):
    """``AML_AREA_HIP_FLAG_*`` / ``AML_AREA_CUDA_FLAG_*`` with AML's values.

    DEFAULT
        device memory, visible by a single device, not mapped on the host
        (``hipMalloc`` / ``cudaMalloc``).
    ALLOC_HOST
        host memory (``hipHostMalloc`` / ``cudaHostAlloc``), portable with ALLOC_GLOBAL.
    ALLOC_UNIFIED
        unified memory (``hipMallocManaged`` / ``cudaMallocManaged``) attached to the
        host, or global with ALLOC_GLOBAL; ALLOC_HOST and ALLOC_MAPPED are ignored.
    ALLOC_MAPPED
        host memory mapped on the device: allocated mapped with ALLOC_HOST, else the
        caller's ``options.ptr`` is registered (``hipHostRegister``) and its device
        pointer taken (``hipHostGetDevicePointer``); a missing ptr is EINVAL.
    ALLOC_GLOBAL
        visible on all devices (managed: attach global; host/mapped: portable).
    """

    DEFAULT = 0
    ALLOC_HOST = 1
    ALLOC_UNIFIED = 2
    ALLOC_MAPPED = 4
    ALLOC_GLOBAL = 8


_ALL = GpuFlags.ALLOC_HOST | GpuFlags.ALLOC_UNIFIED | GpuFlags.ALLOC_MAPPED | GpuFlags.ALLOC_GLOBAL


def check_flags(flags: object) -> GpuFlags:
    """Validate flags: an int made of the five flags; unknown bits are EINVAL."""
    value = checks.integer(flags, "flags")
    if value < 0 or value & ~int(_ALL):
        raise AMLValueError(
            f"unknown area flag bits 0x{value & ~int(_ALL) if value >= 0 else value:x} in 0x{value:x}; "
            "allowed: DEFAULT 0, ALLOC_HOST 1, ALLOC_UNIFIED 2, ALLOC_MAPPED 4, ALLOC_GLOBAL 8"
        )
    return GpuFlags(value)


class AllocMode(enum.Enum):
    """How an area of given flags allocates, in AML's precedence (see :class:`GpuFlags`)."""

    #: ``cudaMalloc`` / ``hipMalloc``.
    DEVICE = "device"
    #: ``cudaMallocManaged`` / ``hipMallocManaged``.
    MANAGED = "managed"
    #: ``cudaHostAlloc`` / ``hipHostMalloc``.
    HOST = "host"
    #: The same, mapped, and the device pointer taken.
    HOST_MAPPED = "host_mapped"
    #: The caller's memory registered (``cudaHostRegister`` / ``hipHostRegister``).
    REGISTERED = "registered"


def mode_of_flags(flags: GpuFlags) -> AllocMode:
    """What an area of these flags allocates."""
    if flags & GpuFlags.ALLOC_UNIFIED:
        return AllocMode.MANAGED
    if flags & GpuFlags.ALLOC_MAPPED:
        return AllocMode.HOST_MAPPED if flags & GpuFlags.ALLOC_HOST else AllocMode.REGISTERED
    if flags & GpuFlags.ALLOC_HOST:
        return AllocMode.HOST
    return AllocMode.DEVICE


def kind_of_flags(flags: GpuFlags) -> Kind:
    """The portable kind an AML flag set allocates."""
    if flags & GpuFlags.ALLOC_UNIFIED:
        return Kind.MANAGED
    if flags & GpuFlags.ALLOC_MAPPED:
        return Kind.MAPPED
    if flags & GpuFlags.ALLOC_HOST:
        return Kind.HOST
    return Kind.DEVICE


def flags_for_kind(kind: Kind, *, all_devices: bool = False) -> GpuFlags:
    """The AML flags ``aml_core.area(kind=...)`` uses on a GPU backend. MAPPED means
    allocated mapped host memory (ALLOC_MAPPED | ALLOC_HOST); ``all_devices`` adds
    ALLOC_GLOBAL."""
    flags = {
        Kind.DEVICE: GpuFlags.DEFAULT,
        Kind.HOST: GpuFlags.ALLOC_HOST,
        Kind.MANAGED: GpuFlags.ALLOC_UNIFIED,
        Kind.MAPPED: GpuFlags.ALLOC_MAPPED | GpuFlags.ALLOC_HOST,
    }[kind]
    if all_devices:
        flags |= GpuFlags.ALLOC_GLOBAL
    return flags
