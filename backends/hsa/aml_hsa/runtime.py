"""``HsaRuntime``: agents and memory pools, the ``hsa_amd_vmem_*`` calls checked and
tracked, and the VIRTUAL_MEMORY and IPC groups of :mod:`aml_core.gpu.runtime` over them.

Devices are the GPU agents in ``hsa_iterate_agents`` order (device 0 is the first GPU
agent); a device's memory is its coarse-grained global pool. The ``vmem_*`` methods are
the vendor's calls with the vendor's rules checked first (sizes multiples of the page
size or the pool's granule, free and unmap with the exact size, map with the handle's
size inside a reservation and over no other mapping, unsupported flags and offsets 0) and
every object tracked, so a bad call is an :class:`~aml_core.errors.AMLValueError` (or
EBUSY) before it reaches ROCr, a "success" with an impossible result is
:class:`~aml_core.errors.AMLFailure`, and an object whose release failed stays tracked.
Native failures raise through the one table of :mod:`aml_hsa.errors`.

The runtime has no ALLOCATION, MANAGED or STREAMS group: HSA areas are pool areas
(:mod:`aml_hsa.area`), and a ROCr without ``hsa_amd_vmem_*`` (Debian's 5.2) does not provide
VIRTUAL_MEMORY (:meth:`HsaRuntime.missing_groups` says why).
"""

from __future__ import annotations

import ctypes
import enum
import os
import threading
from collections.abc import Mapping, Sequence
from ctypes import byref, c_int, c_size_t, c_uint32, c_uint64, c_void_p

import attrs

from aml_core import checks
from aml_core.buffer import DLDeviceType
from aml_core.errors import AMLFailure, AMLNotSupported, AMLTypeError, AMLValueError, ErrorCode
from aml_core.gpu.runtime import (
    AllocationProperties,
    Group,
    IpcOps,
    Runtime,
    RuntimeTraits,
    VirtualMemoryOps,
    capabilities,
)
from aml_core.specs import Capability, DeviceInfo

from . import abi as C
from .native import ITERATE_CALLBACK, HsaLibrary

__all__ = [
    "Agent",
    "AgentType",
    "HsaRuntime",
    "MemoryType",
    "Permission",
    "Pool",
    "PoolLocation",
    "Segment",
]

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_U64 = (1 << 64) - 1


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


@attrs.define(eq=False)
class _Handle:
    pool: Pool | None
    size: int | None
    type: MemoryType | None
    refs: int = 1
    maps: int = 0


@attrs.define(eq=False)
class _Mapping:
    size: int
    handle: int


def _vp(value: int) -> c_void_p:
    return c_void_p(value or None)


def _overlaps(a: int, asize: int, b: int, bsize: int) -> bool:
    return a < b + bsize and b < a + asize


