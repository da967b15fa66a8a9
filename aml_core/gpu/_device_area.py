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

__all__ = ["DeviceMemoryArea"]


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
