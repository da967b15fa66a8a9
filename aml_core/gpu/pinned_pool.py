"""An exact-size, NUMA-placed pinned host pool (issue 33, item 6).

``PinnedPool(runtime, node)`` (``aml_cuda.pinned_pool(node)``, ``aml_hip.pinned_pool(node)``)
is an area of pinned (page-locked, device-visible) host memory on one NUMA node. Each
block is its own mapping of a bound host area (:class:`~aml_core.host.HostArea` with
``Policy.BIND`` on ``node``), of the size asked rounded up to the pool's ``granule`` (the
page size by default) and nothing more, populated and placed on the node before it is
pinned (``MAP_POPULATE``, then ``mbind`` with ``MPOL_MF_MOVE | MPOL_MF_STRICT``, the host
area's rule for a populated mapping: a node without room is ENOMEM, never a spill and never
the OOM killer, which faulting the pages in under the bound policy called in the NUMA lab's
full node), then registered with the GPU runtime (``cudaHostRegister`` /
``hipHostRegister``, portable by default). A freed block is kept for a request of the
same rounded size, up to ``max_cached`` bytes (a fraction of the bytes in use, 5 % by
default, or a count of bytes), so that a workload of a few block sizes (a KV-cache
offload) registers each block once; past that the block is unregistered and unmapped.
So the host memory the pool holds is at most ``(1 + max_cached)`` times the bytes its
live blocks take, each rounded to the granule: PyTorch's pinned allocator rounds every
block to a power of two (pytorch#150517).

Blocks are host buffers (the buffer protocol and DLPack ``kDLCPU``):
``numpy.frombuffer(buf, dtype)`` and ``torch.from_dlpack(buf)`` see the memory without a
copy; the runtime knows it as registered host memory, so a PyTorch CPU tensor over it is
``is_pinned()`` and its ``non_blocking`` copies are asynchronous (on a GPU; not run in this
session's CPU-only verification).

Errors (the area table of :mod:`aml_core.area` holds, and):

* ``node`` not an int: AMLTypeError; a node the machine does not have, or this process
  may not use: :class:`~aml_core.errors.AMLDomainError` (EDOM); a node without CPUs (a
  CXL- or HBM-like memory node) unless ``allow_cpu_less=True``:
  :class:`~aml_core.errors.AMLValueError` (EINVAL), since pinned staging memory is
  filled and drained by CPUs and a CPU-less node is far from all of them;
* ``granule`` not a power of two, or below the page size: AMLValueError;
* a block past ``limit`` (bytes the pool may hold), after releasing the cache:
  :class:`~aml_core.errors.AMLMemoryError` (ENOMEM); a node without free pages:
  ENOMEM from placing its pages;
* the registration failing: the runtime's error through its backend's table (ENOMEM
  for ``cudaErrorMemoryAllocation`` / ``hipErrorOutOfMemory``...), with the mapping
  unmapped: nothing is left behind;
* the unregistration failing on munmap: the runtime's error, and the block stays live
  (as every area's failed free: munmap or close() again retries).
"""

from __future__ import annotations

import collections
import mmap as _mmap
from typing import TYPE_CHECKING, Any

import attrs

from .. import _os, checks
from ..area import Area, NoOptions, NoOptionsDict, compiled_mmap
from ..buffer import Buffer, DLDeviceType, native_as
from ..errors import AMLDomainError, AMLError, AMLMemoryError, AMLTypeError, AMLValueError
from ..host import numa
from ..host.area import HostArea, HostMmapOptions
from ..host.numa import Policy
from ..specs import Capability, Kind, format_size
from ..stream import StreamLike
from ..topology import current_node, numa_nodes

if TYPE_CHECKING:
    from .ops_memory import AllocationOps

__all__ = ["PinnedPool", "PinnedPoolStats"]

PAGE_SIZE = _os.PAGE_SIZE
#: A block's mapping: populated, so that the host area moves its pages onto the node
#: strictly (ENOMEM when they do not fit) before the runtime pins them.
_POPULATED = HostMmapOptions(flags=getattr(_mmap, "MAP_POPULATE", 0x8000))  # docs/native-abi.md
_CPU = (int(DLDeviceType.CPU), 0)


