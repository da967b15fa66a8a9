"""CUDA peer access and IPC, a part of :class:`aml_cuda.runtime.CudaRuntime` (its
``PEER`` and ``IPC`` groups; docs/aml-contract.md#peer-access)."""

from __future__ import annotations

import ctypes

from aml_core.gpu import runtime as core

from .calls import CudaCalls, _drv, _rt

__all__ = ["CudaSharing"]

_E = _rt.cudaError_t
_ERR_PEER_ENABLED = int(_E.cudaErrorPeerAccessAlreadyEnabled)
_ERR_PEER_NOT_ENABLED = int(_E.cudaErrorPeerAccessNotEnabled)
_IPC_LAZY = int(_rt.cudaIpcMemLazyEnablePeerAccess)
_IPC_HANDLE_SIZE = 64


class CudaSharing(CudaCalls, core.PeerOps, core.IpcOps):
    """``cudaDeviceCanAccessPeer``, ``cudaDevice{En,Dis}ablePeerAccess``,
    ``cudaMemcpyPeer`` and ``cudaIpc*``."""

    # -- peer access (docs/aml-contract.md#peer-access) --------------------------------------
    def _can_access_peer(self, device: int, peer: int) -> bool:
        err, can = _rt.cudaDeviceCanAccessPeer(device, peer)
        if err:
            self._fail("cudaDeviceCanAccessPeer", err)
        return bool(can)

    def _enable_peer_access(self, peer: int) -> bool:
        (err,) = _rt.cudaDeviceEnablePeerAccess(peer, 0)
        if not err:
            return True
        if int(err) == _ERR_PEER_ENABLED:
            # An answer, not an error (idempotent enable): clear it so that it does not
            # surface in a later cudaGetLastError (CUDA records it like any failure).
            self._clear_last_error()
            return False
        self._fail("cudaDeviceEnablePeerAccess", err, f"could not enable access to CUDA device {peer}")

    def _disable_peer_access(self, peer: int) -> bool:
        (err,) = _rt.cudaDeviceDisablePeerAccess(peer)
        if not err:
            return True
        if int(err) == _ERR_PEER_NOT_ENABLED:
            self._clear_last_error()
            return False
        self._fail("cudaDeviceDisablePeerAccess", err, f"could not disable access to CUDA device {peer}")

    def _memcpy_peer(self, dst: int, dst_device: int, src: int, src_device: int, size: int) -> None:
        """``cudaMemcpyPeer``, then a synchronization of the default stream: CUDA queues a
        device-to-device copy on the current device's default stream and returns before
        it is done, and aml's returns when the bytes are there."""
        (err,) = _rt.cudaMemcpyPeer(dst, dst_device, src, src_device, size)
        if err:
            self._fail(
                "cudaMemcpyPeer",
                err,
                f"cudaMemcpyPeer of {size} bytes from device {src_device} to device {dst_device} failed",
            )
        (err,) = _rt.cudaStreamSynchronize(0)
        if err:
            self._fail("cudaStreamSynchronize", err)

    # -- IPC -------------------------------------------------------------------------------
    def _ipc_get_handle(self, ptr: int, size: int) -> bytes:
        err, handle = _rt.cudaIpcGetMemHandle(ptr)
        if err:
            self._fail("cudaIpcGetMemHandle", err)
        return ctypes.string_at(handle.getPtr(), _IPC_HANDLE_SIZE)

    def _ipc_open_handle(self, handle: bytes, size: int) -> int:
        raw = ctypes.create_string_buffer(bytes(handle), _IPC_HANDLE_SIZE)
        native = _rt.cudaIpcMemHandle_t(_ptr=ctypes.addressof(raw))
        err, ptr = _rt.cudaIpcOpenMemHandle(native, _IPC_LAZY)
        del native, raw
        if err:
            self._fail("cudaIpcOpenMemHandle", err)
        return int(ptr)

    def _ipc_close_handle(self, ptr: int) -> None:
        (err,) = _rt.cudaIpcCloseMemHandle(ptr)
        if err:
            self._fail("cudaIpcCloseMemHandle", err)

    def _ipc_address_range(self, ptr: int) -> tuple[int, int] | None:
        """``cuMemGetAddressRange``: the exporter's allocation behind an opened handle
        (the importer refuses a handle that claims more, issue 9)."""
        err, base, size = _drv.cuMemGetAddressRange(ptr)
        if err:
            self._dfail("cuMemGetAddressRange", err)
        return int(base), int(size)
