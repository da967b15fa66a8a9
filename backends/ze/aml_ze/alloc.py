"""The native calls of an AML Level Zero area's hot path, bound once per area:
``zeMemAllocDevice`` / ``zeMemAllocShared`` / ``zeMemAllocHost`` with their constant
arguments (the area's context, device, descriptors and alignment), and ``zeMemFree``.

:class:`MemAllocator` is what :class:`aml_ze.area.ZeArea` allocates through: the ctypes
plumbing stays here, beside the runtime, and each allocation is recorded as the context's
(:meth:`aml_ze.runtime.ZeRuntime.register`), so that IPC and properties find its context.
"""

from __future__ import annotations

import ctypes
from ctypes import byref, c_void_p
from typing import TYPE_CHECKING

from aml_core.errors import AMLFailure
from aml_core.specs import Kind

from . import abi as C

if TYPE_CHECKING:
    from .runtime import ZeRuntime

__all__ = ["MemAllocator"]

#: The allocating call of each kind of area.
ALLOC_CALLS = {Kind.DEVICE: "zeMemAllocDevice", Kind.MANAGED: "zeMemAllocShared", Kind.HOST: "zeMemAllocHost"}


class MemAllocator:
    """``allocate(size) -> ptr`` and ``free(ptr)`` of one context, one kind of memory and
    one set of allocation settings; native failures raise through the runtime's table."""

    def __init__(
        self,
        runtime: ZeRuntime,
        context: int,
        kind: Kind,
        *,
        device: int,
        ordinal: int,
        device_flags: int,
        host_flags: int,
        alignment: int,
        dmabuf: bool = False,
    ) -> None:
        """``device`` is the ``ze_device_handle_t`` (0 for host memory); ``dmabuf``: device
        allocations are made exportable as dma-bufs (a ``ze_external_memory_export_desc_t``
        with ``ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF`` chained to their descriptor)."""
        native = runtime.lib.native
        self._runtime = runtime
        self._kind = kind
        self._context = context
        self._alignment = alignment
        self._ctx = c_void_p(context or None)
        self._dev = c_void_p(device or None)
        #: The descriptors every allocation passes (``ze_device_mem_alloc_desc_t``,
        #: ``ze_host_mem_alloc_desc_t``).
        self.device_desc = C.ze_device_mem_alloc_desc_t(
            C.ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, None, device_flags, ordinal
        )
        self.host_desc = C.ze_host_mem_alloc_desc_t(C.ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, None, host_flags)
        #: The export descriptor chained to the device descriptor (None: not exportable).
        self.export_desc = None
        if dmabuf:
            self.export_desc = C.ze_external_memory_export_desc_t(
                C.ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_DESC, None, C.ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF
            )
            self.device_desc.pNext = ctypes.addressof(self.export_desc)
        self._ddesc_ref = byref(self.device_desc)
        self._hdesc_ref = byref(self.host_desc)
        #: The allocating call's name (for errors).
        self.name = ALLOC_CALLS[kind]
        self._alloc_fn = native.function(self.name)
        self._free_fn = native.function("zeMemFree")

    def allocate(self, size: int) -> int:
        """A new allocation of ``size`` bytes (checked by the area), owned by the context."""
        out = c_void_p()
        kind = self._kind
        if kind is Kind.DEVICE:
            rc = self._alloc_fn(self._ctx, self._ddesc_ref, size, self._alignment, self._dev, byref(out))
        elif kind is Kind.MANAGED:
            rc = self._alloc_fn(
                self._ctx, self._ddesc_ref, self._hdesc_ref, size, self._alignment, self._dev, byref(out)
            )
        else:
            rc = self._alloc_fn(self._ctx, self._hdesc_ref, size, self._alignment, byref(out))
        if rc:
            raise self._runtime.errors.error(self.name, rc)
        ptr = out.value
        if not ptr:
            raise AMLFailure(f"{self.name} returned SUCCESS and a NULL pointer")
        self._runtime.register(ptr, self._context)
        return ptr

    def free(self, ptr: int) -> None:
        """``zeMemFree`` of an allocation of :meth:`allocate`; on failure it stays recorded."""
        rc = self._free_fn(self._ctx, ptr)
        if rc:
            raise self._runtime.errors.error("zeMemFree", rc)
        self._runtime.unregister(ptr)
