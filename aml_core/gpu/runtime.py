"""The runtime interface a GPU backend implements once, so that AML's area flag logic,
managed memory, IPC and virtual memory are written once for CUDA and HIP.

AML's C HIP area is a line-for-line port of its CUDA area; here that shared logic lives
in :mod:`aml_core.gpu` and each backend only supplies a :class:`GpuRuntime`: thin calls
into its native API that take and return Python ints and raise the backend's translated
:class:`~aml_core.errors.AMLError` (through its :class:`~aml_core.errors.ErrorTable`).

Conventions: pointers, stream handles and VMM handles are ints; ``device = -1`` means
the host (``cudaCpuDeviceId`` / ``hipCpuDeviceId``); allocation flags are passed as
booleans so each runtime maps them to its own constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import attrs

from ..errors import ErrorTable
from ..specs import DeviceInfo

__all__ = ["AllocationProperties", "GpuRuntime", "PointerAttributes", "RuntimeTraits"]

#: The host as a managed-memory location (cudaCpuDeviceId, hipCpuDeviceId).
CPU_DEVICE = -1
#: "No single location" in range attributes (cudaInvalidDeviceId, hipInvalidDeviceId).
INVALID_DEVICE = -2


@attrs.frozen
class PointerAttributes:
    """What the runtime knows of an address (``cudaPointerGetAttributes``)."""

    #: "device", "host", "managed" or "unregistered".
    memory_type: str
    device: int
    device_pointer: int
    host_pointer: int
    is_managed: bool


@attrs.frozen
class AllocationProperties:
    """Properties of a virtual-memory physical allocation."""

    #: 1 = pinned (the only type CUDA and HIP create here).
    type: int
    location_device: int
    #: Bit mask of shareable handle types (1 = POSIX file descriptor).
    handle_types: int


@attrs.frozen
class RuntimeTraits:
    """Facts of a runtime that change what the shared logic checks or exports."""

    #: Backend name ("cuda", "hip").
    name: str
    #: DLPack device types for device, pinned/mapped host and managed memory.
    dl_device: int
    dl_host: int
    dl_managed: int
    #: Managed allocations are made in granules of this many bytes (HIP: 4096).
    managed_granule: int = 1
    #: Managed advise ranges must start and end on this alignment (HIP: 4096).
    advise_alignment: int = 1
    #: Advice values the runtime accepts.
    advices: frozenset[int] = frozenset({1, 2, 3, 4, 5, 6})
    #: Range attributes the runtime answers.
    range_attributes: frozenset[int] = frozenset({1, 2, 3, 4})
    #: Version string for status output.
    version: str = ""


@runtime_checkable
class GpuRuntime(Protocol):
    """Native calls of one GPU runtime. Every method raises the backend's translated
    :class:`~aml_core.errors.AMLError` on failure."""

    traits: RuntimeTraits
    errors: ErrorTable

    # -- devices
    def device_count(self) -> int: ...
    def get_device(self) -> int: ...
    def set_device(self, device: int) -> None: ...
    def device_info(self, device: int) -> DeviceInfo: ...
    def synchronize(self) -> None: ...

    # -- allocation (AML area flags)
    def malloc(self, size: int) -> int: ...
    def free(self, ptr: int) -> None: ...
    def host_alloc(self, size: int, *, portable: bool, mapped: bool) -> int: ...
    def free_host(self, ptr: int) -> None: ...
    def malloc_managed(self, size: int, *, attach_global: bool) -> int: ...
    def host_register(self, ptr: int, size: int, *, portable: bool, mapped: bool) -> None: ...
    def host_unregister(self, ptr: int) -> None: ...
    def host_device_pointer(self, ptr: int) -> int: ...
    def pointer_attributes(self, ptr: int) -> PointerAttributes: ...
    def memcpy(self, dst: int, src: int, size: int) -> None: ...
    def memset(self, ptr: int, value: int, size: int) -> None: ...

    # -- managed memory (docs/aml-contract.md#hip-managed-memory)
    def mem_prefetch(self, ptr: int, size: int, device: int, stream: int) -> None: ...
    def mem_advise(self, ptr: int, size: int, advice: int, device: int) -> None: ...
    def mem_range_attributes(
        self, ptr: int, size: int, requests: Sequence[tuple[int, int]]
    ) -> list[list[int]]:
        """For each (attribute, count) request, ``count`` ints of data."""
        ...

    def stream_attach(self, stream: int, ptr: int, size: int, flags: int) -> None: ...

    # -- streams
    def stream_create(self, non_blocking: bool) -> int: ...
    def stream_destroy(self, stream: int) -> None: ...
    def stream_synchronize(self, stream: int) -> None: ...

    # -- IPC (docs/aml-contract.md#hip-ipc)
    def ipc_get_handle(self, ptr: int) -> bytes: ...
    def ipc_open_handle(self, handle: bytes) -> int:
        """Open with lazy peer access (the runtime's own flag value)."""
        ...

    def ipc_close_handle(self, ptr: int) -> None: ...

    # -- virtual memory (hsa_amd_vmem_* semantics on CUDA/HIP VMM: docs/aml-contract.md#hsa-virtual-memory)
    def vmm_granularity(self, device: int, recommended: bool) -> int: ...
    def vmm_reserve(self, size: int, alignment: int, address: int) -> int: ...
    def vmm_address_free(self, ptr: int, size: int) -> None: ...
    def vmm_create(self, size: int, device: int, exportable: bool) -> int: ...
    def vmm_release(self, handle: int) -> None: ...
    def vmm_map(self, ptr: int, size: int, handle: int, offset: int) -> None: ...
    def vmm_unmap(self, ptr: int, size: int) -> None: ...
    def vmm_set_access(self, ptr: int, size: int, access: Sequence[tuple[int, int]]) -> None: ...
    def vmm_get_access(self, ptr: int, device: int) -> int: ...
    def vmm_export_fd(self, handle: int) -> int: ...
    def vmm_import_fd(self, fd: int) -> int: ...
    def vmm_retain(self, ptr: int) -> int: ...
    def vmm_properties(self, handle: int) -> AllocationProperties: ...
