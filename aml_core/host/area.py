"""The host area: Linux mmap with NUMA policy, huge pages, alignment and files.

``HostArea(policy=..., nodes=..., shared=..., ipc=..., huge_pages=...,
transparent_huge_pages=..., alignment=...)`` is AML's Linux area: every mmap is an
anonymous private (or shared) mapping, or a file mapping when ``options.fd`` is given, or
with ``ipc=True`` a shared mapping of a memfd of its own that ``ipc_export`` shares with
other processes (:mod:`aml_core.host.ipc`), bound to the node set with ``mbind`` when a
policy other than DEFAULT is set; anonymous mappings of 4 MiB and more are advised
``MADV_HUGEPAGE`` unless ``transparent_huge_pages=False`` (NumPy's rule for its arrays),
except in an interleaving area, whose mappings of 2 MiB and more are advised (also with
``transparent_huge_pages=False``)
``MADV_NOHUGEPAGE`` so that they interleave page by page (docs/numa.md, "Placement").
A fresh mapping is bound without MPOL_MF_MOVE (it has no pages to move), and a bound area's
private mappings of at most 1 MiB are pieces of one mapping bound once
(:mod:`aml_core.host.stock`: no mbind each); one made with
MAP_POPULATE or MAP_LOCKED, whose pages exist before the mbind, is bound with
MPOL_MF_MOVE (AML's flag), and under BIND with MPOL_MF_STRICT too, so that a page that
cannot be placed on the set is ENOMEM rather than a spill.
``area.move(buf, nodes)`` moves a live buffer's pages (:class:`~aml_core.host.numa.MoveReport`)
and ``area.rebind(policy, nodes)`` changes the policy of the area's future buffers.
Buffers are host memory: they speak
the buffer protocol and DLPack (``kDLCPU``), so ``memoryview(buf)``,
``numpy.frombuffer(buf, ...)`` and ``numpy.from_dlpack(buf)`` see the same bytes.

Rules checked before any system call (see also :mod:`aml_core.area`):

* ``nodes`` outside the allowed set: EDOM; ``nodes`` with DEFAULT, or no nodes with
  BIND/INTERLEAVE: EINVAL.
* ``alignment``: 0 or a power of two; ``options.flags`` may only carry MAP_NORESERVE,
  MAP_POPULATE and MAP_LOCKED; ``options.prot``: PROT_READ with or without PROT_WRITE.
* a file mapping: ``fd`` must be open, ``offset`` a multiple of the page size, and for a
  regular file ``offset + size`` must not pass the end of the file (touching pages past
  it would kill the process with SIGBUS).
"""

from __future__ import annotations

import contextlib
import mmap as _mmap
import os
import stat
from collections.abc import Iterable
from typing import Any, Literal, TypedDict, overload

import attrs

from .. import _os, checks
from ..area import Area, compiled_mmap
from ..buffer import Buffer, DLDeviceType, native_as
from ..errors import AMLNotSupported, AMLTypeError, AMLValueError
from ..ipc import IpcExport
from ..specs import Capability, Kind, format_size
from ..stream import StreamLike
from ..topology import MemspaceNodes
from . import ipc as _ipc
from . import numa
from .numa import MoveReport, Policy
from .stock import CARVE_MAX, Stock

__all__ = ["HostArea", "HostMmapOptions"]

PAGE_SIZE: int = _os.PAGE_SIZE
MAP_HUGETLB = getattr(_mmap, "MAP_HUGETLB", 0x40000)
MAP_HUGE_SHIFT = 26
MADV_HUGEPAGE = getattr(_mmap, "MADV_HUGEPAGE", 14)
MADV_NOHUGEPAGE = getattr(_mmap, "MADV_NOHUGEPAGE", 15)
#: An interleaving area's "auto" advises its anonymous mappings of at least this many
#: bytes (the smallest that can hold a transparent huge page) MADV_NOHUGEPAGE: a huge
#: page is one allocation, so a THP-backed buffer interleaves 2 MiB at a time (a 64 MiB
#: buffer on nodes 0-1 gave 7,936 and 8,448 pages: issue 29), not page by page.
THP_INTERLEAVE_MIN = 2 << 20
_INTERLEAVING = (Policy.INTERLEAVE, Policy.WEIGHTED_INTERLEAVE)
#: ``transparent_huge_pages="auto"`` (the default) advises anonymous mappings of at least
#: this many bytes, NumPy's rule for its arrays (numpy/_core/src/multiarray/alloc.c: 4 MiB;
#: checked: a 4 MiB array's pages are advised, one page less is not). Without it, a 64 MiB
#: aml buffer went through Open MPI 2.6-3.7x slower than a NumPy array of the same size,
#: whose pages were huge (evidence/2026-11-26-debian12-epyc-2core-mpi-host).
THP_AUTO_MIN = 4 << 20
_EXTRA_FLAGS = {
    "MAP_NORESERVE": getattr(_mmap, "MAP_NORESERVE", 0x4000),
    "MAP_POPULATE": getattr(_mmap, "MAP_POPULATE", 0x8000),
    "MAP_LOCKED": 0x2000,
}
_NORESERVE = _EXTRA_FLAGS["MAP_NORESERVE"]
#: Flags whose mapping has its pages before the mbind (so the mbind must move them).
_HAS_PAGES = _EXTRA_FLAGS["MAP_POPULATE"] | _EXTRA_FLAGS["MAP_LOCKED"]
_EXTRA_MASK = 0
for _bit in _EXTRA_FLAGS.values():
    _EXTRA_MASK |= _bit
_PROT_RW = _mmap.PROT_READ | _mmap.PROT_WRITE
_CPU = (int(DLDeviceType.CPU), 0)

CAPABILITIES = (
    Capability.NUMA
    | Capability.HUGE_PAGES
    | Capability.FILE_BACKED
    | Capability.BUFFER_PROTOCOL
    | Capability.DLPACK
)


