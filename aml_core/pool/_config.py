"""A pool's configuration, declared once (:class:`PoolConfig`): each field with its type,
its default and its rule, validated when the value is made. :func:`~aml_core.pool.pool`,
:class:`~aml_core.pool.Pool` and the allocator kernel (aml_core/_kernel.pyx) all take it;
the kernel reads the fields by name.

Adding a knob: a field here (with its converter or validator, and its key in
:class:`PoolConfigFields`), and its policy in the kernel (its C field in _kernel.pxd).
``max_split_size`` and ``initial_size`` were added so."""

from __future__ import annotations

from typing import TypedDict

import attrs

from .. import checks
from ..errors import AMLTypeError, AMLValueError

__all__ = ["PoolConfig", "PoolConfigFields"]

KiB = 1 << 10
MiB = 1 << 20


def _round_up(n: int, to: int) -> int:
    return -(-n // to) * to


def _limit(value: object) -> int | float | None:
    """A limit in bytes (an int), a fraction in (0, 1] of the device's memory (a float),
    or None (the pool resolves a fraction against its area)."""
    if value is None:
        return None
    if isinstance(value, float):
        if not 0.0 < value <= 1.0:
            raise AMLValueError(
                f"a limit's fraction must be in (0, 1], got {value!r} (a limit in bytes is an int)"
            )
        return value
    return checks.size(value, "limit")


def _release_threshold(value: object) -> int | None:
    return None if value is None else checks.size(value, "release_threshold", zero=True)


def _granule(value: object) -> int:
    return checks.power_of_two(checks.size(value, "granule"), "granule")


def _small_max(value: object) -> int:
    return checks.size(value, "small_max")


def _small_slab(value: object) -> int:
    return checks.size(value, "small_slab")


def _medium_slab(value: object) -> int:
    return checks.size(value, "medium_slab")


def _max_split_size(value: object) -> int | None:
    return None if value is None else checks.size(value, "max_split_size")


def _initial_size(value: object) -> int:
    return checks.size(value, "initial_size", zero=True)


def _expandable(value: object) -> bool:
    if not isinstance(value, bool):
        raise AMLTypeError(f"expandable must be a bool, not {type(value).__name__}")
    return value


def _capacity(value: object) -> int | None:
    return None if value is None else checks.size(value, "capacity")


@attrs.frozen(kw_only=True)
class PoolConfig:
    """A pool's configuration (see :mod:`aml_core.pool` for what each field does). Every
    field is checked when the config is made: a wrong type is AMLTypeError, a value out
    of its range AMLValueError (both EINVAL); an unknown field is AMLTypeError."""

    #: The most bytes the pool may hold from the area (an int), or that fraction of the
    #: device's memory (a float in (0, 1]); None: no limit.
    limit: int | float | None = attrs.field(default=None, converter=_limit)
    #: The most cached (free) bytes kept after a munmap (None: keep all).
    release_threshold: int | None = attrs.field(default=None, converter=_release_threshold)
    #: Block granularity: sizes are rounded up to it (a power of two).
    granule: int = attrs.field(default=512, converter=_granule)
    #: Requests up to this size share ``small_slab``-byte slabs.
    small_max: int = attrs.field(default=1 * MiB, converter=_small_max)
    small_slab: int = attrs.field(default=2 * MiB, converter=_small_slab)
    #: The slab size for larger requests below half of it (bigger ones get their own).
    medium_slab: int = attrs.field(default=20 * MiB, converter=_medium_slab)
    #: Blocks larger than this are never split, and a request of at most this size never
    #: takes one (PyTorch's ``max_split_size_mb``); None: every block may be split. At
    #: least ``medium_slab``, so that the slabs grown for smaller requests split.
    max_split_size: int | None = attrs.field(default=None, converter=_max_split_size)
    #: Bytes reserved from the area when the pool is made, kept cached for the first
    #: requests (RMM's ``initial_pool_size``): the slab a request of that size gets (at
    #: least that many bytes); trim() may release it; 0: none.
    initial_size: int = attrs.field(default=0, converter=_initial_size)
    #: One growing segment over a VirtualMemory area, reserving ``capacity`` bytes of
    #: addresses (default: the limit in bytes, or 1 TiB).
    expandable: bool = attrs.field(default=False, converter=_expandable)
    capacity: int | None = attrs.field(default=None, converter=_capacity)

    def __attrs_post_init__(self) -> None:
        if self.small_max < self.granule or self.small_slab < self.small_max:
            raise AMLValueError(
                "need granule <= small_max <= small_slab, got "
                f"{self.granule}, {self.small_max}, {self.small_slab}"
            )
        if self.capacity is not None and not self.expandable:
            raise AMLValueError("capacity is for expandable pools (expandable=True)")
        if self.max_split_size is not None and self.max_split_size < self.medium_slab:
            raise AMLValueError(
                f"max_split_size must be at least medium_slab ({self.medium_slab}): the slabs grown "
                f"for smaller requests must split, got {self.max_split_size}"
            )

    @classmethod
    def of(cls, config: PoolConfig | None, fields: dict[str, object]) -> PoolConfig:
        """``config`` with ``fields`` replaced (keywords of pool() and Pool), checked."""
        base = cls() if config is None else config
        if not isinstance(base, PoolConfig):
            raise AMLTypeError(f"config must be a PoolConfig, not {type(base).__name__}")
        if not fields:
            return base
        known = {a.name for a in attrs.fields(cls)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise AMLTypeError(f"unknown pool setting {unknown[0]!r}; known: {', '.join(sorted(known))}")
        return attrs.evolve(base, **fields)

    def layout(self) -> tuple[int, int, int, int]:
        """(granule, small_max, small_slab, medium_slab), the slabs rounded to the granule."""
        g = self.granule
        return g, self.small_max, _round_up(self.small_slab, g), _round_up(self.medium_slab, g)


class PoolConfigFields(TypedDict, total=False):
    """:class:`PoolConfig`'s fields as keywords of :func:`~aml_core.pool.pool` and
    :class:`~aml_core.pool.Pool` (typed; a test checks the two agree)."""

    limit: int | float | None
    release_threshold: int | None
    granule: int
    small_max: int
    small_slab: int
    medium_slab: int
    max_split_size: int | None
    initial_size: int
    expandable: bool
    capacity: int | None
