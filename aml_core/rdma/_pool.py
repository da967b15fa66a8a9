"""A whole pool registered with one protection domain: :func:`register_pool`,
:class:`PoolRegistration`, and the keys of its blocks (:class:`BlockKey`,
:class:`KeyPiece`). See aml_core.rdma for the rules."""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

import attrs

from ..buffer import Buffer
from ..errors import AMLBusyError, AMLError, AMLNotSupported, AMLTypeError, AMLValueError
from ._domain import DEFAULT_ACCESS, Access, Domain, NativeRegion, as_domain
from ._region import Pin, check_access, check_buffer, deregister, register_range

if TYPE_CHECKING:
    from ..pool import Pool

__all__ = ["BlockKey", "KeyPiece", "PoolRegistration", "key", "register_pool"]


#: DLPack device types of memory the host reaches by address (kDLCPU, kDLCUDAHost,
#: kDLROCMHost): an expandable pool's chunks of it are registered by address.
_HOST_DLPACK = (1, 3, 11)


@attrs.frozen
class KeyPiece:
    """One registered stretch of a block: ``length`` bytes from the local address ``ptr``,
    which work requests name as ``addr`` under ``lkey`` (local) and ``rkey`` (a peer's
    RDMA read and write)."""

    ptr: int
    length: int
    addr: int
    lkey: int
    rkey: int


class BlockKey:
    """The keys of one pooled block, held: while held the block cannot be freed
    (AMLBusyError) nor collected, so its slab (or chunk) stays mapped and registered.
    :meth:`release` (or the end of a ``with`` block) lets it go.

    ``pieces``: one :class:`KeyPiece` per registered range the block lies in: one for a
    pool of slabs (a block never crosses slabs), one per chunk of an expandable segment
    the block spans. ``lkey``, ``rkey`` and ``addr`` are the single piece's; for a block
    over several chunks they are AMLValueError (use ``pieces``: one work request, or one
    scatter-gather entry, per piece). ``offset`` is the block's offset in its slab (in
    the segment for an expandable pool)."""

    __slots__ = ("_owner", "_pin", "buffer", "offset", "pieces")

    def __init__(
        self, buffer: Buffer, offset: int, pieces: tuple[KeyPiece, ...], pin: Pin, owner: PoolRegistration
    ) -> None:
        self.buffer = buffer
        self.offset = offset
        self.pieces = pieces
        self._pin: Pin | None = pin
        self._owner = owner

    def _one(self) -> KeyPiece:
        if len(self.pieces) != 1:
            raise AMLValueError(
                f"the block of {self.buffer.size} bytes at 0x{self.buffer.ptr:x} spans {len(self.pieces)} "
                "chunks of the expandable pool, each its own memory region: use key.pieces (one work request "
                "or scatter-gather entry per piece), not one key"
            )
        return self.pieces[0]

    @property
    def lkey(self) -> int:
        return self._one().lkey

    @property
    def rkey(self) -> int:
        return self._one().rkey

    @property
    def addr(self) -> int:
        return self._one().addr

    @property
    def held(self) -> bool:
        return self._pin is not None

    def release(self) -> None:
        """Let the block go (it may be freed again); a second release does nothing."""
        pin, self._pin = self._pin, None
        if pin is not None:
            pin.release()
            self._owner._key_released()

    def __enter__(self) -> BlockKey:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "held" if self._pin is not None else "released"
        where = f"{self.buffer.size} bytes at 0x{self.buffer.ptr:x}"
        return f"<aml rdma BlockKey of {where}: {len(self.pieces)} piece(s), {state}>"


