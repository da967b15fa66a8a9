"""A verbs protection domain double (aml_core.rdma.Domain) for machines without an RDMA
device, and a host-memory GrowableMemory area for expandable pools without a GPU.

:class:`FakeDomain` checks what the kernel's ``ib_umem_get`` checks before it pins pages:
the whole range is mapped in this process (``/proc/self/maps``), writable when local or
remote write is asked; a dma-buf fd is open and holds ``offset + length`` bytes
(``lseek(SEEK_END)``, which a dma-buf answers with its size). A refusal raises what
pyverbs raises (an exception with ``error_code``, the errno), so the binding's error
translation is what is tested. It counts live regions (``live``), records whether
each region's memory was still mapped when it was deregistered (``deregistered``),
counts every call (``calls``), and fails the next call with an injected errno
(``inject``)."""

from __future__ import annotations

import ctypes
import errno
import itertools
import mmap
import os
from typing import Any

from aml_core.area import Area
from aml_core.buffer import Buffer
from aml_core.errors import AMLNotSupported
from aml_core.rdma import Access
from aml_core.specs import Capability, Kind

__all__ = ["FakeDomain", "FakeRdmaError", "HostGrowable", "mapped"]


class FakeRdmaError(Exception):
    """What pyverbs raises for a failed verbs call (PyverbsRDMAError): the errno in
    ``error_code``."""

    def __init__(self, message: str, error_code: int) -> None:
        super().__init__(message)
        self.error_code = error_code


def mapped(addr: int, length: int, writable: bool) -> bool:
    """Whether ``[addr, addr + length)`` is mapped in this process (and writable)."""
    end = addr + length
    spans: list[tuple[int, int, str]] = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            rng, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in rng.split("-"))
            spans.append((lo, hi, perms))
    at = addr
    for lo, hi, perms in sorted(spans):
        if lo <= at < hi:
            if "r" not in perms or (writable and "w" not in perms):
                return False
            at = hi
            if at >= end:
                return True
    return False


class _Region:
    __slots__ = ("closed", "domain", "fd", "iova", "length", "lkey", "offset", "ptr", "rkey")

    def __init__(
        self, domain: FakeDomain, key: int, iova: int, ptr: int, length: int, fd: int, offset: int
    ) -> None:
        self.domain, self.lkey, self.rkey, self.iova = domain, key, key | 0x8000_0000, iova
        self.ptr, self.length, self.fd, self.offset = ptr, length, fd, offset
        self.closed = False

    def close(self) -> None:
        if self.closed:
            return
        self.domain._call("ibv_dereg_mr")
        self.closed = True
        self.domain.regions.remove(self)
        # whether the memory was still there when its region went (never after the free)
        still = self.fd >= 0 or mapped(self.ptr, self.length, False)
        self.domain.deregistered.append((self.ptr, self.length, still))


class FakeDomain:
    """A protection domain of the device ``name`` (see the module doc)."""

    _keys = itertools.count(0x100)

    def __init__(self, name: str = "fake0") -> None:
        self.device = name
        self.pd = object()
        self.regions: list[_Region] = []
        #: (ptr, length, still mapped) of every region deregistered
        self.deregistered: list[tuple[int, int, bool]] = []
        self.calls: dict[str, int] = {}
        self.closed = False
        self._inject: dict[str, int] = {}

    @property
    def live(self) -> int:
        return len(self.regions)

    def inject(self, function: str, error: int) -> None:
        """Fail the next call of ``function`` with errno ``error``."""
        self._inject[function] = error

    def _call(self, function: str) -> None:
        self.calls[function] = self.calls.get(function, 0) + 1
        if self.closed:
            raise FakeRdmaError(f"{function}: the protection domain was deallocated", errno.EINVAL)
        error = self._inject.pop(function, None)
        if error is not None:
            raise FakeRdmaError(f"{function} failed (injected)", error)

    def reg_mr(self, addr: int, length: int, access: int) -> _Region:
        self._call("ibv_reg_mr")
        if length == 0:
            raise FakeRdmaError("ibv_reg_mr: zero length", errno.EINVAL)
        if not mapped(addr, length, bool(access & (Access.LOCAL_WRITE | Access.REMOTE_WRITE))):
            raise FakeRdmaError(f"ibv_reg_mr: 0x{addr:x}+{length} is not mapped", errno.EFAULT)
        region = _Region(self, next(self._keys), addr, addr, length, -1, 0)
        self.regions.append(region)
        return region

    def reg_dmabuf_mr(self, offset: int, length: int, fd: int, access: int) -> _Region:
        self._call("ibv_reg_dmabuf_mr")
        try:
            os.fstat(fd)
            size = os.lseek(fd, 0, os.SEEK_END)
        except OSError as exc:
            raise FakeRdmaError(f"ibv_reg_dmabuf_mr: fd {fd}: {exc}", exc.errno or errno.EBADF) from exc
        if length == 0 or offset + length > size:
            raise FakeRdmaError(
                f"ibv_reg_dmabuf_mr: {offset}+{length} past the dma-buf's {size}", errno.EINVAL
            )
        # pyverbs' DmaBufMR registers with iova = offset; the double does the same.
        region = _Region(self, next(self._keys), offset, 0, length, fd, offset)
        self.regions.append(region)
        return region


# -- a host GrowableMemory area --------------------------------------------------------------
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_PROT_NONE = 0
_MAP_FIXED = 0x10
_MAP_NORESERVE = 0x4000
_FAILED = ctypes.c_void_p(-1).value


def _mmap(ptr: int, size: int, prot: int, flags: int) -> int:
    got = _libc.mmap(ptr or None, size, prot, flags | mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    if got in (None, _FAILED):
        raise OSError(ctypes.get_errno(), "mmap")
    return int(got)


class _Reservation:
    def __init__(self, ptr: int, size: int) -> None:
        self.ptr, self.size, self.freed = ptr, size, False


class HostGrowable(Area):
    """Host memory that grows in place (GrowableMemory): a PROT_NONE reservation, chunks
    mapped read-write into it with MAP_FIXED and back to PROT_NONE when unmapped: an
    expandable pool of host memory, the registration's chunk logic without a GPU."""

    def __init__(self, granularity: int = 4096) -> None:
        self._g = granularity
        self.committed: list[tuple[int, int]] = []
        super().__init__(backend="host", kind=Kind.HOST, device=None, capabilities=Capability.NONE)

    def _allocate(self, size: int, options: Any) -> Buffer:
        raise AMLNotSupported("HostGrowable only grows an expandable pool")

    def _free(self, buffer: Buffer) -> None:  # pragma: no cover - never allocates
        raise AMLNotSupported("HostGrowable has no buffers")

    def granularity(self) -> int:
        return self._g

    def reserve(self, size: int) -> _Reservation:
        return _Reservation(_mmap(0, size, _PROT_NONE, _MAP_NORESERVE), size)

    def address_free(self, reservation: _Reservation) -> None:
        _libc.munmap(reservation.ptr, reservation.size)
        reservation.freed = True

    def commit(self, ptr: int, size: int) -> None:
        _mmap(ptr, size, mmap.PROT_READ | mmap.PROT_WRITE, _MAP_FIXED)
        self.committed.append((ptr, size))

    def unmap(self, ptr: int, size: int) -> None:
        _mmap(ptr, size, _PROT_NONE, _MAP_FIXED | _MAP_NORESERVE)
        self.committed.remove((ptr, size))

    def copy(self, dst: int, src: int, size: int) -> None:
        ctypes.memmove(dst, src, size)

    def dlpack_device(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU
