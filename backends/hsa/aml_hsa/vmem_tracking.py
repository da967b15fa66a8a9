"""The ``hsa_amd_vmem_*`` calls of :class:`aml_hsa.runtime.HsaRuntime`, checked and
tracked: every argument is checked before the native call (:mod:`aml_core.checks`, the page
size, ROCr's must-be-zero flags), and the reservations, physical handles and mappings made
are tracked, so that a bad address or handle is EINVAL here rather than undefined in ROCr,
and :meth:`VmemTracking.live` says what is held (the leak checks).
"""

from __future__ import annotations

import abc
import os
import threading
from collections.abc import Sequence
from ctypes import byref, c_int, c_uint64, c_void_p
from typing import TYPE_CHECKING

import attrs

from aml_core import checks
from aml_core.errors import AMLFailure, AMLNotSupported, AMLTypeError, AMLValueError

from . import abi as C
from .topology import Agent, MemoryType, Permission, Pool, Segment

if TYPE_CHECKING:
    from .native import HsaLibrary

__all__ = ["PAGE_SIZE", "VmemTracking"]

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
_U64 = (1 << 64) - 1


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


def _exact(size: int | None, p: int, n: int, missing: str, call: str, what: str) -> None:
    """``p``, ``n`` must be exactly a tracked range (``size``: what is tracked at ``p``,
    None when nothing is), else EINVAL worded by ``missing`` / ``call`` / ``what``."""
    if size is None:
        raise AMLValueError(f"{p:#x} is not {missing}")
    if size != n:
        raise AMLValueError(f"{call} takes the {what} size {size}, not {n}")


def _overlaps(a: int, asize: int, b: int, bsize: int) -> bool:
    return a < b + bsize and b < a + asize


class VmemTracking(abc.ABC):
    """The checked and tracked ``hsa_amd_vmem_*`` calls, a part of the runtime: it calls
    ``VmemTracking.__init__``, sets ``lib`` and ``_pool_by_handle`` and gives :meth:`agent`
    and :meth:`pool`."""

    lib: HsaLibrary
    _pool_by_handle: dict[int, Pool]

    def __init__(self) -> None:
        self._vlock = threading.RLock()
        #: reserved address -> size
        self._reservations: dict[int, int] = {}
        self._handles: dict[int, _Handle] = {}
        self._mappings: dict[int, _Mapping] = {}

    @abc.abstractmethod
    def agent(self, value: object) -> Agent:
        """The agent of ``value`` (an :class:`Agent` or its handle)."""

    @abc.abstractmethod
    def pool(self, value: object) -> Pool:
        """The pool of ``value`` (a :class:`Pool` or its handle)."""

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
            _exact(self._reservations.get(p), p, n, "a reserved address range", "address_free", "reserved")
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

    def _mapping_from(self, p: int, n: int, call: str) -> _Mapping:
        """The mapping that starts at ``p``, of ``n`` bytes (``call`` takes it)."""
        st = self._mappings.get(p)
        _exact(None if st is None else st.size, p, n, "the start of a mapping", call, "mapped")
        assert st is not None
        return st

    def _mapping_at(self, va: int) -> tuple[int, _Mapping]:
        for m, st in self._mappings.items():
            if m <= va < m + st.size:
                return m, st
        raise AMLValueError(f"{va:#x} is not mapped")

    def vmem_unmap(self, va: int, size: int) -> None:
        self._vmem()
        p, n = checks.pointer(va, "va"), checks.size(size)
        with self._vlock:
            st = self._mapping_from(p, n, "unmap")
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
            self._mapping_from(p, n, "set_access")
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
