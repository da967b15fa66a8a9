"""The sharing groups of a GPU runtime (:mod:`aml_core.gpu.runtime`): ``IPC`` (memory
shared with another process) and ``PEER`` (a device reaching another's memory, copies
between devices). Each public method checks its arguments and calls the backend's
``_``-method.
"""

from __future__ import annotations

import abc
import contextlib
import os
from typing import TYPE_CHECKING

from .. import checks
from ..errors import AMLError, AMLFailure, AMLNotSupported, AMLValueError
from .devices import selected_device

if TYPE_CHECKING:
    from .runtime import RuntimeTraits

__all__ = ["IpcOps", "PeerOps"]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: The largest offset in a file (``off_t``).
_OFF_MAX = (1 << 63) - 1


def _file_size(fd: int) -> int | None:
    """The size of the file ``fd`` (a dma-buf answers ``lseek(SEEK_END)`` with its
    size), its position put back at 0; None where the fd cannot say."""
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        return None
    return end


class IpcOps(abc.ABC):
    """``IPC``: share an allocation with another process through an opaque handle of
    ``traits.ipc_handle_size`` bytes."""

    traits: RuntimeTraits

    def ipc_get_handle(self, ptr: int, size: int) -> bytes:
        """The handle of the allocation at ``ptr`` of ``size`` bytes."""
        data = self._ipc_get_handle(checks.pointer(ptr), checks.size(size))
        return checks.handle_bytes(data, self.traits.ipc_handle_size, f"the {self.traits.name} IPC handle")

    def ipc_open_handle(self, handle: bytes, size: int) -> int:
        """Map another process's allocation of ``size`` bytes (with lazy peer access)."""
        data = checks.handle_bytes(handle, self.traits.ipc_handle_size, f"a {self.traits.name} IPC handle")
        return self._ipc_open_handle(data, checks.size(size))

    def ipc_close_handle(self, ptr: int) -> None:
        self._ipc_close_handle(checks.pointer(ptr))

    def ipc_mapped_size(self, ptr: int) -> int | None:
        """The bytes from ``ptr`` to the end of the allocation an opened handle mapped
        there, or None where the runtime cannot tell. The importer checks a handle's
        claimed size against it. A range query that "succeeds" with a range not containing
        ``ptr`` (NULL base, base past ``ptr``, empty) is AMLFailure."""
        ptr = checks.pointer(ptr)
        found = self._ipc_address_range(ptr)
        if found is None:
            return None
        base, size = found
        if base == 0 or base > ptr or size <= 0 or base + size <= ptr:
            raise AMLFailure(
                f"{self.traits.name}: the address range query reported success with base "
                f"0x{base:x}, size {size} for 0x{ptr:x}"
            )
        return base + size - ptr

    def dmabuf_export(self, ptr: int, size: int, device: int) -> tuple[int, int]:
        """The memory at ``ptr`` (``size`` bytes of an allocation on ``device``) as a new
        dma-buf: (fd, the offset of ``ptr`` in it); the fd is the caller's.
        :class:`~aml_core.errors.AMLNotSupported` with the reason where the runtime,
        driver or device cannot (docs/dmabuf.md). An export that "succeeds" with an
        impossible answer is AMLFailure, a valid fd closed first: no file descriptor, an
        offset that is not an int, negative, or past any file (``offset + size`` at or
        past 2**63), or ``[offset, offset + size)`` past the dma-buf's end (its size as
        ``lseek(fd, 0, SEEK_END)`` tells, where the fd can say)."""
        size = checks.size(size)
        fd, offset = self._dmabuf_export(checks.pointer(ptr), size, checks.device(device))
        valid_fd = _is_int(fd) and 0 <= fd < 1 << 31
        why = ""
        if not valid_fd:
            why = "no file descriptor"
        elif not _is_int(offset) or offset < 0:
            why = "an offset that is not a non-negative int"
        elif offset + size > _OFF_MAX:
            why = "an offset past any file"
        else:
            end = _file_size(fd)
            if end is not None and offset + size > end:
                why = f"the buffer's {size} bytes at that offset past the dma-buf's {end}"
        if not why:
            return fd, offset
        if valid_fd:
            with contextlib.suppress(AMLError, OSError):
                self._dmabuf_close(fd)
        raise AMLFailure(
            f"{self.traits.name}: the dma-buf export reported success with fd {fd!r}, "
            f"offset {offset!r}: {why}"
        )

    def _dmabuf_export(self, ptr: int, size: int, device: int) -> tuple[int, int]:
        """Override with the native export where the library has one
        (``cuMemGetHandleForAddressRange``, ``hsa_amd_portable_export_dmabuf``)."""
        raise AMLNotSupported(f"{self.traits.name} has no dma-buf export")

    def _dmabuf_close(self, fd: int) -> None:
        """Close an exported fd aml cannot hand over (override where the library has its
        own close, ``hsa_amd_portable_close_dmabuf``)."""
        os.close(fd)

    def _ipc_address_range(self, ptr: int) -> tuple[int, int] | None:
        """Override with the native range query (``cuMemGetAddressRange``,
        ``hipMemGetAddressRange``, ``zeMemGetAddressRange``) where the library has it:
        (base, size) of the allocation containing ``ptr``."""
        return None

    @abc.abstractmethod
    def _ipc_get_handle(self, ptr: int, size: int) -> bytes: ...
    @abc.abstractmethod
    def _ipc_open_handle(self, handle: bytes, size: int) -> int: ...
    @abc.abstractmethod
    def _ipc_close_handle(self, ptr: int) -> None: ...


