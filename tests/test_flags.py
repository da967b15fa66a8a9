"""AML's GPU area flags decoded once (aml_core.gpu.flags.decode_flags): every one of the 16
flag subsets against AML's table (docs/aml-contract.md#hip-area), the checks, and the
names kept for existing callers."""

from __future__ import annotations

import pytest

from aml_core.errors import AMLTypeError, AMLValueError
from aml_core.gpu.flags import (
    AllocMode,
    DecodedFlags,
    GpuFlags,
    decode_flags,
    flags_for_kind,
    kind_of_flags,
    mode_of_flags,
)
from aml_core.specs import Kind

H, U, M, G = GpuFlags.ALLOC_HOST, GpuFlags.ALLOC_UNIFIED, GpuFlags.ALLOC_MAPPED, GpuFlags.ALLOC_GLOBAL

# AML's area, written out flag set by flag set (ALLOC_GLOBAL excluded: it only widens).
TABLE: dict[int, tuple[AllocMode, Kind]] = {
    0: (AllocMode.DEVICE, Kind.DEVICE),
    H: (AllocMode.HOST, Kind.HOST),
    M: (AllocMode.REGISTERED, Kind.MAPPED),
    H | M: (AllocMode.HOST_MAPPED, Kind.MAPPED),
    U: (AllocMode.MANAGED, Kind.MANAGED),
    U | H: (AllocMode.MANAGED, Kind.MANAGED),  # ALLOC_UNIFIED wins: ALLOC_HOST ignored
    U | M: (AllocMode.MANAGED, Kind.MANAGED),  # and ALLOC_MAPPED ignored
    U | H | M: (AllocMode.MANAGED, Kind.MANAGED),
}


@pytest.mark.parametrize("flags", range(16))
def test_every_flag_set(flags: int) -> None:
    mode, kind = TABLE[flags & ~G]
    decoded = decode_flags(flags)
    assert decoded == DecodedFlags(GpuFlags(flags), mode, kind, bool(flags & G))
    assert type(decoded.flags) is GpuFlags
    assert mode_of_flags(GpuFlags(flags)) is mode
    assert kind_of_flags(GpuFlags(flags)) is kind


@pytest.mark.parametrize("bad", [16, 0x100, -1])
def test_unknown_bits_are_einval(bad: int) -> None:
    with pytest.raises(AMLValueError, match="unknown area flag bits"):
        decode_flags(bad)


@pytest.mark.parametrize("wrong", [True, 1.0, "1", None])
def test_wrong_types(wrong: object) -> None:
    with pytest.raises(AMLTypeError):
        decode_flags(wrong)


@pytest.mark.parametrize("kind", list(Kind))
@pytest.mark.parametrize("all_devices", [False, True])
def test_flags_for_a_kind_decode_to_it(kind: Kind, all_devices: bool) -> None:
    decoded = decode_flags(flags_for_kind(kind, all_devices=all_devices))
    assert decoded.kind is kind
    assert decoded.all_devices is all_devices
    # MAPPED from aml_core.area(kind=...) allocates mapped memory, never the caller's.
    assert decoded.mode is not AllocMode.REGISTERED