@attrs.frozen
class PinnedPoolStats:
    """What a pinned pool holds (bytes), and how often it went to the runtime."""

    #: Bytes the live blocks were asked for.
    bytes_requested: int
    #: Bytes of host memory the pool holds: live blocks (each rounded to the granule)
    #: and cached ones. Every one of them is pinned.
    bytes_reserved: int
    #: Of ``bytes_reserved``, the cached (free) blocks.
    bytes_cached: int
    peak_bytes_requested: int
    peak_bytes_reserved: int
    live_blocks: int
    cached_blocks: int
    #: Requests served from the cache, and by a new registered mapping.
    hits: int
    misses: int
    #: ``cudaHostRegister`` / ``hipHostRegister`` calls that succeeded, and unregisterings.
    registrations: int
    unregistrations: int

    @property
    def overhead(self) -> float:
        """``bytes_reserved / bytes_requested`` (1.0 with nothing requested)."""
        return self.bytes_reserved / self.bytes_requested if self.bytes_requested else 1.0


def _max_cached(value: object) -> int | float:
    if isinstance(value, float):
        if not 0.0 <= value <= 1.0:
            raise AMLValueError(f"max_cached as a fraction must be in [0, 1], got {value!r}")
        return value
    return checks.size(value, "max_cached", zero=True)


def _granule(value: object) -> int:
    granule = checks.power_of_two(checks.size(value, "granule"), "granule")
    if granule < PAGE_SIZE:
        raise AMLValueError(f"granule must be at least the page size ({PAGE_SIZE}), got {granule}")
    return granule


