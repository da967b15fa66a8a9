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
any native call. ``close()`` unmaps, releases and frees whatever is left.
"""

from __future__ import annotations

import enum
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

import attrs

from .. import checks
from .._buffer import AreaLock
from ..area import Area, compiled_mmap
from ..buffer import Buffer, native_as
from ..errors import AMLBusyError, AMLError, AMLMemoryError, AMLTypeError, AMLValueError
from ..interop import cuda_array_interface
from ..protocols import StreamOrdering
from ..specs import Capability, Kind
from .runtime import AllocationProperties, Group
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


class Access(enum.IntEnum):
    """Access flags (``CUmemAccess_flags`` / ``hipMemAccessFlags``; CUDA and HIP have
    no write-only access)."""

    NONE = 0
    READ = 1
    READWRITE = 3


@attrs.define(eq=False)
class Reservation:
    """A reserved virtual address range."""

    ptr: int
    size: int
    freed: bool = False

    def __contains__(self, item: tuple[int, int]) -> bool:
        ptr, size = item
        return self.ptr <= ptr and ptr + size <= self.ptr + self.size


@attrs.define(eq=False)
class Physical:
    """Physical memory (a ``CUmemGenericAllocationHandle`` / ``hipMemGenericAllocationHandle_t``).
    ``refs`` counts create/import/retain minus release; the native handle is released
    with the last reference."""

    handle: int
    size: int
    device: int
    refs: int = 1

    @property
    def released(self) -> bool:
        return self.refs <= 0


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


class VirtualMemory(Area):
    """Virtual memory of one device (a DEVICE area of VMM-backed buffers)."""

    options_type = VmmOptions

    @compiled_mmap
    def mmap(self, size: int, options: VmmOptions | VmmOptionsDict | None = None) -> Buffer:
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
        super().__init__(
            backend=runtime.traits.name,
            kind=Kind.DEVICE,
            device=device,
            capabilities=Capability.VIRTUAL_MEMORY | Capability.DLPACK | Capability.CUDA_ARRAY_INTERFACE,
        )
        self._runtime = runtime
        self._ops = runtime.require(Group.VIRTUAL_MEMORY)
        #: Guards the virtual-memory state; its holders count as inside the area, so that a
        #: GC-driven free of a buffer (which unmaps) never runs in the middle of it.
        self._vlock = AreaLock(self, threading.RLock())
        self._reservations: dict[int, Reservation] = {}
        self._physicals: dict[int, Physical] = {}
        self._mappings: dict[int, tuple[int, Physical]] = {}
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

    # -- checks ---------------------------------------------------------------------
    def granularity(self, recommended: bool = False) -> int:
        """The allocation granularity (minimum, or the recommended one)."""
        if not recommended:
            return self._granularity
        return self._ops.vmm_granularity(self.device or 0, True)

    def _aligned(self, size: object, what: str = "size") -> int:
        n = checks.size(size, what)
        if n % self._granularity:
            raise AMLValueError(
                f"{what} {n} is not a multiple of the granularity {self._granularity} "
                f"(round up to {-(-n // self._granularity) * self._granularity})"
            )
        return n

    def _physical(self, physical: object) -> Physical:
        if not isinstance(physical, Physical):
            raise AMLTypeError(f"expected a Physical handle, not {type(physical).__name__}")
        if physical.released or self._physicals.get(physical.handle) is not physical:
            raise AMLValueError("this physical allocation was released or belongs to another area")
        return physical

    def _reservation_of(self, ptr: int, size: int) -> Reservation:
        for res in self._reservations.values():
            if (ptr, size) in res:
                return res
        raise AMLValueError(f"0x{ptr:x}+{size} is not inside a live reservation of this area")

    # -- the hsa_amd_vmem_* API (docs/aml-contract.md#hsa-virtual-memory) -------------
    def reserve(self, size: int, alignment: int = 0, address: int = 0) -> Reservation:
        """Reserve a virtual range of ``size`` bytes (a multiple of the granularity).
        ``address`` is a hint; another range is returned if it is taken."""
        self._check_open()
        n = self._aligned(size)
        for name, value in (("alignment", alignment), ("address", address)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise AMLValueError(f"{name} must be an int >= 0, got {value!r}")
        if alignment and (alignment & (alignment - 1)):
            raise AMLValueError(f"alignment must be 0 or a power of two, got {alignment}")
        ptr = self._ops.vmm_reserve(n, alignment, address)
        res = Reservation(ptr, n)
        with self._vlock:
            self._reservations[ptr] = res
        return res

    def address_free(self, reservation: Reservation) -> None:
        """Free a reservation; it must hold no mapping (else EBUSY)."""
        with self._vlock:
            if not isinstance(reservation, Reservation):
                raise AMLTypeError(f"expected a Reservation, not {type(reservation).__name__}")
            if reservation.freed or self._reservations.get(reservation.ptr) is not reservation:
                raise AMLValueError("this reservation was freed or belongs to another area")
            inside = [p for p, (s, _) in self._mappings.items() if (p, s) in reservation]
            if inside:
                raise AMLBusyError(f"the reservation still holds {len(inside)} mapping(s); unmap them first")
            self._ops.vmm_address_free(reservation.ptr, reservation.size)
            reservation.freed = True
            del self._reservations[reservation.ptr]

    def create(self, size: int, *, exportable: bool = False) -> Physical:
        """Allocate ``size`` bytes of physical memory on this area's device."""
        self._check_open()
        n = self._aligned(size)
        handle = self._ops.vmm_create(n, self.device or 0, bool(exportable))
        phys = Physical(handle, n, self.device or 0)
        with self._vlock:
            self._physicals[handle] = phys
        return phys

    def release(self, physical: Physical) -> None:
        """Drop one reference; the memory lives on while it is mapped."""
        with self._vlock:
            phys = self._physical(physical)
            self._ops.vmm_release(phys.handle)
            phys.refs -= 1
            if phys.refs <= 0:
                del self._physicals[phys.handle]

    def map(self, ptr: int, size: int, physical: Physical, offset: int = 0) -> None:
        """Map ``physical`` at ``ptr`` (inside a reservation, not over a mapping)."""
        with self._vlock:
            self._check_open()
            phys = self._physical(physical)
            n = self._aligned(size)
            if not isinstance(ptr, int) or isinstance(ptr, bool):
                raise AMLTypeError(f"ptr must be an int, not {type(ptr).__name__}")
            if offset != 0:
                raise AMLValueError("offset must be 0 (CUDA and HIP map whole allocations)")
            if n > phys.size:
                raise AMLValueError(f"size {n} is larger than the physical allocation ({phys.size})")
            self._reservation_of(ptr, n)
            for p, (s, _) in self._mappings.items():
                if p < ptr + n and ptr < p + s:
                    raise AMLValueError(f"0x{ptr:x}+{n} overlaps the mapping at 0x{p:x}+{s}")
            self._ops.vmm_map(ptr, n, phys.handle, 0)
            self._mappings[ptr] = (n, phys)

    def unmap(self, ptr: int, size: int) -> None:
        """Unmap a mapping made by :meth:`map` (exact address and size)."""
        with self._vlock:
            found = self._mappings.get(ptr)
            if found is None:
                raise AMLValueError(f"0x{ptr:x} is not a mapping of this area")
            if found[0] != size:
                raise AMLValueError(f"unmap size {size} does not match the mapping's size {found[0]}")
            self._ops.vmm_unmap(ptr, size)
            del self._mappings[ptr]

    def set_access(self, ptr: int, size: int, access: Access | Mapping[int, Access]) -> None:
        """Grant access to a mapped range: one :class:`Access` for this area's device,
        or a mapping ``{device: Access}``."""
        with self._vlock:
            found = self._mappings.get(ptr)
            if found is None:
                raise AMLValueError(f"0x{ptr:x} is not a mapping of this area")
            if size != found[0]:
                raise AMLValueError(f"set_access size {size} must equal the mapping's size {found[0]}")
        table = {self.device or 0: access} if not isinstance(access, Mapping) else dict(access)
        pairs: list[tuple[int, int]] = []
        ndev = self._runtime.device_count()
        for dev, flags in table.items():
            if isinstance(dev, bool) or not isinstance(dev, int) or not 0 <= dev < ndev:
                raise AMLValueError(f"device {dev!r} is not in 0..{ndev - 1}")
            try:
                pairs.append((dev, Access(flags).value))
            except ValueError:
                raise AMLValueError(
                    f"unknown access {flags!r}; allowed: NONE 0, READ 1, READWRITE 3"
                ) from None
        self._ops.vmm_set_access(ptr, size, pairs)

    def get_access(self, ptr: int, device: int | None = None) -> Access:
        """The access a device has to a mapped address."""
        dev = self.device or 0 if device is None else device
        return Access(self._ops.vmm_get_access(ptr, dev))

    def export_fd(self, physical: Physical) -> int:
        """A POSIX file descriptor for an exportable allocation (the caller closes it)."""
        phys = self._physical(physical)
        return self._ops.vmm_export_fd(phys.handle)

    def import_fd(self, fd: int, size: int) -> Physical:
        """Import an allocation from a file descriptor (of ``size`` bytes). The fd is
        not closed."""
        self._check_open()
        fd = checks.fd(fd)
        fd = checks.fd(fd)
        try:
            os.fstat(fd)
        except OSError:
            raise AMLValueError(f"fd {fd} is not an open file descriptor") from None
        n = self._aligned(size)
        handle = self._ops.vmm_import_fd(fd)
        with self._vlock:
            existing = self._physicals.get(handle)
            if existing is not None:
                existing.refs += 1
                return existing
            phys = Physical(handle, n, self.device or 0)
            self._physicals[handle] = phys
            return phys

    def retain(self, ptr: int) -> Physical:
        """The physical allocation mapped at ``ptr`` (one more reference: release it)."""
        with self._vlock:
            found = self._mappings.get(ptr)
            if found is None:
                raise AMLValueError(f"0x{ptr:x} is not a mapping of this area")
            handle = self._ops.vmm_retain(ptr)
            phys = found[1]
            if handle != phys.handle:  # pragma: no cover - a runtime bug
                raise AMLValueError("the runtime retained a different allocation than was mapped")
            phys.refs += 1
            self._physicals[phys.handle] = phys
            return phys

    def properties(self, physical: Physical) -> AllocationProperties:
        return self._ops.vmm_properties(self._physical(physical).handle)

    # -- the area: one-step buffers and growable buffers ---------------------------------
    def _round(self, n: int) -> int:
        g = self._granularity
        return -(-n // g) * g

    def _allocate(self, size: int, options: VmmOptions) -> Buffer:
        n = self._round(size)
        if n > checks.MAX_SIZE:  # a size the address space cannot hold once rounded up
            raise AMLMemoryError(
                f"{size} bytes round up to {n} (granularity {self._granularity}): more than 2**63 - 1"
            )
        res = self.reserve(n)
        try:
            chunk = self._map_chunk(res.ptr, n, options.exportable)
        except BaseException as exc:
            _also(exc, "freeing the reservation", lambda: self.address_free(res))
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
                _also(exc, "unmapping", lambda: self.unmap(ptr, size))
                raise
        except BaseException as exc:
            _also(exc, "releasing the physical allocation", lambda: self.release(phys))
            raise
        # The mapping keeps the memory alive; drop the creation reference now. If that
        # fails, undo the mapping and raise the release's native error: the physical
        # allocation stays tracked (close() releases it), nothing is marked released.
        try:
            self.release(phys)
        except BaseException as exc:
            _also(exc, "unmapping", lambda: self.unmap(ptr, size))
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
            raise AMLValueError(f"size {first} is larger than max_size {cap}")
        res = self.reserve(cap)
        try:
            chunk = self._map_chunk(res.ptr, self._round(first), exportable)
        except BaseException as exc:
            _also(exc, "freeing the reservation", lambda: self.address_free(res))
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
                raise AMLValueError(f"cannot grow to {n} bytes: the capacity is {state.reservation.size}")
            if n < buffer.size:
                raise AMLValueError(f"a growable buffer does not shrink ({buffer.size} -> {n})")
            mapped_end = buffer.ptr + buffer.mapped
            need = self._round(n) - buffer.mapped
            if need > 0:
                state.chunks.append(self._map_chunk(mapped_end, need, False))
            old = buffer.size
            buffer._bind(buffer.ptr, n, 0, *self.dlpack_device())
            self._resized(buffer, old)

    def _cuda_array_interface(self, buffer: Buffer) -> dict[str, Any] | None:
        return cuda_array_interface(buffer.device_ptr, buffer.size)

    def close(self) -> None:
        """Free the buffers, then unmap, release and free whatever is left. A native call
        that fails leaves its object tracked (close() again retries it); the first error
        is raised with its native cause, after everything else was tried."""
        errors: list[AMLError] = []
        try:
            super().close()
        except AMLError as exc:
            errors.append(exc)
        with self._vlock:
            for ptr, (size, _phys) in list(self._mappings.items()):
                try:
                    self._ops.vmm_unmap(ptr, size)
                except AMLError as exc:
                    errors.append(exc)
                    continue
                del self._mappings[ptr]
            for phys in list(self._physicals.values()):
                try:
                    while phys.refs > 0:
                        self._ops.vmm_release(phys.handle)
                        phys.refs -= 1
                except AMLError as exc:
                    errors.append(exc)
                    continue
                del self._physicals[phys.handle]
            for res in list(self._reservations.values()):
                if any((p, s) in res for p, (s, _) in self._mappings.items()):
                    continue  # its mapping could not be unmapped: the error is already listed
                try:
                    self._ops.vmm_address_free(res.ptr, res.size)
                except AMLError as exc:
                    errors.append(exc)
                    continue
                res.freed = True
                del self._reservations[res.ptr]
        if errors:
            for other in errors[1:]:
                errors[0].add_note(f"another native release failed too: {other}")
            raise errors[0]


def _also(exc: BaseException, what: str, undo: Callable[[], None]) -> None:
    """Undo a step after ``exc``; if the undo fails too, say so on ``exc`` (what was
    not undone stays tracked for close())."""
    try:
        undo()
    except AMLError as also:
        exc.add_note(f"{what} failed too: {also}")
