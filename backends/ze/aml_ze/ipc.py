"""Level Zero IPC, a part of :class:`aml_ze.runtime.ZeRuntime` (its ``IPC`` group).

aml-ze's handle (:data:`IPC_HANDLE_SIZE` bytes) is the driver's ``ze_ipc_mem_handle_t``
followed by :data:`IPC_MAGIC`, the exporter's pid, the file descriptor inside the driver's
handle and a reserved word: the importer duplicates the exporter's descriptor with
``pidfd_getfd`` (Linux 5.6+, ptrace rights over the exporter) and opens a handle that
carries its own copy (see :mod:`aml_ze.runtime`'s module doc).
"""

from __future__ import annotations

import abc
import ctypes
import os
import struct
import sys
from ctypes import byref, c_size_t, c_void_p
from typing import TYPE_CHECKING, Final

from aml_core import checks
from aml_core.errors import AMLFailure, AMLNotSupported, AMLValueError, NativeCause
from aml_core.gpu.runtime import IpcOps

from . import abi as C

if TYPE_CHECKING:
    from .native import ZeLibrary
    from .runtime import AllocProperties

__all__ = ["IPC_HANDLE_SIZE", "IPC_MAGIC", "ZeIpc"]

#: Bytes of the IPC group's handle (see the module doc).
IPC_HANDLE_SIZE: Final = 80
IPC_MAGIC: Final = b"AMZE"
_IPC_TAIL = struct.Struct("<4sIII")
_SYS_PIDFD_GETFD: Final = 438
_PR_SET_PTRACER: Final = 0x59616D61
_PR_SET_PTRACER_ANY: Final = (1 << 64) - 1


def _vp(value: int) -> c_void_p:
    return c_void_p(value or None)