class PoolRegistration:
    """Every slab of ``pool`` (every mapped chunk of an expandable pool) registered once
    with one protection domain, when a block of it first asks for its key, and
    deregistered before the pool gives it back (trim, the release threshold, close).
    :meth:`key` gives a block's keys; :meth:`close` deregisters everything (AMLBusyError
    while keys are held; AMLValueError the second time)."""

    def __init__(self, pd: object, pool: Pool, access: int = DEFAULT_ACCESS) -> None:
        from ..pool import Pool

        domain = as_domain(pd)
        if not isinstance(pool, Pool):
            raise AMLTypeError(f"register_pool takes an aml Pool, not {type(pool).__name__}")
        pool._check_open()
        self.domain: Domain = domain
        self.pool = pool
        self.access = Access(check_access(access))
        #: range start -> (size, region): the live registrations
        self._regions: dict[int, tuple[int, NativeRegion]] = {}
        self._closed = False
        self._held = 0
        self._count = threading.Lock()
        #: registrations made and undone since the start
        self.registered = 0
        self.deregistered = 0
        pool._listen(self)

    # -- what the pool tells ---------------------------------------------------------------
    def _range_released(self, ptr: int, size: int) -> None:
        entry = self._regions.get(ptr)
        if entry is None:
            return
        deregister(entry[1], self.domain)  # raises: the pool keeps the range (and this registration)
        del self._regions[ptr]
        self.deregistered += 1

    def _pool_closing(self) -> None:
        self._deregister_all()
        self._closed = True

    # -- keys ------------------------------------------------------------------------------
    def key(self, buffer: Buffer) -> BlockKey:
        """The keys of a live block of this pool (see :class:`BlockKey`), registering its
        slab or chunks first if no block of them asked before. Errors: AMLTypeError for
        a non-buffer, AMLValueError for a freed block, a zero-length one, a buffer of
        another area, a closed registration or pool; the verbs call's own (translated)."""
        buf = check_buffer(buffer, "give the keys of")
        pool = self.pool
        if buf.area is not pool:
            raise AMLValueError(f"{buf!r} is not a block of {pool!r}")
        try:
            pin = Pin(buf)
        except BufferError as exc:  # freed meanwhile by another thread
            raise AMLValueError(f"cannot give the keys of {buf!r}: {exc}") from exc
        kernel = pool._kernel
        try:
            with kernel:
                if self._closed:
                    raise AMLValueError(f"{self!r} was closed")
                pool._check_open()
                offset, pieces = self._pieces(buf)
                with self._count:
                    self._held += 1
        except BaseException:
            pin.release()
            raise
        return BlockKey(buf, offset, pieces, pin, self)

    def key_for(self, buffer: Buffer, pd: object) -> BlockKey:
        """:meth:`key`, after checking that ``pd`` is this registration's protection
        domain: AMLValueError naming both devices otherwise (keys of one device's domain
        mean nothing to another's queue pairs)."""
        domain = as_domain(pd)
        if not _same_pd(domain, self.domain):
            where = "another device" if domain.device != self.domain.device else "the same device"
            raise AMLValueError(
                f"{self!r} is registered with a protection domain of {self.domain.device}, not with this "
                f"one of {domain.device} ({where}): register the pool with that domain too "
                "(rdma.register_pool)"
            )
        return self.key(buffer)

    def _key_released(self) -> None:
        with self._count:
            self._held -= 1

    def _pieces(self, buf: Buffer) -> tuple[int, tuple[KeyPiece, ...]]:
        """The block's offset and its pieces, each range registered once (the kernel's
        mutex held: no range goes meanwhile)."""
        kernel = self.pool._kernel
        lo, hi = buf.ptr, buf.ptr + buf.size
        if self.pool.expandable:
            if buf.__dlpack_device__()[0] not in _HOST_DLPACK:
                raise AMLNotSupported(
                    f"the chunks of an expandable pool of device memory ({type(self.pool.area).__name__}) "
                    "are no buffers to export as dma-bufs, and registering device memory by address needs "
                    "a peer-memory driver aml does not assume: register a pool of slabs (expandable=False)"
                )
            chunks = kernel.chunks()
            pieces = []
            for ptr, size in chunks:
                if ptr < hi and lo < ptr + size:
                    region = self._ensure(buf, ptr, size, None)
                    start, end = max(lo, ptr), min(hi, ptr + size)
                    pieces.append(self._piece(region, ptr, start, end - start))
            covered = sum(p.length for p in pieces)
            if covered != buf.size:  # pragma: no cover - a live block lies in mapped chunks
                raise AMLValueError(f"{buf!r}: only {covered} of its bytes lie in mapped chunks")
            return lo - chunks[0][0], tuple(pieces)
        _dptr, _flags, _dl, _device, slab, offset, _n = kernel.block(lo)
        assert slab is not None
        region = self._ensure(buf, slab.ptr, slab.size, slab)
        return offset, (self._piece(region, slab.ptr, lo, buf.size),)

    def _ensure(self, buf: Buffer, ptr: int, size: int, slab: Buffer | None) -> NativeRegion:
        entry = self._regions.get(ptr)
        if entry is not None and entry[0] == size:
            return entry[1]
        assert entry is None, "a range registered with another size"  # released ranges leave
        region = register_range(self.domain, buf, ptr, size, int(self.access), slab)
        self._regions[ptr] = (size, region)
        self.registered += 1
        return region

    @staticmethod
    def _piece(region: NativeRegion, base: int, ptr: int, length: int) -> KeyPiece:
        return KeyPiece(
            ptr=ptr, length=length, addr=region.iova + (ptr - base), lkey=region.lkey, rkey=region.rkey
        )

    # -- state -----------------------------------------------------------------------------
    @property
    def regions(self) -> tuple[tuple[int, int], ...]:
        """The registered ranges now, ``(ptr, size)`` in address order."""
        with self.pool._kernel:
            return tuple(sorted((p, s) for p, (s, _r) in self._regions.items()))

    @property
    def keys_held(self) -> int:
        return self._held

    @property
    def closed(self) -> bool:
        return self._closed

    def _deregister_all(self) -> None:
        error: AMLError | None = None
        for ptr, (_size, region) in sorted(self._regions.items()):
            try:
                deregister(region, self.domain)
            except AMLError as exc:
                error = error or exc
                continue
            del self._regions[ptr]
            self.deregistered += 1
        if error is not None:
            raise error

    def close(self) -> None:
        """Deregister every range and stop listening to the pool. AMLBusyError while keys
        are held (release them first); AMLValueError if already closed (the pool's close
        closes it too)."""
        with self.pool._kernel:
            if self._closed:
                raise AMLValueError(f"{self!r} was already closed")
            if self._held:
                raise AMLBusyError(f"{self!r} has {self._held} block key(s) held: release them first")
            self._deregister_all()
            self._closed = True
        self.pool._unlisten(self)

    def __enter__(self) -> PoolRegistration:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._closed:
            self.close()

    def __del__(self) -> None:
        for _size, region in getattr(self, "_regions", {}).values():
            with contextlib.suppress(Exception):  # a finalizer never raises
                region.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._regions)} region(s), {self._held} key(s) held"
        return f"<aml rdma PoolRegistration of a pool with {self.domain.device}: {state}>"