def _int_or_none(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise AMLTypeError(f"expected an int, not {type(value).__name__}")
    return value


def _fd(value: object) -> int | None:
    """None (anonymous memory) or an open file descriptor number (a C int >= 0)."""
    return None if value is None else checks.fd(value, "options.fd")


def _offset(value: object) -> int:
    """A file offset: an ``off_t`` >= 0."""
    v = checks.integer(value, "options.offset")
    if not 0 <= v <= (1 << 63) - 1:
        raise AMLValueError(f"options.offset must be in 0..2**63 - 1 (an off_t), got {v}")
    return v


def _shared(value: object) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise AMLTypeError(f"options.shared must be a bool or None, not {type(value).__name__}")
    return value


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise AMLTypeError(f"expected an int, not {type(value).__name__}")
    return value


@attrs.frozen
class HostMmapOptions:
    """Per-mmap options (``struct aml_area_linux_mmap_options``): a file descriptor
    and offset for a file mapping, protection, extra MAP_* flags, and overrides of the
    area's ``shared`` and ``alignment``."""

    fd: int | None = attrs.field(default=None, converter=_fd)
    offset: int = attrs.field(default=0, converter=_offset)
    prot: int = attrs.field(default=_PROT_RW, converter=_int)
    flags: int = attrs.field(default=0, converter=_int)
    shared: bool | None = attrs.field(default=None, converter=_shared)
    alignment: int | None = attrs.field(default=None, converter=_int_or_none)


_DEFAULT_OPTIONS = HostMmapOptions()


class HostMmapOptionsDict(TypedDict, total=False):
    """:class:`HostMmapOptions` as a mapping (``area.mmap(n, {"fd": fd})``), typed: an
    unknown key or a value of the wrong type is a type error."""

    fd: int | None
    offset: int
    prot: int
    flags: int
    shared: bool | None
    alignment: int | None


def _alignment(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise AMLTypeError(f"alignment must be an int, not {type(value).__name__}")
    if value < 0 or (value & (value - 1)):
        raise AMLValueError(f"alignment must be 0 or a power of two, got {value}")
    if value > 1 << 40:
        raise AMLValueError(f"alignment {value} is larger than 1 TiB")
    return value


def _huge_page_size(value: bool | int) -> int:
    if value is True:
        return _default_huge_page_size()
    if value is False:
        return 0
    if isinstance(value, int) and value > 0 and not value & (value - 1) and value >= PAGE_SIZE:
        return value
    raise AMLValueError(f"huge_pages must be a bool or a power-of-two page size in bytes, got {value!r}")


def _default_huge_page_size() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("Hugepagesize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 2 << 20


def _placement(
    policy: Policy | str | int, nodes: Iterable[int] | int | None
) -> tuple[Policy, tuple[int, ...]]:
    """A checked (policy, nodes) pair: the rules of HostArea() and HostArea.rebind."""
    pol = Policy.parse(policy)
    node_set = numa.as_nodes(nodes)
    if pol is Policy.DEFAULT and node_set:
        raise AMLValueError("the DEFAULT policy takes no nodes; use BIND, PREFERRED or INTERLEAVE")
    if pol in (Policy.BIND, Policy.INTERLEAVE, Policy.WEIGHTED_INTERLEAVE) and not node_set:
        raise AMLValueError(f"the {pol.name} policy needs at least one node")
    if pol is Policy.PREFERRED and len(node_set) > 1:
        raise AMLValueError("the PREFERRED policy takes a single node")
    numa.check_supported(pol)
    return pol, node_set


@attrs.frozen
class _Placement:
    """An area's placement, replaced as one object by rebind (a mapping made while
    another thread rebinds sees the old placement or the new one, never half of each)."""

    policy: Policy
    nodes: tuple[int, ...]
    #: mmap flags of the fast path (default options, no huge pages, thp not True, not
    #: ipc), 0 when it does not apply.
    fast_flags: int
    #: the advice of an anonymous mapping: (MADV_*, from this many bytes) or None.
    #: "auto": MADV_HUGEPAGE from 4 MiB; in an interleaving area "auto" and False:
    #: MADV_NOHUGEPAGE from 2 MiB; none with explicit huge pages or in an ipc area.
    advice: tuple[int, int] | None
    #: the fast path's mbind: (mode, nodes) or None for DEFAULT.
    fast_bind: tuple[int, list[int]] | None
    #: where the fast path carves mappings of at most CARVE_MAX bytes (a bound area's
    #: private memory without alignment: aml_core.host.stock), else None.
    stock: Stock | None


class HostArea(Area):
    """Host memory from the Linux kernel, placed by a NUMA policy."""

    options_type = HostMmapOptions
    #: How ``aml_core.area(kind="host", memspace=...)`` chose this area's nodes
    #: (:class:`aml_core.topology.MemspaceNodes`); None for an area given its nodes.
    memspace: MemspaceNodes | None = None

    @compiled_mmap
    def mmap(
        self,
        size: int,
        options: HostMmapOptions | HostMmapOptionsDict | None = None,
        *,
        stream: StreamLike = None,
    ) -> Buffer:
        """Map ``size`` bytes of host memory: anonymous memory (private, or shared if the
        area is), or a file with ``fd``; placed by the area's NUMA policy (``mbind``),
        with its huge pages, transparent huge pages and alignment.

        Options (:class:`HostMmapOptions`, or a :class:`HostMmapOptionsDict` of its keys):

        - ``fd``: an open file descriptor to map (None, the default: anonymous memory, or
          the buffer's own memfd in an ipc area, which refuses another fd).
        - ``offset``: the offset in that file, a multiple of the page size (default 0;
          only with ``fd``).
        - ``prot``: ``PROT_READ | PROT_WRITE`` (the default) or ``PROT_READ`` (a read-only
          buffer).
        - ``flags``: extra MAP_* flags, among MAP_NORESERVE, MAP_POPULATE and MAP_LOCKED
          (default 0).
        - ``shared``: True for MAP_SHARED, False for MAP_PRIVATE (None, the default: the
          area's ``shared``; a file mapping is shared; an ipc area's mappings are shared:
          False is refused).
        - ``alignment``: a power of two this mapping's address is aligned to (None, the
          default: the area's).

        Errors of the host area: :class:`~aml_core.errors.AMLValueError` for a ``prot`` or
        ``flags`` not listed above, an alignment that is not a power of two, an ``offset``
        without ``fd`` or not a multiple of the page size, an ``fd`` that is not open, or
        a regular file that ends before ``offset + size``;
        :class:`~aml_core.errors.AMLMemoryError` when no (huge) pages are left or
        MAP_LOCKED passes RLIMIT_MEMLOCK; :class:`~aml_core.errors.AMLPermissionError`
        for a file opened without the access ``prot`` needs; the other errors of mmap(2)
        and mbind(2) by their errno (aml_core.host.numa.OS_ERRORS)."""
        return super().mmap(size, options)

    def __init__(
        self,
        policy: Policy | str | int = Policy.DEFAULT,
        nodes: Iterable[int] | int | None = None,
        *,
        shared: bool = False,
        ipc: bool = False,
        huge_pages: bool | int = False,
        transparent_huge_pages: bool | Literal["auto"] = "auto",
        alignment: int = 0,
    ) -> None:
        """A host area.

        ``policy``: the NUMA policy of every mapping (a :class:`Policy`, its name
        ``"bind"``/``"interleave"``/``"preferred"``/``"default"``, or its MPOL value);
        ``nodes``: the NUMA nodes it names (an int or an iterable of ints; none for
        DEFAULT, one for PREFERRED, at least one for BIND and INTERLEAVE); ``shared``:
        MAP_SHARED instead of MAP_PRIVATE; ``ipc``: every buffer is a sealed memfd mapped
        MAP_SHARED, which :meth:`ipc_export` shares with other processes
        (:func:`aml_core.ipc_open`; see :mod:`aml_core.host.ipc`; one open file descriptor
        per live buffer); ``huge_pages``: True for the default huge page
        size or a size in bytes (MAP_HUGETLB); ``transparent_huge_pages``: True:
        ``madvise(MADV_HUGEPAGE)`` each mapping (a refusal is an error); ``"auto"`` (the
        default): advise the anonymous mappings of at least :data:`THP_AUTO_MIN` bytes
        (4 MiB), as NumPy does its arrays, but not MAP_NORESERVE ones (sparse: a touched
        byte would commit a huge page), and ignore a refusal (it is advice); False:
        never advise (AML's plain mmap). In an interleaving area (INTERLEAVE,
        WEIGHTED_INTERLEAVE) "auto" and False advise ``MADV_NOHUGEPAGE`` from 2 MiB, so
        that pages interleave one by one even where the kernel's THP mode is "always",
        and True aligns mappings to 2 MiB, so that whole huge pages interleave
        (docs/numa.md, "Placement"); ``alignment``: a power of two the
        mappings' addresses are aligned to (0: the page size). Wrong values raise
        :class:`~aml_core.errors.AMLValueError`/:class:`~aml_core.errors.AMLTypeError`,
        nodes this process may not use :class:`~aml_core.errors.AMLDomainError`.
        Per-mapping options (a file to map...) go to ``mmap`` (:class:`HostMmapOptions`).
        """
        pol, node_set = _placement(policy, nodes)
        for name, value in (("shared", shared), ("ipc", ipc)):
            if not isinstance(value, bool):
                raise AMLTypeError(f"{name} must be a bool, not {type(value).__name__}")
        thp = transparent_huge_pages
        if not isinstance(thp, (bool, str)):
            raise AMLTypeError(f"transparent_huge_pages must be a bool or 'auto', not {type(thp).__name__}")
        if isinstance(thp, str) and thp != "auto":
            raise AMLValueError(f"transparent_huge_pages must be True, False or 'auto', not {thp!r}")
        self.shared = shared or ipc
        self.ipc = ipc
        self.huge_page_size = _huge_page_size(huge_pages)
        self.transparent_huge_pages = transparent_huge_pages
        self.alignment = _alignment(alignment)
        self._placed = self._make_placement(pol, node_set)
        caps = CAPABILITIES | Capability.IPC if ipc else CAPABILITIES
        super().__init__(backend="host", kind=Kind.HOST, device=self._device(node_set), capabilities=caps)

    @staticmethod
    def _device(nodes: tuple[int, ...]) -> int | None:
        return nodes[0] if len(nodes) == 1 else None

    def _make_placement(self, pol: Policy, node_set: tuple[int, ...]) -> _Placement:
        thp = self.transparent_huge_pages
        # mmap flags of the common case (default options, no huge pages, a policy or
        # none): it skips the per-call option handling; a policy is one mbind, without
        # MPOL_MF_MOVE (a fresh mapping has no pages to move).
        plain = not self.huge_page_size and thp is not True and not self.ipc
        flags = (_mmap.MAP_SHARED if self.shared else _mmap.MAP_PRIVATE) | _mmap.MAP_ANONYMOUS
        fast_bind = None if pol is Policy.DEFAULT else (int(pol), list(node_set))
        # Small bound mappings are pieces of one mapping bound once (no mbind each): private
        # memory only (a shared one's pages stay with its shmem file until all is unmapped).
        carved = plain and not self.shared and self.alignment <= PAGE_SIZE
        return _Placement(
            policy=pol,
            nodes=node_set,
            fast_flags=flags if plain else 0,
            # "auto" advises large anonymous mappings; not with explicit huge pages or a memfd.
            advice=self._advice(pol),
            fast_bind=fast_bind,
            stock=Stock(*fast_bind) if carved and fast_bind is not None else None,
        )

    def _advice(self, pol: Policy) -> tuple[int, int] | None:
        thp = self.transparent_huge_pages
        if self.huge_page_size or self.ipc or thp is True:
            return None
        if pol in _INTERLEAVING:
            # A huge page is one allocation: a THP-backed buffer interleaves 2 MiB at a
            # time, so "off" (and "auto") must say so where the kernel's mode is "always".
            return (MADV_NOHUGEPAGE, THP_INTERLEAVE_MIN)
        return (MADV_HUGEPAGE, THP_AUTO_MIN) if thp == "auto" else None

    @property
    def policy(self) -> Policy:
        """The NUMA policy of the area's future mappings (:meth:`rebind` changes it)."""
        return self._placed.policy

    @property
    def nodes(self) -> tuple[int, ...]:
        """The nodes that policy names (``()`` for DEFAULT)."""
        return self._placed.nodes

    def rebind(self, policy: Policy | str | int, nodes: Iterable[int] | int | None = None) -> None:
        """Change the NUMA policy of the area's future mappings: buffers mapped after the
        call follow ``policy`` over ``nodes`` (the rules of ``HostArea(policy, nodes)``:
        EDOM for nodes outside the allowed set, EINVAL for a policy/node count that does
        not fit, AMLNotSupported for a policy this kernel lacks; checked before anything
        changes). Live buffers keep their pages and policy: :meth:`move` moves pages. A
        pool over the area keeps the slabs it holds (they were mapped before); its new
        slabs follow the new policy. ``device`` becomes the node of a one-node policy."""
        pol, node_set = _placement(policy, nodes)
        with self._lock:
            self._check_open()
            old, self._placed = self._placed, self._make_placement(pol, node_set)
            self.device = self._device(node_set)
            if old.stock is not None:
                old.stock.release()  # its live pieces keep the old policy, as live buffers do

    def move(self, buffer: Buffer, nodes: Iterable[int] | int) -> MoveReport:
        """Move the pages a live buffer of this area has now to ``nodes`` (move_pages(2)):
        all to the node for one node; page i to ``nodes[i % len(nodes)]`` for several.
        The buffer's address and bytes do not change, so NumPy arrays, memoryviews and
        DLPack consumers over it stay valid while its pages move. Pages not yet touched
        have nothing to move (``MoveReport.untouched``): they are placed by the buffer's
        policy when first touched. Pages mapped by another process too (an exported ipc
        buffer) are not moved (``EACCES`` in ``MoveReport.errors``). Returns the
        :class:`~aml_core.host.numa.MoveReport` of the move.

        Errors, before the call: :class:`~aml_core.errors.AMLValueError` for a buffer that
        is freed or another area's, or an empty node set;
        :class:`~aml_core.errors.AMLDomainError` for nodes outside the allowed set;
        :class:`~aml_core.errors.AMLTypeError` for something not a Buffer."""
        if not isinstance(buffer, Buffer):
            raise AMLTypeError(f"move takes a Buffer of this area, not {type(buffer).__name__}")
        targets = numa.as_nodes(nodes)
        if not targets:
            raise AMLValueError("move needs at least one target node")
        with self._lock:
            self._lookup(buffer, None)
            return numa.move_pages(buffer.ptr, _mapped_length(buffer), targets)

    def _coerce_options(self, options: Any) -> Any:
        if options is None:
            return _DEFAULT_OPTIONS
        return super()._coerce_options(options)

    def close(self) -> None:
        try:
            super().close()
        finally:
            stock = self._placed.stock
            if stock is not None:
                stock.release()

    close.__doc__ = Area.close.__doc__

    def _allocate(self, size: int, options: HostMmapOptions) -> Buffer:
        placed = self._placed
        if options is _DEFAULT_OPTIONS and placed.fast_flags:
            if placed.stock is not None and size <= CARVE_MAX:
                carved = placed.stock.carve(size)
                if carved is not None:  # bound already, and too small for any advice
                    return self._new_buffer(carved, size, host_accessible=True, dl_device=_CPU, native=size)
            try:
                ptr = _os.mmap(size, _PROT_RW, placed.fast_flags, -1, 0, self.alignment)
            except OSError as exc:
                raise numa.os_error(exc) from None
            if placed.fast_bind is not None:
                try:
                    _os.mbind(ptr, size, placed.fast_bind[0], placed.fast_bind[1], 0)
                except OSError as exc:
                    _os.munmap(ptr, size)
                    raise numa.os_error(
                        exc, f"mbind({placed.policy.name}, nodes={list(placed.nodes)}) failed"
                    ) from None
            if placed.advice is not None and size >= placed.advice[1]:
                _advise(ptr, size, placed.advice[0])
            return self._new_buffer(ptr, size, host_accessible=True, dl_device=_CPU, native=size)
        prot = options.prot
        if prot not in (_mmap.PROT_READ, _PROT_RW):
            raise AMLValueError(f"prot must be PROT_READ or PROT_READ|PROT_WRITE, got {prot}")
        extra = options.flags
        if extra & ~_EXTRA_MASK:
            raise AMLValueError(
                f"unknown mmap flag bits 0x{extra & ~_EXTRA_MASK:x}; allowed: "
                + ", ".join(f"{k} 0x{v:x}" for k, v in _EXTRA_FLAGS.items())
            )
        align = self.alignment if options.alignment is None else _alignment(options.alignment)
        fd = -1 if options.fd is None else options.fd
        # File mappings are shared unless asked otherwise; anonymous ones follow the area.
        shared = options.shared if options.shared is not None else (self.shared or fd >= 0)
        flags = extra | (_mmap.MAP_SHARED if shared else _mmap.MAP_PRIVATE)
        length = size
        if self.ipc and (fd >= 0 or not shared):
            raise AMLValueError(
                "an ipc area maps shared memfds of its own: map files, or private memory, with "
                "an area made without ipc=True"
            )
        if fd >= 0:
            self._check_file(fd, options.offset, size)
        elif options.offset:
            raise AMLValueError("offset is only meaningful with fd (a file mapping)")
        elif not self.ipc:
            flags |= _mmap.MAP_ANONYMOUS
        hp = self.huge_page_size
        if self.transparent_huge_pages is True and placed.policy in _INTERLEAVING and fd < 0:
            # Interleaving huge pages: whole ones, so the interleave is even at 2 MiB.
            align = max(align, THP_INTERLEAVE_MIN)
        if hp:
            length = -(-size // hp) * hp
            align = max(align, hp)
            if not self.ipc:  # a hugetlbfs memfd is mapped as a file
                flags |= MAP_HUGETLB | ((hp.bit_length() - 1) << MAP_HUGE_SHIFT)
            if placed.policy is Policy.BIND and not extra & _HAS_PAGES:
                # (a fault on a set without free huge pages is SIGBUS; a populated
                # mapping's strict move reports ENOMEM itself)
                numa.check_huge_pages(placed.nodes, length // hp, hp)
        record = None
        try:
            if self.ipc:
                length = -(-length // PAGE_SIZE) * PAGE_SIZE
                fd = _ipc.memfd(length, hp)
                record = _ipc.Memfd(length, fd)
            try:
                ptr = _os.mmap(length, prot, flags, fd, options.offset, align)
            except BaseException:
                if record is not None:
                    _ipc.release(record)
                raise
        except OSError as exc:
            hint = None
            if hp and exc.errno in (12, 22):
                hint = f"no {hp >> 20} MiB huge pages available (see /proc/sys/vm/nr_hugepages)"
            raise numa.os_error(exc, hint) from None
        try:
            if placed.policy is not Policy.DEFAULT:
                # A fresh mapping has no pages: no MPOL_MF_MOVE (and no cost for it), unless
                # MAP_POPULATE or MAP_LOCKED made them before this call (AML's move).
                numa.bind(ptr, length, placed.policy, placed.nodes, move=bool(extra & _HAS_PAGES))
            if self.transparent_huge_pages is True:
                try:
                    _os.madvise(ptr, length, MADV_HUGEPAGE)
                except OSError as exc:
                    raise numa.os_error(exc, "transparent huge pages are not available") from None
            elif (
                placed.advice is not None and length >= placed.advice[1] and fd < 0 and not extra & _NORESERVE
            ):
                # (a MAP_NORESERVE mapping is a sparse reservation: a touched byte would
                # commit a whole huge page)
                _advise(ptr, length, placed.advice[0])
        except BaseException:
            _os.munmap(ptr, length)
            if record is not None:
                _ipc.release(record)
            raise
        return self._new_buffer(
            ptr,
            size,
            host_accessible=True,
            readonly=prot == _mmap.PROT_READ,
            dl_device=(DLDeviceType.CPU, 0),
            native=length if record is None else record,
        )

    @staticmethod
    def _check_file(fd: int, offset: int, size: int) -> None:
        if fd < 0:
            raise AMLValueError(f"fd must be an open file descriptor, got {fd}")
        if offset < 0 or offset % PAGE_SIZE:
            raise AMLValueError(f"offset must be a multiple of the page size ({PAGE_SIZE}), got {offset}")
        try:
            st = os.fstat(fd)
        except OSError:
            raise AMLValueError(f"fd {fd} is not an open file descriptor") from None
        if stat.S_ISREG(st.st_mode) and offset + size > st.st_size:
            raise AMLValueError(
                f"the file is {format_size(st.st_size, exact=True)}: mapping {format_size(size, exact=True)} "
                f"at offset {offset} would pass its "
                "end (grow the file first, e.g. os.ftruncate)"
            )

    def _free(self, buffer: Buffer) -> None:
        record = buffer.native if self.ipc else None
        length = record.length if isinstance(record, _ipc.Memfd) else native_as(buffer, int)
        try:
            _os.munmap(buffer.ptr, length)
        except OSError as exc:
            raise numa.os_error(exc) from None
        if isinstance(record, _ipc.Memfd):
            for export in _ipc.release(record):
                export.close()

    # -- IPC -----------------------------------------------------------------------------
    def ipc_export(self, buffer: Buffer | int) -> IpcExport:
        """Share a live buffer of an ipc area (``HostArea(ipc=True)``; the Buffer or its
        base pointer) with another process: its handle is opened there with
        :func:`aml_core.ipc_open`, which maps the same pages (see :mod:`aml_core.host.ipc`).
        The handle is served while the buffer lives and the export is not closed.

        Errors: :class:`~aml_core.errors.AMLValueError` for a buffer not live in this
        area; :class:`~aml_core.errors.AMLNotSupported` in an area made without
        ``ipc=True`` (its memory is not a file another process can map)."""
        with self._lock:
            self._check_open()
            buf = self._lookup(buffer, None)
            record = buf.native
            if not isinstance(record, _ipc.Memfd):
                raise AMLNotSupported(
                    "this host area's memory cannot be shared with another process: make the area "
                    "with HostArea(..., ipc=True)"
                )
            return _ipc.export(buf, record, buf.readonly)

    # -- placement queries -------------------------------------------------------------
    def policy_of(self, buffer: Buffer) -> tuple[Policy, tuple[int, ...]]:
        """The NUMA policy and nodes the kernel holds for a buffer (``get_mempolicy``)."""
        if not isinstance(buffer, Buffer):
            raise AMLTypeError(f"policy_of takes a Buffer of this area, not {type(buffer).__name__}")
        self._lookup(buffer, None)
        return numa.policy_of(buffer.ptr)

    # -- what pools use (aml_core.protocols.MemoryCapacity) ---------------------------------
    def total_memory(self, device: int | None = None) -> int | None:
        """The memory of the area's NUMA nodes (every node this process may use when it
        names none), from sysfs; None if unknown. ``device`` is not used (a host area's
        memory is its nodes')."""
        from .plugin import nodes_meminfo

        return nodes_meminfo(self.nodes)[0] or None

    def free_memory(self, device: int | None = None) -> int | None:
        """The free memory of those nodes now (their ``MemFree``); None if unknown."""
        from .plugin import nodes_meminfo

        return nodes_meminfo(self.nodes)[1]

    @overload
    def page_nodes(self, buffer: Buffer, *, summary: Literal[False] = False) -> list[int]: ...
    @overload
    def page_nodes(self, buffer: Buffer, *, summary: Literal[True]) -> dict[int, int]: ...
    def page_nodes(self, buffer: Buffer, *, summary: bool = False) -> list[int] | dict[int, int]:
        """The node of each page of a buffer (:data:`~aml_core.host.NOT_TOUCHED` for
        pages not yet touched); ``summary=True``: ``{node: pages}`` as numastat counts."""
        if not isinstance(buffer, Buffer):
            raise AMLTypeError(f"page_nodes takes a Buffer of this area, not {type(buffer).__name__}")
        self._lookup(buffer, None)
        if summary:
            return numa.page_nodes(buffer.ptr, buffer.size, summary=True)
        return numa.page_nodes(buffer.ptr, buffer.size)

    def __repr__(self) -> str:
        nodes = f" nodes={list(self.nodes)}" if self.nodes else ""
        nodes += " ipc" if self.ipc else ""
        if self.closed:
            return f"<aml HostArea {self.policy.name.lower()}{nodes} closed>"
        nbytes = format_size(self.stats.bytes_in_use)
        return f"<aml HostArea {self.policy.name.lower()}{nodes} {self._stats()[2]} live, {nbytes}>"


def _mapped_length(buffer: Buffer) -> int:
    """The bytes the kernel mapped for a buffer (its huge-page-rounded length)."""
    record = buffer.native
    if isinstance(record, _ipc.Memfd):
        return record.length
    return native_as(buffer, int)


def _advise(ptr: int, length: int, advice: int) -> None:
    """An area's own advice (``_Placement.advice``): a kernel without transparent huge
    pages (EINVAL) keeps the small pages, as NumPy's arrays do there."""
    with contextlib.suppress(OSError):
        _os.madvise(ptr, length, advice)
