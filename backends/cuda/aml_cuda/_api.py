"""The public API of aml's CUDA backend (imported lazily by :mod:`aml_cuda`).

``BACKEND`` is the shared GPU logic of :mod:`aml_core.gpu` over
:class:`aml_cuda.runtime.CudaRuntime`; the functions below are AML's CUDA area API
(``aml_area_cuda_create``, ``aml_area_cuda``, ``aml_area_cuda_unified``) plus IPC,
virtual memory and streams.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, cast

from aml_core.buffer import Buffer
from aml_core.descriptor import ProbeResult
from aml_core.errors import AMLNotSupported
from aml_core.gpu import (
    CPU,
    INVALID,
    Access,
    Advice,
    AllocationProperties,
    AttachFlags,
    GpuArea,
    GpuBackend,
    GpuFlags,
    GpuMmapOptions,
    GpuRuntime,
    GrowableBuffer,
    IpcExport,
    IpcHandle,
    LocationType,
    Physical,
    PointerAttributes,
    RangeAttribute,
    Reservation,
    Stream,
    VirtualMemory,
)

if TYPE_CHECKING:
    from .runtime import CudaRuntime

__all__ = [
    "BACKEND",
    "CPU",
    "INVALID",
    "MIN_BINDINGS",
    "Access",
    "Advice",
    "AllocationProperties",
    "AttachFlags",
    "CudaArea",
    "CudaFlags",
    "CudaMmapOptions",
    "GrowableBuffer",
    "IpcExport",
    "IpcHandle",
    "LocationType",
    "Physical",
    "PointerAttributes",
    "RangeAttribute",
    "Reservation",
    "Stream",
    "VirtualMemory",
    "create",
    "default_area",
    "get_runtime",
    "ipc_close",
    "ipc_open",
    "load_runtime",
    "pointer_attributes",
    "probe",
    "stream",
    "unified_area",
    "virtual_memory",
]

#: AML's CUDA area flags (``AML_AREA_CUDA_FLAG_*``): DEFAULT 0, ALLOC_HOST 1,
#: ALLOC_UNIFIED 2, ALLOC_MAPPED 4, ALLOC_GLOBAL 8 (the same class as HIP's).
CudaFlags = GpuFlags
#: The area ``create()`` returns.
CudaArea = GpuArea
#: ``struct aml_area_cuda_mmap_options``: ``device`` and ``ptr``.
CudaMmapOptions = GpuMmapOptions

#: The oldest cuda-bindings major version with the CUDA 13 call forms used here.
MIN_BINDINGS = 13


def load_runtime() -> GpuRuntime:
    """Import cuda-bindings and build the runtime; ENOTSUP (with the reason) when
    cuda-bindings is missing, too old or broken. Touches no device."""
    try:
        import cuda.bindings  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except Exception as exc:
        raise AMLNotSupported(
            f"cuda-bindings is not installed (pip install 'cuda-bindings>={MIN_BINDINGS}'): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    version = str(getattr(cuda.bindings, "__version__", "0"))
    try:
        major = int(version.split(".", 1)[0])
    except ValueError:
        major = 0
    if major < MIN_BINDINGS:
        raise AMLNotSupported(
            f"aml-cuda needs cuda-bindings>={MIN_BINDINGS} (CUDA 13 call forms); found {version}"
        )
    try:
        from .runtime import CudaRuntime
    except Exception as exc:
        raise AMLNotSupported(
            f"cuda-bindings {version} could not be loaded: {type(exc).__name__}: {exc}"
        ) from exc
    return CudaRuntime()


def driver_precheck() -> str | None:
    """Why CUDA cannot work here before cuda-bindings is even imported (about 50 ms
    saved on every machine without an NVIDIA driver), or None. The CUDA runtime looks for
    the driver exactly so: ``dlopen("libcuda.so.1")``."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return f"no NVIDIA driver: libcuda.so.1 cannot be loaded ({exc})"
    return None


BACKEND = GpuBackend(
    "cuda",
    load_runtime,
    precheck=driver_precheck,
    description="NVIDIA GPUs through cuda-bindings: device, pinned, managed and mapped memory, "
    "managed advice and prefetch, IPC, virtual memory (cuMem*)",
)


def get_runtime() -> CudaRuntime:
    """The loaded :class:`~aml_cuda.runtime.CudaRuntime` (ENOTSUP without cuda-bindings)."""
    return cast("CudaRuntime", BACKEND.runtime)


def create(device: int = -1, flags: int | GpuFlags = GpuFlags.DEFAULT) -> GpuArea:
    """``aml_area_cuda_create(device, flags)``: a new CUDA area (close it when done).

    ``device`` < 0 means the current device at mmap time; ``device`` >= the device
    count is EINVAL; unknown flag bits are EINVAL."""
    return BACKEND.create(device, flags)


def default_area() -> GpuArea:
    """``aml_area_cuda``: device memory on the current device (shared, do not close)."""
    return BACKEND.default_area()


def unified_area() -> GpuArea:
    """``aml_area_cuda_unified``: managed memory on the current device (shared)."""
    return BACKEND.unified_area()


def ipc_open(handle: IpcHandle) -> Buffer:
    """Open an IPC handle exported by another process (opening it twice maps it once;
    close as many times as opened)."""
    buf: Buffer = BACKEND.ipc_open(handle)
    return buf


def ipc_close(buffer: Buffer) -> None:
    """Close one open of an imported buffer (the same as ``buffer.free()``)."""
    BACKEND.ipc_close(buffer)


def virtual_memory(device: int = 0) -> VirtualMemory:
    """The virtual-memory API and area of a device (close it when done)."""
    return BACKEND.virtual_memory(device)


def stream(*, non_blocking: bool = False) -> Stream:
    """A new CUDA stream (close it when done)."""
    return BACKEND.stream(non_blocking=non_blocking)


def probe() -> ProbeResult:
    """Available or not, and why; the devices with their capabilities."""
    return BACKEND.probe()


def pointer_attributes(ptr: int | Buffer) -> PointerAttributes:
    """``cudaPointerGetAttributes`` of an address or a buffer's ``ptr``."""
    address = ptr.ptr if isinstance(ptr, Buffer) else ptr
    return BACKEND.runtime.pointer_attributes(address)
