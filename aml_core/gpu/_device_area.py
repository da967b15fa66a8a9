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

__all__ = ["DeviceMemoryArea", "RuntimeMemory"]


class RuntimeMemory:
    """:class:`~aml_core.protocols.MemoryCapacity` for an area over a GPU runtime: the
    device's total memory from the runtime's device info, its free memory from the
    runtime's cheap query (``Runtime.free_memory``: NVML, ``hipMemGetInfo``, Sysman, HSA);
    for device and managed memory only (pinned or mapped host memory is not the
    device's: None). An area mixes it in and says which runtime (:meth:`_memory_runtime`)."""

    kind: Kind
    device: int | None

    def _memory_runtime(self) -> Runtime:
        raise NotImplementedError

    def total_memory(self, device: int | None = None) -> int | None:
        """The memory of ``device`` (None: the area's device, else the current one)."""
        from ..errors import AMLError

        runtime, device = self._memory_device(device)
        if device is None:
            return None
        try:
            return runtime.device_info(device).total_memory or None
        except AMLError:
            return None

    def free_memory(self, device: int | None = None) -> int | None:
        """The free memory of that device now; None where the runtime cannot tell."""
        from ..errors import AMLError

        runtime, device = self._memory_device(device)
        if device is None:
            return None
        try:
            return runtime.free_memory(device)
        except AMLError:
            return None

    def _memory_device(self, device: int | None) -> tuple[Runtime, int | None]:
        """The runtime and the device asked about (None: not device memory)."""
        runtime = self._memory_runtime()
        if self.kind not in (Kind.DEVICE, Kind.MANAGED):
            return runtime, None
        if device is None:
            device = self.device if self.device is not None and self.device >= 0 else runtime.get_device()
        return runtime, device


class DeviceMemoryArea(RuntimeMemory, Area):
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

    def _memory_runtime(self) -> Runtime:
        return self._runtime
