"""The tracked virtual-memory API of :class:`~aml_core.gpu.vmm.VirtualMemory` (HSA's
``hsa_amd_vmem_*`` semantics, docs/aml-contract.md#hsa-virtual-memory): reservations,
physical allocations and mappings, each checked against what the area tracks before any
native call, and ``close()`` giving back whatever is left. :mod:`aml_core.gpu.vmm` builds
the area's buffers on it and re-exports :class:`Access`, :class:`Reservation` and
:class:`Physical`."""

from __future__ import annotations

import enum
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import attrs

from .. import checks
from .._buffer import AreaLock
from ..errors import AMLBusyError, AMLError, AMLTypeError, AMLValueError
from ._device_area import DeviceMemoryArea
from .runtime import AllocationProperties

if TYPE_CHECKING:
    from .runtime import VirtualMemoryOps

__all__ = ["Access", "Physical", "Reservation", "VirtualMemoryApi", "also", "close_dropped"]


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


class VirtualMemoryApi(DeviceMemoryArea):
    """The tracked ``reserve`` / ``create`` / ``map`` / ``set_access`` ... of one device
    (the state is set up by :class:`~aml_core.gpu.vmm.VirtualMemory`)."""

    _ops: VirtualMemoryOps
    #: Guards the virtual-memory state; its holders count as inside the area, so that a
    #: GC-driven free of a buffer (which unmaps) never runs in the middle of it.
    _vlock: AreaLock
    _reservations: dict[int, Reservation]
    _physicals: dict[int, Physical]
    _mappings: dict[int, tuple[int, Physical]]
    _granularity: int

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

    def _mapping(self, ptr: int) -> tuple[int, Physical]:
        """The (size, physical) mapped at ``ptr`` (exactly), else EINVAL."""
        found = self._mappings.get(ptr)
        if found is None:
            raise AMLValueError(f"0x{ptr:x} is not a mapping of this area")
        return found

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
            found = self._mapping(ptr)
            if found[0] != size:
                raise AMLValueError(f"unmap size {size} does not match the mapping's size {found[0]}")
            self._ops.vmm_unmap(ptr, size)
            del self._mappings[ptr]

    def set_access(self, ptr: int, size: int, access: Access | Mapping[int, Access]) -> None:
        """Grant access to a mapped range: one :class:`Access` for this area's device,
        or a mapping ``{device: Access}``."""
        with self._vlock:
            found = self._mapping(ptr)
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
            found = self._mapping(ptr)
            handle = self._ops.vmm_retain(ptr)
            phys = found[1]
            if handle != phys.handle:  # pragma: no cover - a runtime bug
                raise AMLValueError("the runtime retained a different allocation than was mapped")
            phys.refs += 1
            self._physicals[phys.handle] = phys
            return phys

    def properties(self, physical: Physical) -> AllocationProperties:
        return self._ops.vmm_properties(self._physical(physical).handle)

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

    def _holds_native(self) -> bool:
        """Whether anything native is left: a buffer, a reservation, a physical allocation
        or a mapping."""
        held = (getattr(self, name, None) for name in ("_reservations", "_physicals", "_mappings"))
        return bool(self._stats()[2]) or any(held)

    def __del__(self) -> None:
        """A virtual-memory area dropped without close() gives back what it holds when it is
        collected, as a dropped buffer is freed: a failure is reported through
        ``sys.unraisablehook`` (an exception in ``__del__``) and the area is kept, with what
        it could not give back, for the backend's ``reset()`` to retry (:func:`close_dropped`).
        At interpreter exit nothing is done: the process's exit returns the memory."""
        if sys.is_finalizing() or not self._holds_native():
            return
        what = repr(self)
        try:
            self.close()
        except AMLError:
            _DROPPED.append(self)  # kept alive (resurrected) until close_dropped() frees it
            raise
        warnings.warn(f"unclosed {what}", ResourceWarning, stacklevel=2)


#: Virtual-memory areas collected without close() whose native release failed: each is
#: closed again by :func:`close_dropped` (its backend's ``reset()``).
_DROPPED: list[VirtualMemoryApi] = []


def close_dropped(runtime: object) -> None:
    """Close again the dropped virtual-memory areas of ``runtime`` whose release failed when
    they were collected (a backend's ``reset()``, before it unloads the runtime); those that
    fail again stay kept, and the first error is raised with the others as notes."""
    errors: list[AMLError] = []
    for vm in [vm for vm in _DROPPED if vm._runtime is runtime]:
        try:
            vm.close()
        except AMLError as exc:
            errors.append(exc)
            continue
        _DROPPED.remove(vm)
    if errors:
        for other in errors[1:]:
            errors[0].add_note(f"closing another dropped virtual-memory area failed too: {other}")
        raise errors[0]


def also(exc: BaseException, what: str, undo: Callable[[], None]) -> None:
    """Undo a step after ``exc``; if the undo fails too, say so on ``exc`` (what was
    not undone stays tracked for close())."""
    try:
        undo()
    except AMLError as also:
        exc.add_note(f"{what} failed too: {also}")