class ZeIpc(IpcOps, abc.ABC):
    """The IPC group of the runtime, which sets ``lib`` and ``devices`` and gives its
    contexts, device handles and allocation properties."""

    lib: ZeLibrary
    devices: tuple[int, ...]
    _ptracer_set: bool = False

    @property
    @abc.abstractmethod
    def context(self) -> int:
        """The runtime's own context."""

    @abc.abstractmethod
    def context_of(self, ptr: int) -> int:
        """The context owning ``ptr``."""

    @abc.abstractmethod
    def handle(self, device: int) -> int:
        """The ``ze_device_handle_t`` of a device index."""

    @abc.abstractmethod
    def alloc_properties(self, ptr: int) -> AllocProperties:
        """``zeMemGetAllocProperties`` of ``ptr``."""

    def _allow_pidfd_getfd(self) -> None:
        """Let importers duplicate this process's descriptors under Yama ptrace_scope 1."""
        if self._ptracer_set:
            return
        self._ptracer_set = True
        try:
            with open("/proc/sys/kernel/yama/ptrace_scope") as f:
                scope = f.read().strip()
        except OSError:
            return
        if scope == "1":
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PTRACER, ctypes.c_ulong(_PR_SET_PTRACER_ANY), 0, 0, 0)

    def _ipc_get_handle(self, ptr: int, size: int) -> bytes:
        handle = C.ze_ipc_mem_handle_t()
        context = self.context_of(ptr)
        self.lib.call("zeMemGetIpcHandle", _vp(context), _vp(ptr), byref(handle))
        self._allow_pidfd_getfd()
        props = self.alloc_properties(ptr)
        device = props.device or 0
        data = ctypes.string_at(byref(handle), C.ZE_MAX_IPC_HANDLE_SIZE)
        return data + _IPC_TAIL.pack(IPC_MAGIC, os.getpid(), device, 0)

    def ipc_put_handle(self, context: int, data: bytes) -> None:
        """``zeMemPutIpcHandle`` where the loader has it (spec 1.6+); otherwise the
        handle is released with its memory."""
        if not self.lib.has("zeMemPutIpcHandle"):
            return
        native = C.ze_ipc_mem_handle_t.from_buffer_copy(data[: C.ZE_MAX_IPC_HANDLE_SIZE])
        self.lib.call("zeMemPutIpcHandle", _vp(context), native)

    @staticmethod
    def parse_ipc_handle(data: bytes) -> tuple[bytes, int, int, int]:
        """(ze handle, exporter pid, device, exporter fd) of an aml-ze IPC handle; EINVAL
        if it is not one."""
        raw = checks.handle_bytes(data, IPC_HANDLE_SIZE, "an aml-ze IPC handle")
        magic, pid, device, reserved = _IPC_TAIL.unpack_from(raw, C.ZE_MAX_IPC_HANDLE_SIZE)
        if magic != IPC_MAGIC or reserved != 0:
            raise AMLValueError("not an aml-ze IPC handle (bad magic): from another backend, or tampered")
        if pid <= 0 or pid > checks.C_INT_MAX:
            raise AMLValueError(f"the aml-ze IPC handle names pid {pid}: tampered")
        fd = int.from_bytes(raw[:4], "little", signed=True)
        if fd < 0:
            raise AMLValueError(f"the aml-ze IPC handle carries fd {fd}: tampered")
        return raw[: C.ZE_MAX_IPC_HANDLE_SIZE], pid, device, fd

    def _ipc_open_handle(self, handle: bytes, size: int) -> int:
        ze, pid, device, remote_fd = self.parse_ipc_handle(handle)
        count = len(self.devices)
        if device >= count:
            # The exporter's device index, in its own numbering: one this process does not
            # have (another ZE_AFFINITY_MASK, or a tampered handle) names no device to open
            # it on. Refused as every bad handle is, before the descriptor is duplicated.
            raise AMLValueError(
                f"the aml-ze IPC handle names device {device}; this process has {count} "
                f"device{'s' if count != 1 else ''}: tampered, or exported where other devices are visible"
            )
        hdev = self.devices[device]
        local = _pidfd_getfd(pid, remote_fd)
        try:
            native = C.ze_ipc_mem_handle_t.from_buffer_copy(local.to_bytes(4, "little") + ze[4:])
            out = c_void_p()
            self.lib.call("zeMemOpenIpcHandle", _vp(self.context), _vp(hdev), native, 0, byref(out))
        finally:
            os.close(local)
        if not out.value:
            raise AMLFailure("zeMemOpenIpcHandle returned SUCCESS and a NULL pointer")
        return int(out.value)

    def _ipc_close_handle(self, ptr: int) -> None:
        self.lib.call("zeMemCloseIpcHandle", _vp(self.context), _vp(ptr))

    # -- dma-buf export (docs/dmabuf.md) ----------------------------------------------------
    def _dmabuf_export(self, ptr: int, size: int, device: int) -> tuple[int, int]:
        """``zeMemGetAllocProperties`` with a ``ze_external_memory_export_fd_t``
        (``ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF``) chained: the allocation holding ``ptr`` as
        a dma-buf fd, and ``ptr``'s offset in it (its base from ``zeMemGetAddressRange``),
        both in the context that owns it. The allocation must have been made exportable
        (``ze_external_memory_export_desc_t`` chained to its descriptor: a ZeArea made with
        ``dmabuf=True``); the driver refuses it otherwise."""
        context = _vp(self.context_of(ptr))
        base, length = c_void_p(), c_size_t(0)
        self.lib.call("zeMemGetAddressRange", context, _vp(ptr), byref(base), byref(length))
        start = int(base.value or 0)
        if not 0 < start <= ptr or ptr + size > start + int(length.value):
            raise AMLFailure(
                f"ze: zeMemGetAddressRange reported success with base 0x{start:x}, size "
                f"{int(length.value)} for {size} bytes at 0x{ptr:x}"
            )
        export = C.ze_external_memory_export_fd_t(
            C.ZE_STRUCTURE_TYPE_EXTERNAL_MEMORY_EXPORT_FD, None, C.ZE_EXTERNAL_MEMORY_TYPE_FLAG_DMA_BUF, -1
        )
        props = C.ze_memory_allocation_properties_t()
        props.stype = C.ZE_STRUCTURE_TYPE_MEMORY_ALLOCATION_PROPERTIES
        props.pNext = ctypes.addressof(export)
        self.lib.call("zeMemGetAllocProperties", context, _vp(ptr), byref(props), None)
        return int(export.fd), ptr - start

    def _ipc_address_range(self, ptr: int) -> tuple[int, int] | None:
        """``zeMemGetAddressRange`` of the opened memory: the allocation the exporter shared
        (a tampered handle may claim more)."""
        base, size = c_void_p(), c_size_t(0)
        self.lib.call("zeMemGetAddressRange", _vp(self.context), _vp(ptr), byref(base), byref(size))
        return int(base.value or 0), int(size.value)


def _pidfd_getfd(pid: int, fd: int) -> int:
    """A duplicate, in this process, of the exporter's descriptor ``fd``; EINVAL when the
    exporter or its descriptor is gone (or was never there: a tampered handle)."""
    if not sys.platform.startswith("linux"):  # pragma: no cover
        raise AMLNotSupported("aml-ze IPC passes file descriptors with pidfd_getfd (Linux 5.6+)")
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        raise AMLValueError(f"the exporting process {pid} is gone (or the handle was tampered)") from None
    except OSError as exc:
        raise AMLNotSupported(f"pidfd_open({pid}) failed: {exc}") from None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        local = int(libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0))
        if local < 0:
            err = ctypes.get_errno()
            if err == 9:  # EBADF
                raise AMLValueError(f"process {pid} has no descriptor {fd}: the handle is stale or tampered")
            raise AMLNotSupported(
                f"pidfd_getfd({pid}, {fd}) failed: {os.strerror(err)} (ptrace rights over the exporter "
                "are needed: see Yama ptrace_scope)",
                native=NativeCause("ze", "pidfd_getfd", err, os.strerror(err)),
            )
        return local
    finally:
        os.close(pidfd)
