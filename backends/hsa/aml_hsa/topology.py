"""HSA's topology as aml-hsa reads it: agents (``hsa_agent_t``) and their memory pools
(``hsa_amd_memory_pool_t``) with their info attributes, and the enums of agent types,
segments, pool locations and of virtual memory's permissions and memory types.
:class:`aml_hsa.runtime.HsaRuntime` discovers them; :mod:`aml_hsa.runtime` re-exports them.
"""

from __future__ import annotations

import enum

import attrs

from . import abi as C

__all__ = ["Agent", "AgentType", "MemoryType", "Permission", "Pool", "PoolLocation", "Segment"]


class AgentType(enum.IntEnum):
    """``hsa_device_type_t``."""

    CPU = C.HSA_DEVICE_TYPE_CPU
    GPU = C.HSA_DEVICE_TYPE_GPU
    DSP = C.HSA_DEVICE_TYPE_DSP


class Segment(enum.IntEnum):
    """``hsa_amd_segment_t``."""

    GLOBAL = C.HSA_AMD_SEGMENT_GLOBAL
    READONLY = C.HSA_AMD_SEGMENT_READONLY
    PRIVATE = C.HSA_AMD_SEGMENT_PRIVATE
    GROUP = C.HSA_AMD_SEGMENT_GROUP


class PoolLocation(enum.IntEnum):
    """``hsa_amd_memory_pool_location_t`` (6.0+; derived from the owner agent before)."""

    CPU = C.HSA_AMD_MEMORY_POOL_LOCATION_CPU
    GPU = C.HSA_AMD_MEMORY_POOL_LOCATION_GPU


class Permission(enum.IntEnum):
    """``hsa_access_permission_t``: NONE (6.0+), RO, WO, RW."""

    NONE = C.HSA_ACCESS_PERMISSION_NONE
    RO = C.HSA_ACCESS_PERMISSION_RO
    WO = C.HSA_ACCESS_PERMISSION_WO
    RW = C.HSA_ACCESS_PERMISSION_RW


class MemoryType(enum.IntEnum):
    """``hsa_amd_memory_type_t`` (``MEMORY_TYPE_NONE``, ``MEMORY_TYPE_PINNED``)."""

    NONE = C.MEMORY_TYPE_NONE
    PINNED = C.MEMORY_TYPE_PINNED


@attrs.frozen
class Agent:
    """An HSA agent (``hsa_agent_t``). ``device`` is its device index among GPU agents
    (None for other agents)."""

    handle: int
    type: AgentType
    name: str
    node: int
    device: int | None = None


@attrs.frozen
class Pool:
    """A memory pool (``hsa_amd_memory_pool_t``) of an agent, with its info attributes."""

    handle: int
    agent: Agent
    segment: Segment
    #: HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_* bits (0 outside the global segment).
    global_flags: int
    size: int
    alloc_allowed: bool
    #: RUNTIME_ALLOC_GRANULE / REC_GRANULE / ALIGNMENT (0 where allocation is not allowed;
    #: the recommended granule is the granule where the library predates 6.0).
    granule: int
    rec_granule: int
    alignment: int
    location: PoolLocation
    accessible_by_all: bool = False

    @property
    def fine_grained(self) -> bool:
        return bool(self.global_flags & C.HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED)

    @property
    def coarse_grained(self) -> bool:
        return bool(self.global_flags & C.HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED)

    @property
    def kernarg(self) -> bool:
        return bool(self.global_flags & C.HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT)