def _same_pd(a: Domain, b: Domain) -> bool:
    return a is b or a.pd is b.pd


def key(pd: object, buffer: Buffer) -> BlockKey:
    """The keys of a pooled ``buffer`` under the protection domain ``pd``, from the open
    :class:`PoolRegistration` of its pool with that domain. AMLValueError when the pool
    has none: registered only with other domains (their devices named), or not at all."""
    from ..pool import Pool

    buf = check_buffer(buffer, "give the keys of")
    pool = buf.area
    if not isinstance(pool, Pool):
        raise AMLValueError(f"{buf!r} is not a pooled block: register it with rdma.register(pd, buffer)")
    domain = as_domain(pd)
    with pool._kernel:  # listeners are added and removed under the kernel's mutex
        hook = pool._release_hook
        listeners = tuple(hook.listeners) if hook is not None else ()
    found = [r for r in listeners if isinstance(r, PoolRegistration) and not r.closed]
    for reg in found:
        if _same_pd(reg.domain, domain):
            return reg.key(buf)
    if found:
        others = ", ".join(sorted({r.domain.device for r in found}))
        raise AMLValueError(
            f"the pool of {buf!r} is registered with protection domains of {others}, not with this one of "
            f"{domain.device}: rdma.register_pool(pd, pool) for it"
        )
    raise AMLValueError(f"the pool of {buf!r} is not registered: rdma.register_pool(pd, pool) first")


def register_pool(pd: object, pool: Pool, access: int = DEFAULT_ACCESS) -> PoolRegistration:
    """Register ``pool`` with the protection domain ``pd``: see :class:`PoolRegistration`."""
    return PoolRegistration(pd, pool, access)
