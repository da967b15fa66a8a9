"""Free device memory through NVML, without a CUDA context.

``cudaMemGetInfo`` answers for the current device only and creates its primary context
(hundreds of MiB of device memory and a few hundred ms) on first use, which a probe must
not do. NVML, the driver's management library (``libnvidia-ml.so.1``, installed with the
driver), answers for any device by PCI bus id without a context: ``nvmlInit_v2``,
``nvmlDeviceGetHandleByPciBusId_v2`` and ``nvmlDeviceGetMemoryInfo_v2`` through
``cuda.bindings.nvml`` (cuda-bindings 13; older bindings have no NVML module).

``nvmlMemory_v2_t.free`` is the memory no process holds: what ``cudaMemGetInfo`` reports
as free, less nothing of this process's own context (NVML counts every process).
Everything that goes wrong (no module, no library, a driver that refuses) makes the
answer "not known" (None), with the reason kept in :func:`unavailable_reason`: free
memory is a report, and a report never fails the probe.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

__all__ = ["free_memory", "unavailable_reason"]

_lock = threading.Lock()
#: The NVML module once initialised; None before the first try or after a failed one.
_nvml: ModuleType | None = None
#: Why NVML cannot answer (set by a failed first try: it is not retried).
_why_not: str | None = None


def _load() -> ModuleType | None:
    global _nvml, _why_not
    with _lock:
        if _nvml is not None or _why_not is not None:
            return _nvml
        try:
            from cuda.bindings import nvml  # type: ignore[import-untyped, import-not-found, unused-ignore]
        except ImportError as exc:
            _why_not = f"cuda-bindings has no NVML module ({exc})"
            return None
        try:
            nvml.init_v2()
        except Exception as exc:  # NvmlError, or cuda.pathfinder's "library not found" (a RuntimeError)
            _why_not = f"nvmlInit_v2 failed: {type(exc).__name__}: {exc}"
            return None
        module: ModuleType = nvml
        _nvml = module
        return module


def free_memory(pci_bus_id: str) -> int | None:
    """Free bytes of the device at ``pci_bus_id`` (``"0000:19:00.0"``, as
    ``cuDeviceGetPCIBusId`` writes it); None when NVML cannot say."""
    nvml = _load()
    if nvml is None:
        return None
    try:
        handle = nvml.device_get_handle_by_pci_bus_id_v2(pci_bus_id)
        info: Any = nvml.device_get_memory_info_v2(handle)
        free, total = int(info.free), int(info.total)
    except Exception:  # an NvmlError (NotSupported on some iGPUs, NoPermission...): not known
        return None
    if free < 0 or free > total:  # an impossible "success"
        return None
    return free


def unavailable_reason() -> str | None:
    """Why NVML gave no answer at all (None: it is usable, or was not tried yet)."""
    return _why_not
