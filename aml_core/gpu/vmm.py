"""Virtual memory (HSA's ``hsa_amd_vmem_*`` semantics on CUDA VMM and HIP VMM), written once.

:class:`VirtualMemory` is both the low-level API (docs/aml-contract.md#hsa-virtual-memory) and an area:

* ``reserve(size)`` / ``address_free(r)``: a range of device virtual addresses;
* ``create(size)`` / ``release(p)``: physical memory on the device;
* ``map(ptr, size, p)`` / ``unmap(ptr, size)``; ``set_access`` / ``get_access``;
* ``export_fd(p)`` / ``import_fd(fd, size)``: a POSIX file descriptor another process
  can import; ``retain(ptr)``: the physical memory mapped at an address;
  ``properties(p)``; ``granularity()``.
* ``mmap(size)`` reserves, creates, maps and grants read-write access to the device in
  one step; ``munmap`` undoes it. ``growable(max_size)`` reserves a large range and maps
  chunks on demand: growing maps only the new bytes, so its cost does not depend on the
  current size, and the address never changes.

Everything is tracked: sizes are checked against the granularity, maps against live
reservations and existing mappings, and unknown pointers or handles are EINVAL before
any native call. ``close()`` unmaps, releases and frees whatever is left; so does the
collector for an area dropped without close() once its buffers are gone
(:meth:`~aml_core.gpu._vmm_api.VirtualMemoryApi.__del__`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, TypedDict

import attrs

from .. import checks
from .._buffer import AreaLock
from ..area import compiled_mmap
from ..buffer import Buffer, native_as
from ..errors import AMLMemoryError, AMLTypeError, AMLValueError
from ..protocols import StreamOrdering
from ..specs import Capability, format_size
from ..stream import StreamLike
from ._vmm_api import Access, Physical, Reservation, VirtualMemoryApi, also
from .runtime import Group
from .stream import runtime_stream_ordering

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = [
    "Access",
    "GrowableBuffer",
    "Physical",
    "Reservation",
    "VirtualMemory",
    "VmmOptions",
    "VmmOptionsDict",
]


@attrs.frozen
class _VmmBuffer:
    tag: str
    reservation: Reservation
    chunks: list[tuple[int, int, Physical]]


class GrowableBuffer(Buffer):
    """A device buffer that grows in place (see :meth:`VirtualMemory.growable`)."""

    __slots__ = ()

    @property
    def capacity(self) -> int:
        """The reserved size: the buffer can grow up to this many bytes."""
        return native_as(self, _VmmBuffer).reservation.size

    @property
    def mapped(self) -> int:
        """Bytes backed by physical memory (``size`` rounded up to the granularity)."""
        return sum(size for _, size, _ in native_as(self, _VmmBuffer).chunks)

    def grow(self, size: int) -> None:
        """Grow to ``size`` bytes, mapping only the new bytes; the address stays."""
        area = self.area
        if not isinstance(area, VirtualMemory):  # pragma: no cover - by construction
            raise AMLTypeError("a growable buffer belongs to a VirtualMemory area")
        area._grow(self, size)


@attrs.frozen
class VmmOptions:
    """mmap options of a virtual-memory area."""

    #: Make the physical memory exportable as a POSIX file descriptor.
    exportable: bool = False


class VmmOptionsDict(TypedDict, total=False):
    """:class:`VmmOptions` as a mapping (``vm.mmap(n, {"exportable": True})``), typed."""

    exportable: bool


class VirtualMemory(VirtualMemoryApi):
    """Virtual memory of one device (a DEVICE area of VMM-backed buffers): the tracked
    API (:class:`~aml_core.gpu._vmm_api.VirtualMemoryApi`) and buffers made with it."""

    options_type = VmmOptions

    @compiled_mmap
    def mmap(
        self, size: int, options: VmmOptions | VmmOptionsDict | None = None, *, stream: StreamLike = None
    ) -> Buffer:
        """Map ``size`` bytes (rounded up to the allocation granularity) of device memory
        in one step: reserve an address range, create physical memory, map it and give
        the device read-write access (cuMemAddressReserve, cuMemCreate, cuMemMap,
        cuMemSetAccess and their HIP/Level Zero equivalents); munmap undoes all four.

        Options (:class:`VmmOptions`, or a :class:`VmmOptionsDict` of its keys):

        - ``exportable``: make the physical memory exportable as a POSIX file descriptor
          (:meth:`export_fd`; default False).

        Errors of virtual memory: :class:`~aml_core.errors.AMLMemoryError` for a size
        that passes 2**63 - 1 once rounded up, or no device memory or address space
        left; the runtime's errors by its error table for each of the four calls (what
        was done before the failing call is undone)."""
        return super().mmap(size, options)

    def __init__(self, runtime: Runtime, device: int) -> None:
        """The virtual-memory API of ``device`` (an index) over ``runtime`` (which must
        provide the VIRTUAL_MEMORY group). Prefer the backend's ``virtual_memory(device)``."""
        super().__init__(runtime, device, Capability.VIRTUAL_MEMORY)
        self._ops = runtime.require(Group.VIRTUAL_MEMORY)
        self._vlock = AreaLock(self, threading.RLock())
        self._reservations = {}
        self._physicals = {}
        self._mappings = {}
        self._granularity = self._ops.vmm_granularity(device, False)

    @property
    def runtime(self) -> Runtime:
        """The runtime this area maps with (pools read its DLPack device type)."""
        return self._runtime

    # -- what pools use (aml_core.protocols) -----------------------------------------
    def stream_ordering(self) -> StreamOrdering:
        """The runtime's stream and event operations (StreamOrderedArea)."""
        return runtime_stream_ordering(self._runtime)

    def commit(self, ptr: int, size: int) -> None:
        """Back ``[ptr, ptr + size)`` of a live reservation with new physical memory of
        this device, read-write for it (GrowableMemory: what an expandable pool grows
        by); :meth:`unmap` gives it back. On failure nothing stays mapped or allocated."""
        self._map_chunk(ptr, size, False)

    def copy(self, dst: int, src: int, size: int) -> None:
        """Copy ``size`` bytes between host memory and mapped memory, by address
        (GrowableMemory)."""
        self._runtime.require(Group.ALLOCATION).memcpy(dst, src, size)

    def dlpack_device(self) -> tuple[int, int]:
        """The DLPack device (type, id) of this area's memory (GrowableMemory)."""
        return (int(self._runtime.traits.dl_device), self.device or 0)

    # -- the area: one-step buffers and growable buffers ---------------------------------
    def _round(self, n: int) -> int:
        g = self._granularity
        return -(-n // g) * g

    def _allocate(self, size: int, options: VmmOptions) -> Buffer:
        n = self._round(size)
        if n > checks.MAX_SIZE:  # a size the address space cannot hold once rounded up
            raise AMLMemoryError(
                f"{format_size(size, exact=True)} round up to {format_size(n, exact=True)} "
                f"(granularity {format_size(self._granularity)}): more than 2**63 - 1"
            )
        res = self.reserve(n)
        try:
            chunk = self._map_chunk(res.ptr, n, options.exportable)
        except BaseException as exc:
            also(exc, "freeing the reservation", lambda: self.address_free(res))
            raise
        return self._new_buffer(
            res.ptr,
            size,
            host_accessible=False,
            dl_device=self.dlpack_device(),
            native=_VmmBuffer("vmm", res, [chunk]),
        )

    def _map_chunk(self, ptr: int, size: int, exportable: bool) -> tuple[int, int, Physical]:
        phys = self.create(size, exportable=exportable)
        try:
            self.map(ptr, size, phys)
            try:
                self.set_access(ptr, size, Access.READWRITE)
            except BaseException as exc:
                also(exc, "unmapping", lambda: self.unmap(ptr, size))
                raise
        except BaseException as exc:
            also(exc, "releasing the physical allocation", lambda: self.release(phys))
            raise
        # The mapping keeps the memory alive; drop the creation reference now. If that
        # fails, undo the mapping and raise the release's native error: the physical
        # allocation stays tracked (close() releases it), nothing is marked released.
        try:
            self.release(phys)
        except BaseException as exc:
            also(exc, "unmapping", lambda: self.unmap(ptr, size))
            raise
        return ptr, size, phys

    def _free(self, buffer: Buffer) -> None:
        state = native_as(buffer, _VmmBuffer)
        for ptr, size, _phys in reversed(state.chunks):
            if ptr in self._mappings:
                self.unmap(ptr, size)
        state.chunks.clear()
        if not state.reservation.freed:
            self.address_free(state.reservation)

    def growable(self, max_size: int, size: int | None = None, *, exportable: bool = False) -> GrowableBuffer:
        """A device buffer of ``size`` bytes (default: one granule) at an address that
        stays put while it grows up to ``max_size``."""
        self._check_open()
        cap = self._round(checks.size(max_size, "max_size"))
        first = self._granularity if size is None else checks.size(size)
        if first > cap:
            raise AMLValueError(
                f"size {format_size(first, exact=True)} is larger than "
                f"max_size {format_size(cap, exact=True)}"
            )
        res = self.reserve(cap)
        try:
            chunk = self._map_chunk(res.ptr, self._round(first), exportable)
        except BaseException as exc:
            also(exc, "freeing the reservation", lambda: self.address_free(res))
            raise
        buf = self._new_buffer(
            res.ptr,
            first,
            host_accessible=False,
            dl_device=self.dlpack_device(),
            native=_VmmBuffer("vmm", res, [chunk]),
            buffer_type=GrowableBuffer,
        )
        return self._track(buf, "growable")

    def _grow(self, buffer: GrowableBuffer, size: int) -> None:
        n = checks.size(size)
        with self._vlock:
            if not self._is_live(buffer):
                raise AMLValueError(f"{buffer!r} is not live in this area")
            state = native_as(buffer, _VmmBuffer)
            if n > state.reservation.size:
                raise AMLValueError(
                    f"cannot grow to {format_size(n, exact=True)}: "
                    f"the capacity is {format_size(state.reservation.size, exact=True)}"
                )
            if n < buffer.size:
                raise AMLValueError(
                    f"a growable buffer does not shrink "
                    f"({format_size(buffer.size, exact=True)} -> {format_size(n, exact=True)})"
                )
            mapped_end = buffer.ptr + buffer.mapped
            need = self._round(n) - buffer.mapped
            if need > 0:
                state.chunks.append(self._map_chunk(mapped_end, need, False))
            old = buffer.size
            buffer._bind(buffer.ptr, n, 0, *self.dlpack_device())
            self._resized(buffer, old)
