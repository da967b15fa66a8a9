"""What the areas of one runtime's device memory share (the IPC import area,
:class:`~aml_core.gpu.ipc.IpcImportArea`, and virtual memory,
:class:`~aml_core.gpu.vmm.VirtualMemory`): a DEVICE area of the runtime's backend whose
buffers GPU libraries reach through DLPack and ``__cuda_array_interface__``."""

from __future__ import annotations

from collections.abc import Callable
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
        return self._ask(device, lambda runtime, d: runtime.device_info(d).total_memory or None)

    def free_memory(self, device: int | None = None) -> int | None:
        """The free memory of that device now; None where the runtime cannot tell."""
        return self._ask(device, lambda runtime, d: runtime.free_memory(d))

    def _ask(self, device: int | None, query: Callable[[Runtime, int], int | None]) -> int | None:
        """``query`` of the runtime about the device (None: not device memory, or the
        runtime failed to tell)."""
        from ..errors import AMLError

        if self.kind not in (Kind.DEVICE, Kind.MANAGED):
            return None
        runtime = self._memory_runtime()
        try:
            if device is None:
                device = self.device if self.device is not None and self.device >= 0 else runtime.get_device()
            return query(runtime, device)
        except AMLError:
            return None


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
