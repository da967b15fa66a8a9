"""One buffer registered as one memory region: :func:`register` and
:class:`Registration` (see aml_core.rdma). Also what the pool's registration shares: the
checks of a buffer, the export that keeps a buffer from being freed while a key of it is
held, and how a range is registered (host memory by address, GPU memory as a dma-buf)."""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

from .. import checks
from ..buffer import Buffer
from ..errors import AMLNotSupported, AMLTypeError, AMLValueError
from ._domain import DEFAULT_ACCESS, Access, Domain, NativeRegion, as_domain, verbs_call

__all__ = ["Registration", "register"]


def check_buffer(buffer: object, what: str = "register") -> Buffer:
    """``buffer`` as a live aml Buffer with bytes, or the documented error: AMLTypeError
    for anything else, AMLValueError for a freed buffer (its area's close frees its
    buffers) and for a zero-length one."""
    if not isinstance(buffer, Buffer):
        raise AMLTypeError(f"{what} takes an aml Buffer, not {type(buffer).__name__}")
    if buffer.freed:
        raise AMLValueError(f"cannot {what} {buffer!r}: it was freed (unmapped, or its area closed)")
    if buffer.size == 0:
        raise AMLValueError(f"cannot {what} a zero-length range ({buffer!r})")
    return buffer


def check_access(access: int) -> int:
    if isinstance(access, bool) or not isinstance(access, int):
        raise AMLTypeError(f"access is an rdma.Access flag set, not {type(access).__name__}")
    if access & ~int(Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC):
        raise AMLValueError(f"access 0x{access:x} has bits no ibv_access_flags aml knows")
    if access & (Access.REMOTE_WRITE | Access.REMOTE_ATOMIC) and not access & Access.LOCAL_WRITE:
        # ibv_reg_mr(3): remote write or atomic access needs local write.
        raise AMLValueError("REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE (ibv_reg_mr(3))")
    return int(access)


class Pin:
    """An export of a buffer (a memoryview, or a DLPack capsule for device memory): while
    it is held, freeing the buffer is AMLBusyError (aml_core.area) and the garbage
    collector keeps it; :meth:`release` lets it go."""

    __slots__ = ("_export",)

    def __init__(self, buffer: Buffer) -> None:
        self._export: Any = (
            memoryview(buffer) if buffer.host_accessible else buffer._dlpack_capsule(True, False)
        )

    def release(self) -> None:
        export, self._export = self._export, None
        if isinstance(export, memoryview):
            export.release()
        # a capsule gives its export back when dropped (here: its last reference)


def register_range(
    domain: Domain, buffer: Buffer, ptr: int, size: int, access: int, dmabuf_source: Buffer | None = None
) -> NativeRegion:
    """Register ``[ptr, ptr + size)`` of ``buffer``'s memory: by address when the host can
    reach it (``ibv_reg_mr``), else as a dma-buf of ``dmabuf_source`` (the buffer itself,
    or a pool's slab; ``ibv_reg_dmabuf_mr``, the fd closed once registered: the region
    holds the dma-buf)."""
    if buffer.host_accessible or (dmabuf_source is None and buffer.__dlpack_device__()[0] in (1, 3, 11)):
        what = f"registering {size} bytes at 0x{ptr:x} with {domain.device}"
        return verbs_call(
            "ibv_reg_mr", what, domain.reg_mr, ptr, size, access
        )  # host memory (an expandable pool's chunk: no source)
    from ..dmabuf import export_dmabuf

    source = dmabuf_source if dmabuf_source is not None else buffer
    try:
        handle = export_dmabuf(source)
    except AMLNotSupported as exc:
        raise AMLNotSupported(
            f"{buffer!r} is device memory, registered as a dma-buf, and its area cannot export one: {exc}"
        ) from exc
    try:
        offset = handle.offset + (ptr - source.ptr)
        what = f"registering {size} bytes of {buffer!r} (dma-buf offset {offset}) with {domain.device}"
        return verbs_call("ibv_reg_dmabuf_mr", what, domain.reg_dmabuf_mr, offset, size, handle.fd, access)
    finally:
        os.close(handle.fd)