class PeerOps(abc.ABC):
    """``PEER``: one device reaching another's memory directly (peer access) and copies
    between devices (``cudaDeviceCanAccessPeer`` / ``hipDeviceCanAccessPeer``,
    ``...EnablePeerAccess``, ``...DisablePeerAccess``, ``cudaMemcpyPeer`` /
    ``hipMemcpyPeer``; docs/aml-contract.md#peer-access).

    Peer access is one-way, from a device to a peer's memory, and process-wide: it is the
    runtime's state, shared with every library of the process. So:

    * :meth:`can_access_peer` answers False for a device and itself (a device is not its
      own peer: HIP documents it, CUDA answers it) without a native call;
    * :meth:`enable_peer_access` and :meth:`disable_peer_access` are idempotent: True when
      the call changed the state, False when it already was so (the runtime's "already
      enabled" / "not enabled" errors, which another library of the process may cause,
      are answers here, not errors; the runtime's last error is cleared);
    * they act for ``device`` (None or negative: the caller's current device), selecting it for
      the native call and restoring the caller's current device afterwards, also when
      the call fails (:func:`~aml_core.gpu.devices.selected_device`);
    * enabling a pair the hardware cannot link is ENOTSUP (asked first, with
      :meth:`can_access_peer`), a device as its own peer or an index past the device
      count EINVAL, before any native call.

    The runtime provides ``device_count``, ``get_device`` and ``_set_device``
    (:class:`Runtime`)."""

    traits: RuntimeTraits

    @abc.abstractmethod
    def device_count(self) -> int: ...
    @abc.abstractmethod
    def get_device(self) -> int: ...
    @abc.abstractmethod
    def _set_device(self, device: int) -> None: ...

    def _peer_device(self, device: object, what: str, count: int) -> int:
        d = checks.device(device, what=what)
        if d >= count:
            raise AMLValueError(f"{what} {d} is not in 0..{count - 1} ({count} devices)")
        return d

    def _peer_pair(self, device: int | None, peer: int) -> tuple[int, int]:
        """(device, peer) checked against the device count, distinct; ``device`` None or
        negative is the caller's current device (as an area's device)."""
        count = self.device_count()
        if device is not None and checks.c_int(device, "device") >= 0:
            d = self._peer_device(device, "device", count)
        else:
            d = self.get_device()
        p = self._peer_device(peer, "peer", count)
        if d == p:
            raise AMLValueError(
                f"device {d} is not its own peer: it reaches its own memory without peer access"
            )
        return d, p

    def can_access_peer(self, device: int, peer: int) -> bool:
        """Whether ``device`` can reach ``peer``'s memory directly (once enabled)."""
        count = self.device_count()
        d = self._peer_device(device, "device", count)
        p = self._peer_device(peer, "peer", count)
        return d != p and self._can_access_peer(d, p)

    def enable_peer_access(self, peer: int, device: int | None = None) -> bool:
        """Let ``device`` (None or negative: the current device) reach ``peer``'s memory; True if
        this call enabled it, False if it was enabled already."""
        d, p = self._peer_pair(device, peer)
        if not self._can_access_peer(d, p):
            raise AMLNotSupported(
                f"{self.traits.name} device {d} cannot access device {p}'s memory directly "
                f"({self.traits.name} reports no peer path between them)"
            )
        with selected_device(self, d):
            return self._enable_peer_access(p)

    def disable_peer_access(self, peer: int, device: int | None = None) -> bool:
        """Stop ``device`` (None or negative: the current device) reaching ``peer``'s memory; True
        if this call disabled it, False if it was not enabled (also: a pair that cannot
        be linked)."""
        d, p = self._peer_pair(device, peer)
        if not self._can_access_peer(d, p):
            return False
        with selected_device(self, d):
            return self._disable_peer_access(p)

    def memcpy_peer(self, dst: int, dst_device: int, src: int, src_device: int, size: int) -> None:
        """Copy ``size`` bytes from ``src`` on ``src_device`` to ``dst`` on ``dst_device``
        (peer access not needed: the runtime stages the copy when there is none). Returns
        when the bytes are copied."""
        count = self.device_count()
        self._memcpy_peer(
            checks.pointer(dst, "dst"),
            self._peer_device(dst_device, "dst_device", count),
            checks.pointer(src, "src"),
            self._peer_device(src_device, "src_device", count),
            checks.size(size),
        )

    @abc.abstractmethod
    def _can_access_peer(self, device: int, peer: int) -> bool: ...
    @abc.abstractmethod
    def _enable_peer_access(self, peer: int) -> bool:
        """Enable access from the current device to ``peer``; False on "already enabled"."""

    @abc.abstractmethod
    def _disable_peer_access(self, peer: int) -> bool:
        """Disable access from the current device to ``peer``; False on "not enabled"."""

    @abc.abstractmethod
    def _memcpy_peer(self, dst: int, dst_device: int, src: int, src_device: int, size: int) -> None:
        """The copy, synchronous (the bytes are at ``dst`` when it returns)."""


#: Each group and the class whose methods make it up.
