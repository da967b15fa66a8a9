"""Free device memory and the links between GPUs through NVML, without a CUDA context.

``cudaMemGetInfo`` answers for the current device only and creates its primary context
(hundreds of MiB of device memory and a few hundred ms) on first use, which a probe must
not do. NVML, the driver's management library (``libnvidia-ml.so.1``, installed with the
driver), answers for any device by PCI bus id without a context: ``nvmlInit_v2``,
``nvmlDeviceGetHandleByPciBusId_v2`` and ``nvmlDeviceGetMemoryInfo_v2`` through
``cuda.bindings.nvml`` (cuda-bindings 13; older bindings have no NVML module).

``nvmlMemory_v2_t.free`` is the memory no process holds: what ``cudaMemGetInfo`` reports
as free, less nothing of this process's own context (NVML counts every process).
The link between two GPUs (:func:`link`) is named as ``nvidia-smi topo -m`` names it
(:data:`aml_core.topology.LINKS`): ``NV<n>`` for n active NVLinks between them
(``nvmlDeviceGetNvLinkState`` and ``nvmlDeviceGetNvLinkRemotePciInfo_v2`` over every
link; GPUs whose links all go to NVSwitches, as on HGX boards, reach each other over the
fewer of their switch links), else their PCIe path from
``nvmlDeviceGetTopologyCommonAncestor``.

Everything that goes wrong (no module, no library, a driver that refuses) makes the
answer "not known" (None), with the reason kept in :func:`unavailable_reason`: free
memory and links are a report, and a report never fails the probe.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

__all__ = ["free_memory", "link", "unavailable_reason"]

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


#: nvmlGpuTopologyLevel_t → the name nvidia-smi topo -m gives it.
_LEVELS = {10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_NVLINK_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
_FEATURE_ENABLED = 1


def link(pci_bus_id: str, peer_bus_id: str) -> str | None:
    """The link between the GPUs at two PCI bus ids: ``"NV<n>"``, or the PCIe path
    (``"PIX"``, ``"PXB"``, ``"PHB"``, ``"NODE"``, ``"SYS"``); None when NVML cannot say."""
    nvml = _load()
    if nvml is None:
        return None
    try:
        handle = nvml.device_get_handle_by_pci_bus_id_v2(pci_bus_id)
        peer = nvml.device_get_handle_by_pci_bus_id_v2(peer_bus_id)
    except Exception:
        return None
    direct, to_switch = _nvlinks(nvml, handle, peer_bus_id)
    if direct == 0 and to_switch:
        direct = min(to_switch, _nvlinks(nvml, peer, pci_bus_id)[1])
    if direct:
        return f"NV{direct}"
    try:
        level = int(nvml.device_get_topology_common_ancestor(handle, peer))
    except Exception:  # NotSupported (Windows, some VMs): not known
        return None
    return _LEVELS.get(level)


def _nvlinks(nvml: Any, handle: Any, peer_bus_id: str) -> tuple[int, int]:
    """(active NVLinks from ``handle`` to the GPU at ``peer_bus_id``, active NVLinks from
    ``handle`` to NVSwitches). A GPU without NVLink refuses the first query: (0, 0)."""
    from aml_core.topology import normalize_bus_id

    peer = normalize_bus_id(peer_bus_id)
    direct = switched = 0
    for index in range(int(getattr(nvml, "NVLINK_MAX_LINKS", 18))):
        try:
            if int(nvml.device_get_nvlink_state(handle, index)) != _FEATURE_ENABLED:
                continue
        except Exception:  # NotSupported (no NVLink), or no such link on this GPU
            continue
        try:
            if int(nvml.device_get_nvlink_remote_device_type(handle, index)) == _NVLINK_SWITCH:
                switched += 1
                continue
        except Exception:  # an older driver without the query: look at the remote's bus
            pass
        try:
            remote: Any = nvml.device_get_nvlink_remote_pci_info_v2(handle, index)
        except Exception:
            continue
        if normalize_bus_id(str(remote.bus_id)) == peer:
            direct += 1
    return direct, switched


def unavailable_reason() -> str | None:
    """Why NVML gave no answer at all (None: it is usable, or was not tried yet)."""
    return _why_not