def _bool(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise AMLTypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def check_node(node: object, *, allow_cpu_less: bool) -> int:
    """``node`` checked for a pinned pool: an int the machine has and this process may use
    (else AMLDomainError), with CPUs unless ``allow_cpu_less`` (else AMLValueError)."""
    number = checks.integer(node, "node")
    nodes = {n.node: n for n in numa_nodes()}
    if nodes and number not in nodes:
        raise AMLDomainError(f"NUMA node {number} does not exist on this machine (nodes {sorted(nodes)})")
    if not nodes and number != 0:  # no NUMA in sysfs: node 0 is the machine
        raise AMLDomainError(f"NUMA node {number} does not exist: this machine shows no NUMA nodes")
    numa.as_nodes(number)  # EDOM outside Mems_allowed
    described = nodes.get(number)
    if described is not None and not described.has_cpu and not allow_cpu_less:
        raise AMLValueError(
            f"NUMA node {number} has no CPUs (CXL- or HBM-like memory): pinned staging memory is "
            "written and read by CPUs, and every CPU is far from it; pass allow_cpu_less=True to "
            "place the pool there anyway"
        )
    return number


class PinnedPool(Area):
    """Pinned host memory on one NUMA node, in blocks of the size asked (see the module doc)."""

    def __init__(
        self,
        runtime: AllocationOps,
        node: int | None = None,
        *,
        granule: int = PAGE_SIZE,
        max_cached: int | float = 0.05,
        limit: int | None = None,
        portable: bool = True,
        mapped: bool = False,
        allow_cpu_less: bool = False,
    ) -> None:
        """A pinned pool over ``runtime`` (a GPU runtime: what registers the memory) on
        ``node`` (None: the node of the CPU the calling thread runs on, or 0). ``granule``:
        block sizes are rounded up to it (a power of two, at least the page size);
        ``max_cached``: the most cached bytes, a fraction of the bytes in use (a float in
        [0, 1]) or a count (an int); ``limit``: the most bytes the pool may hold (None: no
        limit); ``portable`` / ``mapped``: the registration's flags (pinned for every
        device's context; mapped into the device's address space)."""
        allow = _bool(allow_cpu_less, "allow_cpu_less")
        if node is None:
            node = current_node() or 0
        self.node = check_node(node, allow_cpu_less=allow)
        self.granule = _granule(granule)
        self.max_cached = _max_cached(max_cached)
        self.limit = None if limit is None else checks.size(limit, "limit")
        self.portable = _bool(portable, "portable")
        self.mapped = _bool(mapped, "mapped")
        self.runtime = runtime
        huge = self.granule >= 2 << 20
        self._host = HostArea(
            Policy.BIND,
            self.node,
            transparent_huge_pages="auto" if huge else False,
            alignment=self.granule if huge else 0,
        )
        #: Cached blocks by length, oldest first: each a slab (the host area's buffer).
        self._cache: dict[int, collections.deque[Buffer]] = {}
        self._order: collections.OrderedDict[int, Buffer] = collections.OrderedDict()  # ptr -> slab
        #: Every slab the pool holds (live blocks' and cached), by address.
        self._slabs: dict[int, Buffer] = {}
        self._requested = self._live_reserved = self._cached = 0
        self._peak_requested = self._peak_reserved = 0
        self._live = 0
        self._hits = self._misses = self._registrations = self._unregistrations = 0
        name = runtime.traits.name
        caps = Capability.PINNED | Capability.NUMA | Capability.BUFFER_PROTOCOL | Capability.DLPACK
        super().__init__(backend=name, kind=Kind.HOST, device=None, capabilities=caps)
        # self._lock (the area's AreaLock) guards the counters and the cache: a holder
        # counts as inside the area, so a GC-driven free waits instead of re-entering.

    # -- the area ----------------------------------------------------------------------------
    @compiled_mmap
    def mmap(
        self, size: int, options: NoOptions | NoOptionsDict | None = None, *, stream: StreamLike = None
    ) -> Buffer:
        """Take a pinned block of ``size`` bytes on the pool's node: a cached block of the
        same rounded size (``size`` rounded up to the granule), else a new mapping bound to
        the node, its pages placed, registered with the runtime. The buffer is ``size``
        bytes at the block's address.

        Options: none (None or ``{}``); no ``stream`` either (host memory, in host order).

        Errors of the pinned pool: :class:`~aml_core.errors.AMLMemoryError` when the block
        would pass ``limit`` even after the cache is released, or the node has no free
        pages; the runtime's error (through its backend's table) when the registration
        fails, with nothing left mapped."""
        return super().mmap(size, options)

    def _allocate(self, size: int, options: Any) -> Buffer:
        length = -(-size // self.granule) * self.granule
        if length > checks.MAX_SIZE:
            raise AMLMemoryError(f"{format_size(size)} rounded up to the granule is more than can be mapped")
        slab = self._take(length)
        if slab is None:
            slab = self._register(length)
        with self._lock:
            self._requested += size
            self._live += 1
            self._peak_requested = max(self._peak_requested, self._requested)
        # The slab stays in self._slabs, never in the block's Buffer: a block dropped in a
        # garbage cycle must not take its slab (a host-area Buffer) down with it first.
        return self._new_buffer(slab.ptr, size, host_accessible=True, dl_device=_CPU, native=slab.size)

    def _free(self, buffer: Buffer) -> None:
        slab = self._slab(buffer)
        length = slab.size
        with self._lock:
            self._requested -= buffer.size
            self._live -= 1
            self._live_reserved -= length
            keep = not self.closed and self._cached + length <= self._budget()
            if keep:
                self._cache.setdefault(length, collections.deque()).append(slab)
                self._order[slab.ptr] = slab
                self._cached += length
            release = self._over_budget()
        try:
            if not keep:
                self._release(slab)
        except AMLError:
            with self._lock:  # the block stays live (the area's rule for a failed free)
                self._requested += buffer.size
                self._live += 1
                self._live_reserved += length
            raise
        finally:
            self._release_all(release)
            if self.closed:
                self._close_host()

    # -- the cache ---------------------------------------------------------------------------
    def _budget(self) -> float:
        """The most cached bytes now (call with ``_state`` held)."""
        if isinstance(self.max_cached, float):
            return self.max_cached * self._live_reserved
        return self.max_cached

    def _over_budget(self) -> list[Buffer]:
        """Cached slabs to release, oldest first, so that the cache fits its budget (call
        with ``_state`` held; they are out of the cache on return)."""
        out: list[Buffer] = []
        budget = self._budget() if not self.closed else 0
        while self._order and self._cached > budget:
            out.append(self._uncache(next(iter(self._order.values()))))
        return out

    def _uncache(self, slab: Buffer) -> Buffer:
        self._order.pop(slab.ptr)
        same = self._cache[slab.size]
        same.remove(slab)
        if not same:
            del self._cache[slab.size]
        self._cached -= slab.size
        return slab

    def _take(self, length: int) -> Buffer | None:
        """A cached slab of ``length`` bytes (counted live), or None: the miss is counted and
        ``length`` reserved, past the limit after releasing the cache: ENOMEM."""
        with self._lock:
            same = self._cache.get(length)
            if same:
                slab = self._uncache(same[0])
                self._live_reserved += length
                self._hits += 1
                return slab
            self._misses += 1
            release: list[Buffer] = []
            if self.limit is not None and self._reserved() + length > self.limit:
                while self._order and self._reserved() + length > self.limit:
                    release.append(self._uncache(next(iter(self._order.values()))))
            fits = self.limit is None or self._reserved() + length <= self.limit
            if fits:
                self._live_reserved += length  # reserved now: another thread sees it
                self._peak_reserved = max(self._peak_reserved, self._reserved())
        self._release_all(release)
        if not fits:
            raise AMLMemoryError(
                f"the pinned pool's limit of {format_size(self.limit or 0)} is reached: it holds "
                f"{format_size(self._reserved())}, a block of {format_size(length)} does not fit"
            )
        return None

    def _slab(self, buffer: Buffer) -> Buffer:
        """The slab under one of this pool's blocks."""
        length = native_as(buffer, int)
        slab = self._slabs.get(buffer.ptr)
        if slab is None or slab.size != length:
            raise AMLValueError(f"{buffer!r} is not a block of this pinned pool")
        return slab

    def _reserved(self) -> int:
        return self._live_reserved + self._cached

    def _register(self, length: int) -> Buffer:
        """A new slab of ``length`` bytes (already counted in ``_live_reserved``): mapped
        on the node, every page placed, registered. Any failure undoes what was done."""
        try:
            slab = self._host.mmap(length, _POPULATED)
            self._slabs[slab.ptr] = slab
            try:
                self.runtime.host_register(slab.ptr, length, portable=self.portable, mapped=self.mapped)
            except BaseException:
                del self._slabs[slab.ptr]
                self._host.munmap(slab)
                raise
        except BaseException:
            with self._lock:
                self._live_reserved -= length
            raise
        with self._lock:
            self._registrations += 1
        return slab

    def _release(self, slab: Buffer) -> None:
        """Unregister and unmap one slab (raises the runtime's error: the slab is kept)."""
        self.runtime.host_unregister(slab.ptr)
        with self._lock:
            self._unregistrations += 1
        del self._slabs[slab.ptr]
        self._host.munmap(slab)

    def _release_all(self, slabs: list[Buffer]) -> None:
        """Release cached slabs; one whose unregistration fails goes back to the cache (and
        the first such error is raised)."""
        failed: AMLError | None = None
        for slab in slabs:
            try:
                self._release(slab)
            except AMLError as exc:
                with self._lock:
                    self._cache.setdefault(slab.size, collections.deque()).append(slab)
                    self._order[slab.ptr] = slab
                    self._cached += slab.size
                failed = failed or exc
        if failed is not None:
            raise failed

    # -- public --------------------------------------------------------------------------------
    def trim(self) -> int:
        """Release every cached block (unregistered and unmapped); return the bytes released."""
        with self._lock:
            slabs = [self._uncache(s) for s in list(self._order.values())]
        self._release_all(slabs)
        return sum(s.size for s in slabs)

    @property
    def pinned_stats(self) -> PinnedPoolStats:
        """Requested, reserved and cached bytes, with their peaks, and the runtime calls."""
        with self._lock:
            return PinnedPoolStats(
                bytes_requested=self._requested,
                bytes_reserved=self._reserved(),
                bytes_cached=self._cached,
                peak_bytes_requested=self._peak_requested,
                peak_bytes_reserved=self._peak_reserved,
                live_blocks=self._live,
                cached_blocks=len(self._order),
                hits=self._hits,
                misses=self._misses,
                registrations=self._registrations,
                unregistrations=self._unregistrations,
            )

    def page_nodes(self, buffer: Buffer) -> dict[int, int]:
        """The NUMA node of each page of one of this pool's blocks: ``{node: pages}``."""
        self._check_open()
        slab = self._slab(buffer)
        return numa.page_nodes(slab.ptr, slab.size, summary=True)

    def close(self) -> None:
        """Free every live block and release the cache; a block still viewed (a NumPy array)
        is detached and released when its last view is gone (the area's rule)."""
        errors: list[AMLError] = []
        try:
            super().close()
        except AMLError as exc:
            errors.append(exc)
        try:
            self.trim()
        except AMLError as exc:
            errors.append(exc)
        self._close_host()
        if errors:
            raise errors[0]

    def _close_host(self) -> None:
        """Close the host area once no slab of it is live (a viewed block keeps it open)."""
        with self._lock:
            idle = self._live == 0 and not self._order
        if idle and not self._host.closed:
            self._host.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<aml PinnedPool {self.backend} node={self.node} closed>"
        s = self.pinned_stats
        return (
            f"<aml PinnedPool {self.backend} node={self.node} granule={self.granule}: "
            f"{s.live_blocks} live, {format_size(s.bytes_requested)} asked, "
            f"{format_size(s.bytes_reserved)} pinned>"
        )
