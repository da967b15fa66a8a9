"""A pool's configuration (aml_core.pool.PoolConfig, issue 31 item 2): each field's rule,
checked once when the config is made (pool(), Pool and the kernel take the same frozen
value); and the two knobs added through it: ``max_split_size`` (blocks above it are never
split, and a request at most its size never takes one: PyTorch's max_split_size_mb) and
``initial_size`` (reserved when the pool is made: RMM's initial_pool_size)."""

from __future__ import annotations

import typing

import attrs
import pytest

import aml_core
from aml_core.errors import AMLMemoryError, AMLTypeError, AMLValueError
from aml_core.host import HostArea
from aml_core.pool import PoolConfig, PoolConfigFields

MiB = 1 << 20


@pytest.fixture
def host() -> typing.Iterator[HostArea]:
    with HostArea() as area:
        yield area


def test_the_config_is_frozen_and_shared(host: HostArea) -> None:
    config = PoolConfig(limit=64 * MiB, granule=4096)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.granule = 512  # type: ignore[misc]
    with aml_core.pool(host, config) as a, aml_core.pool(host, config, release_threshold=0) as b:
        assert a.config is config  # taken as it is: checked once, when it was made
        assert b.config == attrs.evolve(config, release_threshold=0)
        assert a.limit == b.limit == 64 * MiB
        assert a._kernel.granule == 4096


def test_the_keywords_are_the_fields() -> None:
    """pool() and Pool take PoolConfig's fields as keywords: the TypedDict of their
    ``**fields`` names each field, with the same annotation."""
    assert typing.get_type_hints(PoolConfigFields) == typing.get_type_hints(PoolConfig)


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"granule": 3}, AMLValueError, "granule"),
        ({"granule": "512"}, AMLTypeError, "granule"),
        ({"small_max": 0}, AMLValueError, "small_max"),
        ({"small_max": 256}, AMLValueError, "granule <= small_max"),
        ({"small_slab": 4096}, AMLValueError, "small_max <= small_slab"),
        ({"release_threshold": -1}, AMLValueError, "release_threshold"),
        ({"release_threshold": 1.5}, AMLTypeError, "release_threshold"),
        ({"limit": 0.0}, AMLValueError, "fraction"),
        ({"limit": 1.5}, AMLValueError, "fraction"),
        ({"limit": "1G"}, AMLTypeError, "limit"),
        ({"limit": True}, AMLTypeError, "limit"),
        ({"capacity": 1 << 30}, AMLValueError, "expandable"),
        ({"expandable": 1}, AMLTypeError, "expandable"),
        ({"max_split_size": 0}, AMLValueError, "max_split_size"),
        ({"max_split_size": MiB}, AMLValueError, "at least medium_slab"),
        ({"max_split_size": 64.0}, AMLTypeError, "max_split_size"),
        ({"initial_size": -1}, AMLValueError, "initial_size"),
        ({"initial_size": None}, AMLTypeError, "initial_size"),
    ],
)
def test_each_field_is_checked_once_when_made(
    host: HostArea, fields: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        PoolConfig(**fields)  # type: ignore[arg-type]
    with pytest.raises(error, match=message):
        aml_core.pool(host, **fields)  # type: ignore[arg-type]
    assert host.stats.live_mappings == 0


def test_unknown_settings_are_type_errors(host: HostArea) -> None:
    with pytest.raises(TypeError):
        PoolConfig(granularity=512)  # type: ignore[call-arg]
    with pytest.raises(AMLTypeError, match="unknown pool setting 'granularity'"):
        aml_core.pool(host, granularity=512)  # type: ignore[call-arg]
    with pytest.raises(AMLTypeError, match="must be a PoolConfig"):
        aml_core.pool(host, {"granule": 512})  # type: ignore[arg-type]


def test_max_split_size_never_splits_a_block_above_it(host: HostArea) -> None:
    """A 40 MiB block (its own slab) freed: with max_split_size=32 MiB a 12 MiB request
    does not split it (a new slab instead, as PyTorch does), and a 40 MiB one reuses it;
    without the setting the 12 MiB request is carved from it."""
    with aml_core.pool(host, max_split_size=32 * MiB) as p:
        assert p._kernel.max_split_size == 32 * MiB
        big = p.mmap(40 * MiB)
        p.munmap(big)
        small = p.mmap(12 * MiB)
        assert not big.ptr <= small.ptr < big.ptr + 40 * MiB
        again = p.mmap(40 * MiB)
        assert again.ptr == big.ptr
        assert p.pool_stats.block_bytes == 40 * MiB + 12 * MiB
        p.munmap(again)
        p.munmap(small)
    with aml_core.pool(host) as p:
        assert p._kernel.max_split_size is None
        big = p.mmap(40 * MiB)
        p.munmap(big)
        small = p.mmap(12 * MiB)
        assert small.ptr == big.ptr  # split from the cached block
        p.munmap(small)


def test_max_split_size_keeps_an_oversize_block_whole_for_a_request_below_it(host: HostArea) -> None:
    with aml_core.pool(host, max_split_size=32 * MiB) as p:
        big = p.mmap(34 * MiB)
        p.munmap(big)
        mid = p.mmap(30 * MiB)  # at most max_split_size: never takes the 34 MiB block
        assert mid.ptr != big.ptr
        assert p.pool_stats.slabs == 2
        p.munmap(mid)


def test_initial_size_is_reserved_when_the_pool_is_made(host: HostArea) -> None:
    """At least ``initial_size`` bytes, as the slab a request of that size gets (slabs
    above 10 MiB are rounded up to 2 MiB; smaller ones are the medium slab)."""
    with aml_core.pool(host, initial_size=24 * MiB + 1) as p:
        s = p.pool_stats
        assert (s.bytes_reserved, s.bytes_cached, s.slabs, s.native_allocations) == (26 * MiB, 26 * MiB, 1, 1)
        assert host.stats.live_mappings == 1
        buf = p.mmap(24 * MiB)  # from the initial slab: no native call
        assert p.pool_stats.native_allocations == 1
        assert p.pool_stats.pool_hits == 1
        p.munmap(buf)
    assert host.stats.live_mappings == 0


def test_an_initial_size_past_the_limit_is_enomem_and_leaves_nothing(host: HostArea) -> None:
    with pytest.raises(AMLMemoryError, match="limit"):
        aml_core.pool(host, limit=4 * MiB, initial_size=8 * MiB)
    assert host.stats.live_mappings == 0
    assert not list(host._pools)
