"""HIP peer access and IPC, a part of :class:`aml_hip.runtime.HipRuntime` (its ``PEER``
and ``IPC`` groups; docs/aml-contract.md#peer-access, #hip-ipc); no dma-buf export
(docs/dmabuf.md)."""

from __future__ import annotations

import ctypes
from ctypes import byref, c_int, c_size_t, c_void_p

from aml_core.errors import AMLNotSupported
from aml_core.gpu import runtime as core

from . import abi as C
from .calls import HipCalls
from .calls import vp as _vp

__all__ = ["HipSharing"]


class HipSharing(HipCalls, core.PeerOps, core.IpcOps):
    """``hipDeviceCanAccessPeer``, ``hipDevice{En,Dis}ablePeerAccess``, ``hipMemcpyPeer``
    and ``hipIpc*``."""

    # -- peer access (docs/aml-contract.md#peer-access) -----------------------------------------
    def _can_access_peer(self, device: int, peer: int) -> bool:
        can = c_int(0)
        self.lib.call("hipDeviceCanAccessPeer", byref(can), device, peer)
        return bool(can.value)

    def _peer_call(self, name: str, answered: int, *args: int) -> bool:
        """A peer enable/disable: True on success, False on ``answered`` (704 "already
        enabled" / 705 "not enabled": an answer of the idempotent call, cleared from
        hipGetLastError, which HIP 7 keeps until read), else the translated error."""
        rc = self.lib.raw(name, *args)
        if rc == C.hipSuccess:
            return True
        if rc == answered:
            self.lib.raw("hipGetLastError")
            return False
        raise self.errors.error(name, rc, None)

    def _enable_peer_access(self, peer: int) -> bool:
        return self._peer_call("hipDeviceEnablePeerAccess", C.hipErrorPeerAccessAlreadyEnabled, peer, 0)

    def _disable_peer_access(self, peer: int) -> bool:
        return self._peer_call("hipDeviceDisablePeerAccess", C.hipErrorPeerAccessNotEnabled, peer)

    def _memcpy_peer(self, dst: int, dst_device: int, src: int, src_device: int, size: int) -> None:
        """``hipMemcpyPeer``, then a synchronization of the null stream: CLR queues the
        device-to-device copy on the current device's null stream without waiting for it
        (as CUDA does), and aml's returns when the bytes are there."""
        self.lib.call("hipMemcpyPeer", _vp(dst), dst_device, _vp(src), src_device, size)
        self.lib.call("hipStreamSynchronize", None)

    # -- IPC (docs/aml-contract.md#hip-ipc) -----------------------------------------------------
    def _ipc_get_handle(self, ptr: int, size: int) -> bytes:
        handle = C.hipIpcMemHandle_t()
        self.lib.call("hipIpcGetMemHandle", byref(handle), _vp(ptr))
        return ctypes.string_at(byref(handle), C.HIP_IPC_HANDLE_SIZE)

    def _ipc_open_handle(self, handle: bytes, size: int) -> int:
        native = C.hipIpcMemHandle_t.from_buffer_copy(handle)
        # hipIpcMemLazyEnablePeerAccess: 0 up to HIP 5.7, 1 from 6.0 (docs/native-abi.md#hip-ipc).
        return self._out_ptr("hipIpcOpenMemHandle", native, self.abi.ipc_lazy_enable_peer_access)

    def _ipc_address_range(self, ptr: int) -> tuple[int, int] | None:
        """``hipMemGetAddressRange``: the exporter's allocation behind an opened handle
        (the importer refuses a handle that claims more)."""
        base, size = c_void_p(), c_size_t(0)
        self.lib.call("hipMemGetAddressRange", byref(base), byref(size), _vp(ptr))
        return int(base.value or 0), int(size.value)

    def _dmabuf_export(self, ptr: int, size: int, device: int) -> tuple[int, int]:
        """HIP memory is not exported as a dma-buf by aml-hip: the HIP API it is checked
        against (Debian's 5.2 headers and library) has no ``hipMemGetHandleForAddressRange``,
        so neither its signature nor its handle-type constant can be checked here."""
        raise AMLNotSupported(
            "aml-hip has no dma-buf export: HIP 5.2, the API aml-hip is checked against, has no "
            "hipMemGetHandleForAddressRange; export AMD GPU memory with aml-hsa "
            "(hsa_amd_portable_export_dmabuf, ROCm 5.6+)"
        )

    def _ipc_close_handle(self, ptr: int) -> None:
        self.lib.call("hipIpcCloseMemHandle", _vp(ptr))
