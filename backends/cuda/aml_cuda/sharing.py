"""CUDA peer access, IPC and dma-buf export, a part of :class:`aml_cuda.runtime.CudaRuntime`
(its ``PEER`` and ``IPC`` groups; docs/aml-contract.md#peer-access, docs/dmabuf.md)."""

from __future__ import annotations

import ctypes
import mmap
import os
from typing import TYPE_CHECKING, Any

from aml_core.errors import AMLNotSupported
from aml_core.gpu import runtime as core
from aml_core.gpu.devices import selected_device

from .calls import CudaCalls, _drv, _rt

__all__ = ["CudaSharing"]

_E = _rt.cudaError_t
_ERR_PEER_ENABLED = int(_E.cudaErrorPeerAccessAlreadyEnabled)
_ERR_PEER_NOT_ENABLED = int(_E.cudaErrorPeerAccessNotEnabled)
_IPC_LAZY = int(_rt.cudaIpcMemLazyEnablePeerAccess)
_IPC_HANDLE_SIZE = 64
# docs/native-abi.md, "CUDA dma-buf export" (cuda-bindings 13.3.1's cydriver.pxd: 124 and 1).
_DMA_BUF_SUPPORTED = _drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
_DMA_BUF_FD = _drv.CUmemRangeHandleType.CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
#: cuMemGetHandleForAddressRange takes a range aligned to the host page size.
PAGE = mmap.PAGESIZE


class CudaSharing(CudaCalls, core.PeerOps, core.IpcOps):
    """``cudaDeviceCanAccessPeer``, ``cudaDevice{En,Dis}ablePeerAccess``,
    ``cudaMemcpyPeer``, ``cudaIpc*`` and ``cuMemGetHandleForAddressRange``."""

    if TYPE_CHECKING:  # CudaRuntime's and CudaVirtualMemory's (the other parts of CudaRuntime)

        def _vcall(self, function: str, *args: Any, message: str | None = None) -> Any: ...
        def _attribute(self, dev: Any, attribute: Any) -> int: ...

    # -- peer access (docs/aml-contract.md#peer-access) --------------------------------------
    def _can_access_peer(self, device: int, peer: int) -> bool:
        return bool(self._call("cudaDeviceCanAccessPeer", device, peer))

    def _peer_call(self, function: str, answered: int, peer: int, *args: int) -> bool:
        """A peer enable/disable: True on success, False on ``answered`` ("already
        enabled" / "not enabled": an answer of the idempotent call, not an error, cleared
        so that it does not surface in a later cudaGetLastError; CUDA records it like any
        failure), else the translated error."""
        (err,) = self._raw(function, peer, *args)
        if not err:
            return True
        if int(err) == answered:
            self._clear_last_error()
            return False
        verb = "enable" if answered == _ERR_PEER_ENABLED else "disable"
        self._fail(function, err, f"could not {verb} access to CUDA device {peer}")

    def _enable_peer_access(self, peer: int) -> bool:
        return self._peer_call("cudaDeviceEnablePeerAccess", _ERR_PEER_ENABLED, peer, 0)

    def _disable_peer_access(self, peer: int) -> bool:
        return self._peer_call("cudaDeviceDisablePeerAccess", _ERR_PEER_NOT_ENABLED, peer)

    def _memcpy_peer(self, dst: int, dst_device: int, src: int, src_device: int, size: int) -> None:
        """``cudaMemcpyPeer``, then a synchronization of the default stream: CUDA queues a
        device-to-device copy on the current device's default stream and returns before
        it is done, and aml's returns when the bytes are there."""
        (err,) = self._raw("cudaMemcpyPeer", dst, dst_device, src, src_device, size)
        if err:  # the message is worded only then: a 1 MiB copy takes about 16 µs
            message = f"cudaMemcpyPeer of {size} bytes from device {src_device} to device {dst_device} failed"
            self._fail("cudaMemcpyPeer", err, message)
        self._call("cudaStreamSynchronize", 0)

    # -- IPC -------------------------------------------------------------------------------
    def _ipc_get_handle(self, ptr: int, size: int) -> bytes:
        handle = self._call("cudaIpcGetMemHandle", ptr)
        return ctypes.string_at(handle.getPtr(), _IPC_HANDLE_SIZE)

    def _ipc_open_handle(self, handle: bytes, size: int) -> int:
        raw = ctypes.create_string_buffer(bytes(handle), _IPC_HANDLE_SIZE)
        native = _rt.cudaIpcMemHandle_t(_ptr=ctypes.addressof(raw))
        try:
            return int(self._call("cudaIpcOpenMemHandle", native, _IPC_LAZY))
        finally:
            del native, raw

    def _ipc_close_handle(self, ptr: int) -> None:
        self._call("cudaIpcCloseMemHandle", ptr)

    def _ipc_address_range(self, ptr: int) -> tuple[int, int] | None:
        """``cuMemGetAddressRange``: the exporter's allocation behind an opened handle
        (the importer refuses a handle that claims more, issue 9)."""
        base, size = self._dcall("cuMemGetAddressRange", ptr)
        return int(base), int(size)

    # -- dma-buf export (docs/dmabuf.md) ----------------------------------------------------
    def _dmabuf_export(self, ptr: int, size: int, device: int) -> tuple[int, int]:
        """``cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)`` of the
        host pages around ``[ptr, ptr + size)`` (the driver takes a page-aligned range),
        on ``device`` selected (its primary context current), once
        ``CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`` says the device can: (fd, ``ptr``'s
        offset in the dma-buf)."""
        dev = self._cu_device(device)
        if not self._attribute(dev, _DMA_BUF_SUPPORTED):
            raise AMLNotSupported(
                f"CUDA device {device} cannot export dma-bufs (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED "
                "is 0: the driver, kernel or platform does not support it)"
            )
        base = ptr & ~(PAGE - 1)
        length = -(-(ptr + size - base) // PAGE) * PAGE
        fd: int | None = None
        try:
            with selected_device(self, device):
                fd = int(
                    self._vcall(
                        "cuMemGetHandleForAddressRange",
                        base,
                        length,
                        _DMA_BUF_FD,
                        0,
                        message=f"cuMemGetHandleForAddressRange of {length} bytes at 0x{base:x} "
                        "(a dma-buf) failed",
                    )
                )
        except BaseException:
            if fd is not None:  # exported, then the caller's device could not be restored
                os.close(fd)
            raise
        return fd, ptr - base
