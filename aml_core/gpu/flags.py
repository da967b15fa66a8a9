"""AML's GPU area flags (``AML_AREA_HIP_FLAG_*``, docs/aml-contract.md#hip-area), shared by CUDA and HIP.

A flag word is decoded once, by :func:`decode_flags`, into a :class:`DecodedFlags` (the
mode, the kind, ALLOC_GLOBAL) that the area and everything below it read; AML's flag
precedence is written there only.
"""

from __future__ import annotations

import enum

import attrs

from .. import checks
from ..errors import AMLValueError
from ..specs import Kind

__all__ = [
    "AllocMode",
    "DecodedFlags",
    "GpuFlags",
    "check_flags",
    "decode_flags",
    "flags_for_kind",
    "kind_of_flags",
    "mode_of_flags",
]


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
    """How an area of given flags allocates, in AML's precedence (see :class:`GpuFlags`).
    The values of DEVICE, MANAGED and HOST name the compiled allocator's modes
    (``AreaBase._set_native``)."""

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


#: The portable kind each mode allocates.
_KIND_OF_MODE = {
    AllocMode.DEVICE: Kind.DEVICE,
    AllocMode.MANAGED: Kind.MANAGED,
    AllocMode.HOST: Kind.HOST,
    AllocMode.HOST_MAPPED: Kind.MAPPED,
    AllocMode.REGISTERED: Kind.MAPPED,
}


@attrs.frozen
class DecodedFlags:
    """A flag set decoded once (:func:`decode_flags`): what a :class:`~aml_core.gpu.GpuArea`
    and everything below it (the Python allocation path, the compiled allocator's mode and
    native flags, the native records) read instead of testing flag bits again."""

    #: The checked flags, as given.
    flags: GpuFlags
    #: What the area allocates (AML's precedence).
    mode: AllocMode
    #: The portable kind of that memory.
    kind: Kind
    #: ALLOC_GLOBAL: managed memory attached global, host memory portable.
    all_devices: bool


def decode_flags(flags: object) -> DecodedFlags:
    """Check ``flags`` (:func:`check_flags`: unknown bits are EINVAL) and decode them in
    AML's precedence, the one place it is written: ALLOC_UNIFIED (managed; ALLOC_HOST and
    ALLOC_MAPPED ignored), then ALLOC_MAPPED (with ALLOC_HOST: allocated mapped host
    memory; alone: the caller's memory registered), then ALLOC_HOST, else device memory.
    ALLOC_GLOBAL is orthogonal (``all_devices``)."""
    checked = check_flags(flags)
    if checked & GpuFlags.ALLOC_UNIFIED:
        mode = AllocMode.MANAGED
    elif checked & GpuFlags.ALLOC_MAPPED:
        mode = AllocMode.HOST_MAPPED if checked & GpuFlags.ALLOC_HOST else AllocMode.REGISTERED
    elif checked & GpuFlags.ALLOC_HOST:
        mode = AllocMode.HOST
    else:
        mode = AllocMode.DEVICE
    return DecodedFlags(checked, mode, _KIND_OF_MODE[mode], bool(checked & GpuFlags.ALLOC_GLOBAL))


def mode_of_flags(flags: GpuFlags) -> AllocMode:
    """What an area of these flags allocates (``decode_flags(flags).mode``)."""
    return decode_flags(flags).mode


def kind_of_flags(flags: GpuFlags) -> Kind:
    """The portable kind an AML flag set allocates (``decode_flags(flags).kind``)."""
    return decode_flags(flags).kind


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
