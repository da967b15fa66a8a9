"""The HSA virtual-memory API under the vendor's names (HSA-only: aml-cuda and aml-hip
have no such functions; their shared API is :func:`aml_hsa.virtual_memory`).

Each function is one ``hsa_amd_vmem_*`` call of the loaded runtime, flag for flag and
status for status, with ROCr's documented rules checked first (see
:class:`aml_hsa.runtime.HsaRuntime`) and every reservation, handle and mapping tracked.
Statuses become AML errors through the one table of :mod:`aml_hsa.errors`.

Example (the sequence of ROCr's own virtual-memory test)::

    import aml_hsa
    from aml_hsa import MemoryType, Permission

    gpu = aml_hsa.agents()[1]                      # a GPU agent
    pool = aml_hsa.device_pool(0)                  # its coarse-grained pool
    g = pool.granule
    va = aml_hsa.address_reserve(20 * g)
    h = aml_hsa.handle_create(pool, g, MemoryType.PINNED)
    aml_hsa.map(va, g, h)
    aml_hsa.set_access(va, g, [(gpu, Permission.RW)])
    fd = aml_hsa.export_shareable_handle(h)        # a dma-buf fd for another process
    aml_hsa.unmap(va, g); aml_hsa.handle_release(h); aml_hsa.address_free(va, 20 * g)
"""

from __future__ import annotations

from collections.abc import Sequence

from .api import get_runtime
from .runtime import Agent, MemoryType, Permission, Pool

# The public names are listed once, in aml_hsa/__init__.py (its lazy exports).


def agents() -> tuple[Agent, ...]:
    """Every agent (``hsa_iterate_agents``), CPUs and GPUs, in the runtime's order."""
    return get_runtime().agents


def pools(agent: Agent | int) -> tuple[Pool, ...]:
    """The memory pools of an agent (``hsa_amd_agent_iterate_memory_pools``) with their info."""
    rt = get_runtime()
    return rt.pools[rt.agent(agent).handle]


def device_pool(device: int = 0) -> Pool:
    """The coarse-grained global pool of GPU ``device`` (its device memory)."""
    return get_runtime().device_pool(device)


def host_pool() -> Pool:
    """A fine-grained global pool of a CPU agent (host memory every agent can reach)."""
    return get_runtime().host_pool()


def address_reserve(size: int, address: int = 0, flags: int = 0) -> int:
    """``hsa_amd_vmem_address_reserve``: ``size`` a multiple of the page size, ``address``
    a hint, ``flags`` 0. Returns the reserved address."""
    return get_runtime().vmem_address_reserve(size, address, flags)


def address_reserve_align(size: int, address: int = 0, alignment: int = 0, flags: int = 0) -> int:
    """``hsa_amd_vmem_address_reserve_align`` (interface 1.6, ROCm 6.2+; ENOTSUP before):
    ``alignment`` 0 or a power of two >= the page size."""
    return get_runtime().vmem_address_reserve(size, address, flags, alignment)


def address_free(va: int, size: int) -> None:
    """``hsa_amd_vmem_address_free``: ``size`` is the reserved size; a range that still
    holds a mapping is EBUSY (ROCr's RESOURCE_FREE)."""
    get_runtime().vmem_address_free(va, size)


def handle_create(pool: Pool | int, size: int, type: MemoryType = MemoryType.NONE, flags: int = 0) -> int:
    """``hsa_amd_vmem_handle_create``: ``size`` a multiple of the pool's granule
    (``Pool.granule``; ``Pool.rec_granule`` avoids fragmentation), ``flags`` 0."""
    return get_runtime().vmem_handle_create(get_runtime().pool(pool), size, type, flags)


def handle_release(handle: int) -> None:
    """``hsa_amd_vmem_handle_release``: one release per create, import or retain."""
    get_runtime().vmem_handle_release(handle)


def map(va: int, size: int, handle: int, offset: int = 0, flags: int = 0) -> None:
    """``hsa_amd_vmem_map``: ``size`` is the handle's size, ``[va, va+size)`` inside a
    reservation and over no other mapping; ``offset`` and ``flags`` 0."""
    get_runtime().vmem_map(va, size, handle, offset, flags)


def unmap(va: int, size: int) -> None:
    """``hsa_amd_vmem_unmap`` of a whole mapping (its address and size)."""
    get_runtime().vmem_unmap(va, size)


def set_access(va: int, size: int, access: Sequence[tuple[Agent | int, Permission | int]]) -> None:
    """``hsa_amd_vmem_set_access``: ``[(agent, Permission), ...]`` for a whole mapping;
    it replaces the permissions set before."""
    get_runtime().vmem_set_access(va, size, access)


def get_access(va: int, agent: Agent | int) -> Permission:
    """``hsa_amd_vmem_get_access``: the agent's permission on a mapped address (NONE
    before any set_access)."""
    return get_runtime().vmem_get_access(va, agent)


def export_shareable_handle(handle: int, flags: int = 0) -> int:
    """``hsa_amd_vmem_export_shareable_handle``: a dma-buf file descriptor (the caller
    closes it; send it to another process over a Unix socket)."""
    return get_runtime().vmem_export_shareable_handle(handle, flags)


def import_shareable_handle(fd: int) -> int:
    """``hsa_amd_vmem_import_shareable_handle``: a handle for an exported allocation (the
    fd is not closed; release the handle)."""
    return get_runtime().vmem_import_shareable_handle(fd)


def retain_alloc_handle(addr: int) -> int:
    """``hsa_amd_vmem_retain_alloc_handle``: the handle mapped at ``addr``, one more
    reference (release it)."""
    return get_runtime().vmem_retain_alloc_handle(addr)


def get_alloc_properties_from_handle(handle: int) -> tuple[Pool, MemoryType]:
    """``hsa_amd_vmem_get_alloc_properties_from_handle``: the handle's pool and type."""
    return get_runtime().vmem_get_alloc_properties(handle)