class HsaRuntime(Runtime, IpcOps, VirtualMemoryOps):
    """ROCr through ctypes: agents, pools, checked vmem calls, and the VIRTUAL_MEMORY and
    IPC groups. Construct it with an initialized :class:`~aml_hsa.native.HsaLibrary`."""

    def __init__(self, library: HsaLibrary) -> None:
        if not library.initialized:
            library.init()
        self.lib = library
        self.errors = library.errors
        self.traits = RuntimeTraits(
            name="hsa",
            dl_device=DLDeviceType.ROCM,
            dl_host=DLDeviceType.ROCM_HOST,
            dl_managed=DLDeviceType.ROCM,
            ipc_handle_size=C.IPC_HANDLE_SIZE,
            interfaces=Capability.DLPACK,
            versions={
                # "ROCr 5.2" where the file is known, else the runtime's file name
                **(
                    {"ROCr": library.label.removeprefix("ROCr ")}
                    if library.label.startswith("ROCr ")
                    else {"runtime file": library.label}
                ),
                "AMD interface": library.interface_text.removeprefix("AMD interface "),
                "library": library.path,
            },
        )
        self._vlock = threading.RLock()
        self._reservations: dict[int, int] = {}
        self._handles: dict[int, _Handle] = {}
        self._mappings: dict[int, _Mapping] = {}
        self.agents: tuple[Agent, ...] = self._discover_agents()
        self.gpus: tuple[Agent, ...] = tuple(a for a in self.agents if a.type is AgentType.GPU)
        self.pools: dict[int, tuple[Pool, ...]] = {a.handle: self._discover_pools(a) for a in self.agents}
        self._pool_by_handle = {p.handle: p for pools in self.pools.values() for p in pools}
        self._agent_by_handle = {a.handle: a for a in self.agents}

    # -- discovery ----------------------------------------------------------------------------
    def _iterate(self, name: str, *head: object) -> list[int]:
        found: list[int] = []

        def visit(handle: int, data: object) -> int:
            found.append(int(handle))
            return C.HSA_STATUS_SUCCESS

        callback = ITERATE_CALLBACK(visit)
        self.lib.call(name, *head, callback, None)
        return found

    def _info(self, function: str, head: tuple[object, ...], attribute: int, ctype: type) -> int:
        value = ctype()
        self.lib.call(function, *head, attribute, byref(value))
        return int(value.value)

    def _string_info(self, agent: int, attribute: int) -> str:
        buf = ctypes.create_string_buffer(64)
        self.lib.call("hsa_agent_get_info", agent, attribute, buf)
        return buf.value.decode("utf-8", "replace")

    def _discover_agents(self) -> tuple[Agent, ...]:
        agents: list[Agent] = []
        gpu = 0
        for handle in self._iterate("hsa_iterate_agents"):
            raw_type = self._info("hsa_agent_get_info", (handle,), C.HSA_AGENT_INFO_DEVICE, c_int)
            try:
                kind = AgentType(raw_type)
            except ValueError:
                continue  # agent types newer than aml-hsa knows (AIE): not memory aml-hsa serves
            node = self._info("hsa_agent_get_info", (handle,), C.HSA_AGENT_INFO_NODE, c_uint32)
            name = self._string_info(handle, C.HSA_AGENT_INFO_NAME)
            device = None
            if kind is AgentType.GPU:
                device, gpu = gpu, gpu + 1
            agents.append(Agent(handle, kind, name, node, device))
        if len({a.handle for a in agents}) != len(agents) or any(a.handle == 0 for a in agents):
            raise AMLFailure(f"{self.lib.label} listed a NULL or repeated agent handle")
        return tuple(agents)

    def _pool_info(self, pool: int, attribute: int, ctype: type) -> int:
        return self._info("hsa_amd_memory_pool_get_info", (pool,), attribute, ctype)

    def _discover_pools(self, agent: Agent) -> tuple[Pool, ...]:
        pools: list[Pool] = []
        for handle in self._iterate("hsa_amd_agent_iterate_memory_pools", agent.handle):
            segment = Segment(self._pool_info(handle, C.HSA_AMD_MEMORY_POOL_INFO_SEGMENT, c_int))
            flags = 0
            if segment is Segment.GLOBAL:
                flags = self._pool_info(handle, C.HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, c_uint32)
            size = self._pool_info(handle, C.HSA_AMD_MEMORY_POOL_INFO_SIZE, c_size_t)
            allowed = bool(
                self._pool_info(handle, C.HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, ctypes.c_bool)
            )
            granule = rec = alignment = 0
            if allowed:
                granule = self._pool_info(handle, C.HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE, c_size_t)
                alignment = self._pool_info(
                    handle, C.HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT, c_size_t
                )
                rec = granule
                if self.lib.interface >= C.INTERFACE_VMEM:
                    rec = self._pool_info(
                        handle, C.HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_REC_GRANULE, c_size_t
                    )
                if granule <= 0 or granule & (granule - 1) or rec < granule:
                    raise AMLFailure(
                        f"{self.lib.label} reports an impossible granule for pool {handle:#x} "
                        f"(granule {granule}, recommended {rec})"
                    )
            default = PoolLocation.GPU if agent.type is AgentType.GPU else PoolLocation.CPU
            location = default
            if self.lib.interface >= C.INTERFACE_VMEM:
                location = PoolLocation(self._pool_info(handle, C.HSA_AMD_MEMORY_POOL_INFO_LOCATION, c_int))
            by_all = bool(
                self._pool_info(handle, C.HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL, ctypes.c_bool)
            )
            pools.append(
                Pool(handle, agent, segment, flags, size, allowed, granule, rec, alignment, location, by_all)
            )
        return tuple(pools)

    # -- agents and pools ---------------------------------------------------------------------
    def agent(self, value: object) -> Agent:
        """A known agent (an :class:`Agent` or its handle); EINVAL for any other."""
        handle = value.handle if isinstance(value, Agent) else checks.integer(value, "agent")
        found = self._agent_by_handle.get(handle)
        if found is None:
            raise AMLValueError(
                f"unknown agent {handle:#x}; the agents are {[hex(a.handle) for a in self.agents]}"
            )
        return found

    def pool(self, value: object) -> Pool:
        """A known pool (a :class:`Pool` or its handle); EINVAL for any other."""
        handle = value.handle if isinstance(value, Pool) else checks.integer(value, "pool")
        found = self._pool_by_handle.get(handle)
        if found is None:
            raise AMLValueError(f"unknown memory pool {handle:#x}")
        return found

    def gpu(self, device: int) -> Agent:
        d = checks.device(device)
        if d >= len(self.gpus):
            raise AMLValueError(f"device {d} is not in 0..{len(self.gpus) - 1}")
        return self.gpus[d]

    def device_pool(self, device: int) -> Pool:
        """The coarse-grained global pool of GPU ``device`` that allows allocation."""
        agent = self.gpu(device)
        for pool in self.pools[agent.handle]:
            if pool.segment is Segment.GLOBAL and pool.coarse_grained and pool.alloc_allowed:
                return pool
        raise AMLNotSupported(f"GPU agent {agent.name!r} (device {device}) has no coarse-grained pool")

    def host_pool(self) -> Pool:
        """A fine-grained global pool of a CPU agent that allows allocation."""
        for agent in self.agents:
            if agent.type is AgentType.CPU:
                for pool in self.pools[agent.handle]:
                    if pool.segment is Segment.GLOBAL and pool.fine_grained and pool.alloc_allowed:
                        return pool
        raise AMLNotSupported("no CPU agent has a fine-grained pool")

    # -- Runtime: devices ---------------------------------------------------------------------
    def missing_groups(self) -> Mapping[Group, str]:
        why = self.lib.vmem_missing()
        return {Group.VIRTUAL_MEMORY: why} if why else {}

    def device_count(self) -> int:
        return len(self.gpus)

    def get_device(self) -> int:
        return 0

    def _set_device(self, device: int) -> None:
        self.gpu(device)  # HSA has no current device: only check the index

    def synchronize(self) -> None:
        """Nothing to wait for: aml-hsa queues no work."""

    def _device_info(self, device: int) -> DeviceInfo:
        agent = self.gpu(device)
        pool = self.device_pool(device)
        groups = self.groups()
        product = self._string_info(agent.handle, C.HSA_AMD_AGENT_INFO_PRODUCT_NAME)
        return DeviceInfo(
            index=device,
            name=product or agent.name or f"HSA GPU agent {device}",
            total_memory=pool.size,
            capabilities=capabilities(groups, self.traits.interfaces),
            details={
                "agent": agent.name,
                "node": agent.node,
                "library": self.lib.path,
                "rocr": self.lib.label,
                "interface": self.lib.interface_text,
                "granule": pool.granule,
                "recommended_granule": pool.rec_granule,
            },
        )

    def _free_memory(self, device: int) -> int | None:
        """``HSA_AMD_AGENT_INFO_MEMORY_AVAIL`` of the GPU agent (ROCr 6.x and later; 5.2
        refuses the attribute, and the base class reads that as not known)."""
        agent = self.gpu(device)
        avail = C.HSA_AMD_AGENT_INFO_MEMORY_AVAIL
        return self._info("hsa_agent_get_info", (agent.handle,), avail, c_uint64)

    # -- pool memory --------------------------------------------------------------------------
    def pool_allocate(self, pool: Pool, size: int) -> int:
        p = self.pool(pool)
        n = checks.size(size)
        if not p.alloc_allowed:
            raise AMLValueError(f"pool {p.handle:#x} does not allow runtime allocation")
        out = c_void_p()
        self.lib.call("hsa_amd_memory_pool_allocate", p.handle, n, 0, byref(out))
        ptr = int(out.value or 0)
        if ptr == 0 or (p.alignment and ptr % p.alignment):
            if ptr:  # real memory at a place the pool does not promise: give it back, then fail
                self.lib.call("hsa_amd_memory_pool_free", _vp(ptr))
            raise AMLFailure(
                f"hsa_amd_memory_pool_allocate returned an impossible address {ptr:#x} "
                f"(the pool promises {p.alignment}-byte alignment)"
            )
        return ptr

    def pool_free(self, ptr: int) -> None:
        self.lib.call("hsa_amd_memory_pool_free", _vp(checks.pointer(ptr)))

    def allow_access(self, agents: Sequence[Agent], ptr: int) -> None:
        checked = [self.agent(a).handle for a in agents]
        if not checked:
            raise AMLValueError("allow_access needs at least one agent")
        array = (c_uint64 * len(checked))(*checked)
        self.lib.call("hsa_amd_agents_allow_access", len(checked), array, None, _vp(checks.pointer(ptr)))

    def memory_copy(self, dst: int, src: int, size: int) -> None:
        self.lib.call(
            "hsa_memory_copy",
            _vp(checks.pointer(dst, "dst")),
            _vp(checks.pointer(src, "src")),
            checks.size(size),
        )

    # -- hsa_amd_vmem_*: checked and tracked ----------------------------------------------------
    def _vmem(self) -> None:
        why = self.lib.vmem_missing()
        if why:
            raise AMLNotSupported(why)

    @staticmethod
    def _zero(value: object, what: str) -> int:
        v = checks.integer(value, what)
        if v != 0:
            raise AMLValueError(f"{what} must be 0 (currently unsupported by ROCr), got {v}")
        return v

    def _page_multiple(self, size: object, what: str = "size") -> int:
        n = checks.size(size, what)
        if n % PAGE_SIZE:
            raise AMLValueError(f"{what} {n} is not a multiple of the page size {PAGE_SIZE}")
        return n

    def vmem_address_reserve(
        self, size: int, address: int = 0, flags: int = 0, alignment: int | None = None
    ) -> int:
        """``hsa_amd_vmem_address_reserve`` (``alignment`` given: ``..._reserve_align``)."""
        self._vmem()
        n = self._page_multiple(size)
        hint = checks.pointer(address, "address", null=True)
        self._zero(flags, "flags")
        out = c_void_p()
        if alignment is None:
            self.lib.call("hsa_amd_vmem_address_reserve", byref(out), n, hint, 0)
            align = PAGE_SIZE
        else:
            a = checks.size(alignment, "alignment", zero=True)
            if a and (a & (a - 1) or a < PAGE_SIZE):
                raise AMLValueError(
                    f"alignment must be 0 or a power of two >= the page size {PAGE_SIZE}, got {a}"
                )
            if not self.lib.has(C.RESERVE_ALIGN):
                raise AMLNotSupported(
                    f"{self.lib.label} has no hsa_amd_vmem_address_reserve_align "
                    "(AMD interface 1.6, ROCm 6.2+)"
                )
            self.lib.call(C.RESERVE_ALIGN, byref(out), n, hint, a, 0)
            align = a or PAGE_SIZE
        va = int(out.value or 0)
        with self._vlock:
            clash = any(_overlaps(va, n, p, s) for p, s in self._reservations.items())
            if va == 0 or va % align or va + n > _U64 or clash:
                raise AMLFailure(f"hsa_amd_vmem_address_reserve returned an impossible range {va:#x}+{n}")
            self._reservations[va] = n
        return va

    def vmem_address_free(self, va: int, size: int) -> None:
        self._vmem()
        p, n = checks.pointer(va, "va"), checks.size(size)
        with self._vlock:
            reserved = self._reservations.get(p)
            if reserved is None:
                raise AMLValueError(f"{p:#x} is not a reserved address range")
            if reserved != n:
                raise AMLValueError(f"address_free takes the reserved size {reserved}, not {n}")
            inside = [m for m, st in self._mappings.items() if _overlaps(m, st.size, p, n)]
            if inside:
                from aml_core.errors import AMLBusyError

                raise AMLBusyError(
                    f"the address range {p:#x}+{n} still holds {len(inside)} mapping(s); unmap first"
                )
            self.lib.call("hsa_amd_vmem_address_free", _vp(p), n)
            del self._reservations[p]

    def vmem_handle_create(self, pool: Pool, size: int, type: int = 0, flags: int = 0) -> int:
        self._vmem()
        pl = self.pool(pool)
        n = checks.size(size)
        kind = MemoryType(checks.member(type, {t.value for t in MemoryType}, "memory type"))
        self._zero(flags, "flags")
        if not pl.alloc_allowed or pl.segment is not Segment.GLOBAL:
            raise AMLValueError(f"pool {pl.handle:#x} does not support allocations")
        if n % pl.granule:
            raise AMLValueError(
                f"size {n} is not a multiple of the pool's granule {pl.granule} "
                f"(round up to {-(-n // pl.granule) * pl.granule})"
            )
        out = c_uint64(0)
        self.lib.call("hsa_amd_vmem_handle_create", pl.handle, n, int(kind), 0, byref(out))
        handle = int(out.value)
        with self._vlock:
            if handle == 0 or handle in self._handles:
                raise AMLFailure(f"hsa_amd_vmem_handle_create returned an impossible handle {handle:#x}")
            self._handles[handle] = _Handle(pl, n, kind)
        return handle

    def _live_handle(self, handle: object) -> tuple[int, _Handle]:
        h = checks.pointer(handle, "handle")
        state = self._handles.get(h)
        if state is None or state.refs <= 0:
            raise AMLValueError(f"{h:#x} is not a live virtual memory handle (unknown or released)")
        return h, state

    def vmem_handle_release(self, handle: int) -> None:
        self._vmem()
        with self._vlock:
            h, state = self._live_handle(handle)
            self.lib.call("hsa_amd_vmem_handle_release", h)
            state.refs -= 1
            if state.refs <= 0 and state.maps <= 0:
                del self._handles[h]

    def vmem_map(self, va: int, size: int, handle: int, offset: int = 0, flags: int = 0) -> None:
        self._vmem()
        p, n = checks.pointer(va, "va"), checks.size(size)
        self._zero(offset, "offset")
        self._zero(flags, "flags")
        with self._vlock:
            h, state = self._live_handle(handle)
            if state.size is not None and n != state.size:
                raise AMLValueError(f"map takes the handle's size {state.size}, not {n}")
            if not any(r <= p and p + n <= r + s for r, s in self._reservations.items()):
                raise AMLValueError(f"{p:#x}+{n} is not inside a reserved address range")
            for m, st in self._mappings.items():
                if _overlaps(p, n, m, st.size):
                    raise AMLValueError(f"{p:#x}+{n} overlaps the mapping at {m:#x}+{st.size}")
            self.lib.call("hsa_amd_vmem_map", _vp(p), n, 0, h, 0)
            self._mappings[p] = _Mapping(n, h)
            state.maps += 1

    def _mapping_at(self, va: int) -> tuple[int, _Mapping]:
        for m, st in self._mappings.items():
            if m <= va < m + st.size:
                return m, st
        raise AMLValueError(f"{va:#x} is not mapped")

    def vmem_unmap(self, va: int, size: int) -> None:
        self._vmem()
        p, n = checks.pointer(va, "va"), checks.size(size)
        with self._vlock:
            st = self._mappings.get(p)
            if st is None:
                raise AMLValueError(f"{p:#x} is not the start of a mapping")
            if st.size != n:
                raise AMLValueError(f"unmap takes the mapped size {st.size}, not {n}")
            self.lib.call("hsa_amd_vmem_unmap", _vp(p), n)
            del self._mappings[p]
            state = self._handles.get(st.handle)
            if state is not None:
                state.maps -= 1
                if state.refs <= 0 and state.maps <= 0:
                    del self._handles[st.handle]

    def vmem_set_access(self, va: int, size: int, access: object) -> None:
        self._vmem()
        p, n = checks.pointer(va, "va"), checks.size(size)
        if isinstance(access, (str, bytes)) or not isinstance(access, Sequence) or not access:
            raise AMLValueError("set_access takes a non-empty list of (agent, Permission) pairs")
        pairs: list[tuple[int, int]] = []
        for item in access:
            if not isinstance(item, tuple) or len(item) != 2:
                raise AMLTypeError(f"each access entry is an (agent, Permission) pair, not {item!r}")
            agent = self.agent(item[0])
            perm = checks.member(
                item[1], {x.value for x in Permission}, "permission (NONE 0, RO 1, WO 2, RW 3)"
            )
            pairs.append((agent.handle, perm))
        with self._vlock:
            st = self._mappings.get(p)
            if st is None:
                raise AMLValueError(f"{p:#x} is not the start of a mapping")
            if st.size != n:
                raise AMLValueError(f"set_access takes the mapped size {st.size}, not {n}")
            descs = (C.hsa_amd_memory_access_desc_t * len(pairs))()
            for desc, (agent_handle, perm) in zip(descs, pairs, strict=True):
                desc.permissions = perm
                desc.agent_handle = agent_handle
            self.lib.call("hsa_amd_vmem_set_access", _vp(p), n, descs, len(pairs))

    def vmem_get_access(self, va: int, agent: object) -> Permission:
        self._vmem()
        p = checks.pointer(va, "va")
        a = self.agent(agent)
        with self._vlock:
            self._mapping_at(p)
        out = c_int(-1)
        self.lib.call("hsa_amd_vmem_get_access", _vp(p), byref(out), a.handle)
        try:
            return Permission(out.value)
        except ValueError:
            raise AMLFailure(f"hsa_amd_vmem_get_access returned an unknown permission {out.value}") from None

    def vmem_export_shareable_handle(self, handle: int, flags: int = 0) -> int:
        self._vmem()
        self._zero(flags, "flags")
        with self._vlock:
            h, _ = self._live_handle(handle)
        fd = c_int(-1)
        self.lib.call("hsa_amd_vmem_export_shareable_handle", byref(fd), h, 0)
        try:
            os.fstat(fd.value)
        except (OSError, OverflowError):
            raise AMLFailure(
                f"hsa_amd_vmem_export_shareable_handle returned {fd.value}, not an open fd"
            ) from None
        return fd.value

    def vmem_import_shareable_handle(self, fd: int) -> int:
        self._vmem()
        f = checks.fd(fd)
        try:
            st = os.fstat(f)
        except OSError:
            raise AMLValueError(f"fd {f} is not an open file descriptor") from None
        out = c_uint64(0)
        self.lib.call("hsa_amd_vmem_import_shareable_handle", f, byref(out))
        h = int(out.value)
        if h == 0:
            raise AMLFailure("hsa_amd_vmem_import_shareable_handle returned a NULL handle")
        with self._vlock:
            state = self._handles.get(h)
            if state is not None:
                state.refs += 1
            else:
                self._handles[h] = _Handle(None, st.st_size or None, None)
        return h

    def vmem_retain_alloc_handle(self, addr: int) -> int:
        self._vmem()
        p = checks.pointer(addr, "addr")
        with self._vlock:
            _, st = self._mapping_at(p)
            out = c_uint64(0)
            self.lib.call("hsa_amd_vmem_retain_alloc_handle", byref(out), _vp(p))
            h = int(out.value)
            if h != st.handle:
                raise AMLFailure(
                    f"hsa_amd_vmem_retain_alloc_handle returned {h:#x}, not the mapped handle {st.handle:#x}"
                )
            self._handles[h].refs += 1
        return h

    def vmem_get_alloc_properties(self, handle: int) -> tuple[Pool, MemoryType]:
        self._vmem()
        with self._vlock:
            h, _ = self._live_handle(handle)
        pool = c_uint64(0)
        kind = c_int(-1)
        self.lib.call("hsa_amd_vmem_get_alloc_properties_from_handle", h, byref(pool), byref(kind))
        found = self._pool_by_handle.get(int(pool.value))
        if found is None:
            raise AMLFailure(
                f"hsa_amd_vmem_get_alloc_properties_from_handle returned an unknown pool {pool.value:#x}"
            )
        try:
            return found, MemoryType(kind.value)
        except ValueError:
            raise AMLFailure(
                f"hsa_amd_vmem_get_alloc_properties_from_handle returned type {kind.value}"
            ) from None

    def live(self) -> dict[str, int]:
        """What aml-hsa tracks now: reservations, handles, mappings."""
        with self._vlock:
            return {
                "reservations": len(self._reservations),
                "handles": len(self._handles),
                "mappings": len(self._mappings),
            }

    # -- VIRTUAL_MEMORY group -------------------------------------------------------------------
    def _vmm_granularity(self, device: int, recommended: bool) -> int:
        pool = self.device_pool(device)
        return pool.rec_granule if recommended else pool.granule

    def _vmm_reserve(self, size: int, alignment: int, address: int) -> int:
        if alignment and self.lib.has(C.RESERVE_ALIGN):
            return self.vmem_address_reserve(size, address, 0, alignment)
        if alignment > PAGE_SIZE:
            raise AMLNotSupported(
                f"{self.lib.label} has no hsa_amd_vmem_address_reserve_align: an alignment of {alignment} "
                "needs AMD interface 1.6 (ROCm 6.2+)"
            )
        return self.vmem_address_reserve(size, address, 0)

    def _vmm_address_free(self, ptr: int, size: int) -> None:
        self.vmem_address_free(ptr, size)

    def _vmm_create(self, size: int, device: int, exportable: bool) -> int:
        # Every HSA handle can be exported as a dma-buf fd: ``exportable`` asks nothing more.
        return self.vmem_handle_create(self.device_pool(device), size, MemoryType.PINNED, 0)

    def _vmm_release(self, handle: int) -> None:
        self.vmem_handle_release(handle)

    def _vmm_map(self, ptr: int, size: int, handle: int, offset: int) -> None:
        self.vmem_map(ptr, size, handle, offset, 0)

    def _vmm_unmap(self, ptr: int, size: int) -> None:
        self.vmem_unmap(ptr, size)

    def _vmm_set_access(self, ptr: int, size: int, access: Sequence[tuple[int, int]]) -> None:
        # The group's access flags (none 0, read 1, read-write 3) are HSA's NONE, RO, RW.
        self.vmem_set_access(ptr, size, [(self.gpu(d), Permission(f)) for d, f in access])

    def _vmm_get_access(self, ptr: int, device: int) -> int:
        perm = self.vmem_get_access(ptr, self.gpu(device))
        if perm is Permission.WO:
            raise AMLValueError(
                "the device has write-only access, which CUDA-style access flags cannot express"
            )
        return int(perm)

    def _vmm_export_fd(self, handle: int) -> int:
        return self.vmem_export_shareable_handle(handle, 0)

    def _vmm_import_fd(self, fd: int) -> int:
        return self.vmem_import_shareable_handle(fd)

    def _vmm_retain(self, ptr: int) -> int:
        return self.vmem_retain_alloc_handle(ptr)

    def _vmm_properties(self, handle: int) -> AllocationProperties:
        pool, kind = self.vmem_get_alloc_properties(handle)
        device = pool.agent.device if pool.agent.device is not None else -1
        # Every HSA handle is shareable as a dma-buf fd (bit 1: POSIX file descriptor).
        return AllocationProperties(type=int(kind), location_device=device, handle_types=1)

    # -- IPC group ----------------------------------------------------------------------------
    def _ipc_get_handle(self, ptr: int, size: int) -> bytes:
        handle = C.hsa_amd_ipc_memory_t()
        self.lib.call("hsa_amd_ipc_memory_create", _vp(ptr), size, byref(handle))
        return ctypes.string_at(byref(handle), C.IPC_HANDLE_SIZE)

    def _ipc_open_handle(self, handle: bytes, size: int) -> int:
        native = C.hsa_amd_ipc_memory_t.from_buffer_copy(handle)
        out = c_void_p()
        self.lib.call("hsa_amd_ipc_memory_attach", byref(native), size, 0, None, byref(out))
        ptr = int(out.value or 0)
        if ptr == 0:
            raise self.errors.error(
                "hsa_amd_ipc_memory_attach",
                C.HSA_STATUS_ERROR,
                "attach returned NULL",
                code=ErrorCode.FAILURE,
            )
        return ptr

    def _ipc_close_handle(self, ptr: int) -> None:
        self.lib.call("hsa_amd_ipc_memory_detach", _vp(ptr))
