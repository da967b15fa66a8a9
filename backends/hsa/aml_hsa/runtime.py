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
Native failures raise through the one table of :mod:`aml_hsa.errors`. The agent and pool
types are :mod:`aml_hsa.topology`'s and the ``vmem_*`` methods
:class:`~aml_hsa.vmem_tracking.VmemTracking`'s (a part of the runtime); this module
re-exports the types.

The runtime has no ALLOCATION, MANAGED or STREAMS group: HSA areas are pool areas
(:mod:`aml_hsa.area`), and a ROCr without ``hsa_amd_vmem_*`` (Debian's 5.2) does not provide
VIRTUAL_MEMORY (:meth:`HsaRuntime.missing_groups` says why).
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from ctypes import byref, c_int, c_size_t, c_uint32, c_uint64, c_void_p

from aml_core import checks
from aml_core.buffer import DLDeviceType
from aml_core.errors import AMLError, AMLFailure, AMLNotSupported, AMLValueError, ErrorCode
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
from .topology import Agent, AgentType, MemoryType, Permission, Pool, PoolLocation, Segment
from .vmem_tracking import PAGE_SIZE, VmemTracking

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


def _vp(value: int) -> c_void_p:
    return c_void_p(value or None)


class HsaRuntime(Runtime, VmemTracking, IpcOps, VirtualMemoryOps):
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
        VmemTracking.__init__(self)
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
        """GPU agent ``device``: ENOTSUP when there is no GPU agent at all (a missing device,
        as every backend says it), EINVAL for an index past the GPU agents there are."""
        d = checks.device(device)
        if not self.gpus:
            raise AMLNotSupported(f"{self.lib.label} lists no GPU agent: there is no device {d}")
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
                "pci_bus_id": self._pci_bus_id(agent.handle),
            },
        )

    def _pci_bus_id(self, agent: int) -> str | None:
        """The agent's PCI address, ``"0000:03:00.0"``, from ``HSA_AMD_AGENT_INFO_DOMAIN``
        and ``HSA_AMD_AGENT_INFO_BDFID`` (bus << 8 | device << 3 | function); None when
        the library refuses either."""
        try:
            bdf = self._info("hsa_agent_get_info", (agent,), C.HSA_AMD_AGENT_INFO_BDFID, c_uint32)
            domain = self._info("hsa_agent_get_info", (agent,), C.HSA_AMD_AGENT_INFO_DOMAIN, c_uint32)
        except AMLError:
            return None
        return f"{domain:04x}:{bdf >> 8 & 0xFF:02x}:{bdf >> 3 & 0x1F:02x}.{bdf & 7}"

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
        rc = self.lib.raw("hsa_amd_memory_pool_allocate", p.handle, n, 0, byref(out))
        if rc == C.HSA_STATUS_ERROR_INVALID_ALLOCATION:
            # ROCr's answer to a size past what the pool can allocate at once (the pool's
            # size or its largest allocation; alloc_allowed was checked above): no memory
            # for the request, ENOMEM as HIP and Level Zero say for the same request.
            raise self.errors.error(
                "hsa_amd_memory_pool_allocate",
                rc,
                f"{n} bytes are more than pool {p.handle:#x} can allocate (its size is {p.size} bytes)",
                code=ErrorCode.ENOMEM,
            )
        if rc != C.HSA_STATUS_SUCCESS:
            raise self.errors.error("hsa_amd_memory_pool_allocate", rc)
        ptr = int(out.value or 0)
        if ptr == 0 or (p.alignment and ptr % p.alignment):
            failure = AMLFailure(
                f"hsa_amd_memory_pool_allocate returned an impossible address {ptr:#x} "
                f"(the pool promises {p.alignment}-byte alignment)"
            )
            if ptr:  # real memory at a place the pool does not promise: give it back, then fail
                try:
                    self.lib.call("hsa_amd_memory_pool_free", _vp(ptr))
                except AMLError as exc:
                    # The documented error is the impossible answer's FAILURE; the failed
                    # give-back is its note (and cause): the memory at ptr is lost to aml.
                    failure.add_note(f"giving {ptr:#x} back failed too, and it leaks: {exc}")
                    raise failure from exc
            raise failure
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

    def _ipc_address_range(self, ptr: int) -> tuple[int, int] | None:
        """``hsa_amd_pointer_info`` of the attached memory: (agentBaseAddress, sizeInBytes),
        the allocation the exporter shared (ROCr's ``IPCAttach`` maps it whole and never
        compares the length asked with it, so a tampered handle claiming more is refused
        here, by the importer, from this size). A "success" that is impossible is
        AMLFailure: a filled size short of ``sizeInBytes`` (the field is in every version
        of the struct) or longer than asked, or a type UNKNOWN for memory ROCr just mapped
        (:meth:`IpcOps.ipc_mapped_size` refuses a range that does not hold ``ptr``)."""
        info = C.hsa_amd_pointer_info_t(size=ctypes.sizeof(C.hsa_amd_pointer_info_t))
        self.lib.call("hsa_amd_pointer_info", _vp(ptr), byref(info), None, None, None)
        why = ""
        if not C.POINTER_INFO_MIN_SIZE <= info.size <= ctypes.sizeof(info):
            why = f"filled {info.size} bytes of the {ctypes.sizeof(info)}-byte hsa_amd_pointer_info_t"
        elif info.type == C.HSA_EXT_POINTER_TYPE_UNKNOWN:
            why = "type UNKNOWN: ROCr does not know the memory it mapped"
        if why:
            raise AMLFailure(
                f"hsa_amd_pointer_info reported success for 0x{ptr:x} with an impossible answer: {why}"
            )
        return int(info.agentBaseAddress or 0), int(info.sizeInBytes)

    # -- dma-buf export (docs/dmabuf.md) ------------------------------------------------------
    def _dmabuf_export(self, ptr: int, size: int, device: int) -> tuple[int, int]:
        """``hsa_amd_portable_export_dmabuf``: the dma-buf of the allocation holding
        ``[ptr, ptr + size)`` and ``ptr``'s offset in it (ROCr's own: a sub-range of an
        allocation is at its offset); ENOTSUP where the library lacks the call."""
        missing = self.lib.dmabuf_missing()
        if missing is not None:
            raise AMLNotSupported(missing)
        fd, offset = c_int(-1), c_uint64()
        self.lib.call("hsa_amd_portable_export_dmabuf", _vp(ptr), size, byref(fd), byref(offset))
        return fd.value, int(offset.value)

    def _dmabuf_close(self, fd: int) -> None:
        self.lib.call("hsa_amd_portable_close_dmabuf", fd)
