"""Areas over HSA memory pools (the backend-specific area module the template allows:
HSA allocates from *pools* of agents, not through a CUDA-style allocation group).

:class:`PoolArea` allocates with ``hsa_amd_memory_pool_allocate`` and frees with
``hsa_amd_memory_pool_free``. Device memory comes from a GPU agent's coarse-grained pool;
host memory from a CPU agent's fine-grained pool, made accessible to every GPU agent
(``hsa_amd_agents_allow_access``) so that kernels can read it. Device buffers can be
shared with another process (``ipc_export``, ``hsa_amd_ipc_memory_create``) and exported
as dma-bufs (``export_dmabuf``, ``hsa_amd_portable_export_dmabuf``); data moves
with ``hsa_memory_copy`` (:meth:`PoolArea.write` / :meth:`PoolArea.read`).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import attrs

from aml_core import checks
from aml_core.area import Area, NoOptions, NoOptionsDict, compiled_mmap
from aml_core.backend_api import RuntimeMemory
from aml_core.buffer import Buffer
from aml_core.dmabuf import DmabufHandle
from aml_core.dmabuf import export_from as dmabuf_export_from
from aml_core.errors import AMLNotSupported, AMLValueError
from aml_core.gpu.ipc import ExportRegistry, IpcExport, close_exports, export_from
from aml_core.specs import Capability, Kind
from aml_core.stream import StreamLike

if TYPE_CHECKING:
    from .runtime import HsaRuntime, Pool

__all__ = ["PoolArea"]


@attrs.frozen
class _PoolAllocation:
    tag: str
    pool: int


class PoolArea(RuntimeMemory, Area):
    """Memory of one HSA pool: ``kind`` DEVICE (a GPU's coarse-grained pool) or HOST (a
    CPU fine-grained pool, accessible to every GPU)."""

    def __init__(
        self, runtime: HsaRuntime, kind: Kind, device: int | None = None, pool: Pool | None = None
    ) -> None:
        if kind is Kind.DEVICE:
            d = 0 if device is None else device
            chosen = runtime.device_pool(d) if pool is None else runtime.pool(pool)
            caps = Capability.IPC | Capability.DLPACK
            area_device: int | None = d
        elif kind is Kind.HOST:
            chosen = runtime.host_pool() if pool is None else runtime.pool(pool)
            caps = Capability.BUFFER_PROTOCOL | Capability.DLPACK
            area_device = None
        else:
            raise AMLNotSupported(f"hsa provides device and host memory, not {kind.value}")
        if not chosen.alloc_allowed:
            raise AMLValueError(f"pool {chosen.handle:#x} does not allow runtime allocation")
        super().__init__(backend="hsa", kind=kind, device=area_device, capabilities=caps)
        self.runtime = runtime
        self.pool = chosen
        self._exports: ExportRegistry = {}

    def _memory_runtime(self) -> HsaRuntime:
        """The runtime that tells the device's memory (RuntimeMemory: MemoryCapacity)."""
        return self.runtime

    @compiled_mmap
    def mmap(
        self, size: int, options: NoOptions | NoOptionsDict | None = None, *, stream: StreamLike = None
    ) -> Buffer:
        """Map ``size`` bytes from the area's pool (``hsa_amd_memory_pool_allocate``); host
        memory is then made accessible to every GPU agent (``hsa_amd_agents_allow_access``).

        Options: none (the pool decides): None or ``{}``.

        Errors of HSA areas: the runtime's errors by aml-hsa's error table (for example
        ``HSA_STATUS_ERROR_OUT_OF_RESOURCES`` as :class:`~aml_core.errors.AMLMemoryError`),
        with the native call and status as their cause (a failed allow-access frees the
        memory again before raising); :class:`~aml_core.errors.AMLFailure` when the
        allocation "succeeds" with NULL or an address the pool's alignment does not
        allow."""
        return super().mmap(size, options)

    def _allocate(self, size: int, options: object) -> Buffer:
        rt = self.runtime
        ptr = rt.pool_allocate(self.pool, size)
        host = self.kind is Kind.HOST
        buf = self._new_buffer(
            ptr,
            size,
            host_accessible=host,
            dl_device=(rt.traits.dl_host, 0) if host else (rt.traits.dl_device, self.device or 0),
            native=_PoolAllocation("pool", self.pool.handle),
        )
        if host and rt.gpus:
            try:
                rt.allow_access(rt.gpus, ptr)
            except BaseException as exc:
                self._give_back(buf, exc)  # pool_free; if that fails too, close() frees it
                raise
        return buf

    def _free(self, buffer: Buffer) -> None:
        close_exports(self._exports, buffer.ptr)
        self.runtime.pool_free(buffer.ptr)

    def ipc_export(self, buffer: Buffer | int) -> IpcExport:
        """Export a device buffer for another process (``hsa_amd_ipc_memory_create``)."""
        return export_from(self, self.runtime, self._exports, buffer)

    def export_dmabuf(self, buffer: Buffer | int) -> DmabufHandle:
        """Export a device buffer as a dma-buf (``hsa_amd_portable_export_dmabuf``,
        docs/dmabuf.md): a new fd, the caller's; AMLNotSupported where the ROCr has no
        dma-buf export (before ROCm 5.6) and for host memory."""
        return dmabuf_export_from(self, buffer, self.runtime.dmabuf_export)

    def write(self, buffer: Buffer, data: bytes | bytearray | memoryview, offset: int = 0) -> None:
        """Copy host bytes into a buffer of this area (``hsa_memory_copy``)."""
        self._lookup(buffer, None)
        offset, _ = checks.span(offset, checks.host_bytes(data), buffer.size)
        raw = bytes(memoryview(data).cast("B"))
        if raw:
            src = ctypes.create_string_buffer(raw, len(raw))
            self.runtime.memory_copy(buffer.ptr + offset, ctypes.addressof(src), len(raw))

    def read(self, buffer: Buffer, size: int | None = None, offset: int = 0) -> bytes:
        """Copy bytes out of a buffer of this area (``hsa_memory_copy``)."""
        self._lookup(buffer, None)
        offset, n = checks.span(offset, size, buffer.size)
        if not n:
            return b""
        dst = ctypes.create_string_buffer(n)
        self.runtime.memory_copy(ctypes.addressof(dst), buffer.ptr + offset, n)
        return dst.raw