def deregister(region: NativeRegion, domain: Domain) -> None:
    """``ibv_dereg_mr`` of ``region``, its failure translated."""
    verbs_call("ibv_dereg_mr", f"deregistering a memory region of {domain.device}", region.close)


class Registration:
    """One aml buffer (or ``length`` bytes of it from ``offset``) registered with one
    protection domain (see aml_core.rdma): its ``lkey``, ``rkey`` and ``addr`` (the
    range's first byte in work requests). While it
    is open the buffer cannot be freed (AMLBusyError) nor collected; :meth:`close`
    deregisters (``ibv_dereg_mr``) and lets the buffer go. A second close is
    AMLValueError, as a second munmap is."""

    def __init__(
        self,
        pd: object,
        buffer: Buffer,
        access: int = DEFAULT_ACCESS,
        offset: int = 0,
        length: int | None = None,
    ) -> None:
        domain = as_domain(pd)
        buffer = check_buffer(buffer)
        offset, length = checks.span(offset, length, buffer.size, "the registered range")
        if length == 0:
            raise AMLValueError(f"cannot register a zero-length range (at offset {offset} of {buffer!r})")
        access = check_access(access)
        self.domain = domain
        self.buffer = buffer
        self.access = Access(access)
        self.offset = offset
        self.length = length
        self._lock = threading.Lock()
        try:
            pin = Pin(buffer)  # from now on the buffer cannot be freed under the region
        except BufferError as exc:  # freed meanwhile by another thread
            raise AMLValueError(f"cannot register {buffer!r}: {exc}") from exc
        try:
            self._region: NativeRegion | None = register_range(
                domain, buffer, buffer.ptr + offset, length, access
            )
        except BaseException:
            pin.release()
            raise
        self._pin: Pin | None = pin
        region = self._region
        #: the keys, and the address of the range's first byte in work requests
        self.lkey = region.lkey
        self.rkey = region.rkey
        self.addr = region.iova

    @property
    def closed(self) -> bool:
        return self._region is None

    @property
    def region(self) -> NativeRegion:
        """The binding's region (AMLValueError once closed)."""
        region = self._region
        if region is None:
            raise AMLValueError(f"{self!r} was deregistered")
        return region

    def close(self) -> None:
        """Deregister, then let the buffer go. AMLValueError if already deregistered; a
        failed ``ibv_dereg_mr`` keeps the registration (and the buffer) as they were."""
        with self._lock:
            region = self._region
            if region is None:
                raise AMLValueError(f"{self!r} was already deregistered")
            deregister(region, self.domain)
            self._region = None
            pin, self._pin = self._pin, None
        assert pin is not None
        pin.release()

    def __enter__(self) -> Registration:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._region is not None:
            self.close()

    def __del__(self) -> None:
        region = getattr(self, "_region", None)
        if region is not None:
            with contextlib.suppress(Exception):  # a finalizer never raises
                region.close()

    def __repr__(self) -> str:
        state = "closed" if self._region is None else f"lkey 0x{self.lkey:x} rkey 0x{self.rkey:x}"
        where = f"{self.length} bytes at 0x{self.buffer.ptr + self.offset:x}"
        return f"<aml rdma Registration of {where} with {self.domain.device}: {state}>"


def register(
    pd: object, buffer: Buffer, access: int = DEFAULT_ACCESS, *, offset: int = 0, length: int | None = None
) -> Registration:
    """Register ``buffer`` (``length`` bytes from ``offset``: by default all of it) with
    the protection domain ``pd`` (a pyverbs ``PD`` or an
    :class:`~aml_core.rdma.Domain`): host memory with ``ibv_reg_mr``, GPU memory with
    ``ibv_reg_dmabuf_mr`` over the buffer's dma-buf export (docs/dmabuf.md). See
    :class:`Registration`."""
    return Registration(pd, buffer, access, offset, length)
