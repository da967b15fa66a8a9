"""aml: place, advise, map and share memory on heterogeneous nodes.

Quick start::

    import aml_core

    with aml_core.area(kind="device") as area:      # the best backend for device memory
        buf = area.mmap(1 << 20)
        ...                                          # hand it to CuPy/PyTorch via DLPack
        area.munmap(buf)

    for status in aml_core.backends():               # what is installed, and why not
        print(status.name, status.available, status.reason)
"""

from __future__ import annotations

from typing import Any

from .area import Area
from .buffer import Buffer, DLDeviceType
from .descriptor import BackendDescriptor, ProbeResult
from .errors import (
    AMLBusyError,
    AMLDomainError,
    AMLError,
    AMLFailure,
    AMLMemoryError,
    AMLNotSupported,
    AMLPermissionError,
    AMLTypeError,
    AMLValueError,
    ErrorCode,
    ErrorTable,
    NativeCause,
    strerror,
)
from .hookspecs import hookimpl
from .pool import Pool, PoolStats, pool
from .registry import area, backends, choose, default_registry
from .specs import AreaSpec, AreaStats, BackendStatus, Capability, DeviceInfo, Kind

__version__ = "0.1.0"

__all__ = [
    "AMLBusyError",
    "AMLDomainError",
    "AMLError",
    "AMLFailure",
    "AMLMemoryError",
    "AMLNotSupported",
    "AMLPermissionError",
    "AMLTypeError",
    "AMLValueError",
    "Area",
    "AreaSpec",
    "AreaStats",
    "BackendDescriptor",
    "BackendStatus",
    "Buffer",
    "Capability",
    "DLDeviceType",
    "DeviceInfo",
    "ErrorCode",
    "ErrorTable",
    "Kind",
    "NativeCause",
    "Pool",
    "PoolStats",
    "ProbeResult",
    "area",
    "backends",
    "choose",
    "hookimpl",
    "ipc_open",
    "pool",
    "strerror",
]


def ipc_open(handle: Any) -> Buffer:
    """Open an IPC handle exported by another process, with the backend that made it."""
    name = getattr(handle, "backend", None)
    if not isinstance(name, str):
        raise AMLTypeError(f"ipc_open takes an IPC handle exported by aml, not {type(handle).__name__}")
    desc = default_registry().descriptor(name)
    if desc.ipc_open is None:
        raise AMLNotSupported(f"backend {name!r} does not open IPC handles")
    return desc.ipc_open(handle)
