"""What the areas of one runtime's device memory share (the IPC import area,
:class:`~aml_core.gpu.ipc.IpcImportArea`, and virtual memory,
:class:`~aml_core.gpu.vmm.VirtualMemory`): a DEVICE area of the runtime's backend whose
buffers GPU libraries reach through DLPack and ``__cuda_array_interface__``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..area import Area
from ..buffer import Buffer
from ..interop import cuda_array_interface
from ..specs import Capability, Kind

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["DeviceMemoryArea", "device_free_memory", "device_total_memory"]


def device_total_memory(runtime: Runtime, device: int | None) -> int | None:
    """A device's memory as its runtime reports it (None: the current device; None if
    unknown). For aml_core.protocols.MemoryCapacity."""
    from ..errors import AMLError

    try:
        return runtime.device_info(runtime.get_device() if device is None else device).total_memory or None
    except AMLError:
        return None


def device_free_memory(runtime: Runtime, device: int | None) -> int | None:
    """A device's free memory now (the runtime's cheap query; None if unknown)."""
    from ..errors import AMLError

    try:
        return runtime.free_memory(runtime.get_device() if device is None else device)
    except AMLError:
        return None


class DeviceMemoryArea(Area):
    """A DEVICE area over ``runtime`` offering ``capability`` (its runtime group's),
    DLPack and ``__cuda_array_interface__``."""

    def __init__(self, runtime: Runtime, device: int | None, capability: Capability) -> None:
        super().__init__(
            backend=runtime.traits.name,
            kind=Kind.DEVICE,
            device=device,
            capabilities=capability | Capability.DLPACK | Capability.CUDA_ARRAY_INTERFACE,
        )
        self._runtime = runtime

    def _cuda_array_interface(self, buffer: Buffer) -> dict[str, Any] | None:
        return cuda_array_interface(buffer.device_ptr, buffer.size)

    # -- what pools use (aml_core.protocols.MemoryCapacity) ---------------------------------
    def total_memory(self, device: int | None = None) -> int | None:
        """The memory of the area's device (or ``device``), as the runtime reports it."""
        return device_total_memory(self._runtime, self.device if device is None else device)

    def free_memory(self, device: int | None = None) -> int | None:
        """The free memory of that device now; None if the runtime cannot tell."""
        return device_free_memory(self._runtime, self.device if device is None else device)
