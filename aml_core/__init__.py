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

from typing import TYPE_CHECKING

# First: imports the Cython modules, or says how to build them. In an unbuilt source tree
# (the clone's root as the current directory) it hands over to the installed aml-core of the
# same version: sys.modules["aml_core"] is then the installed package, which this import
# returns, and the relative imports below find its submodules (see _compiled).
from . import _compiled
from .area import Area
from .buffer import Buffer, DLDeviceType
from .descriptor import BackendDescriptor, ProbeResult
from .dmabuf import DmabufHandle, export_dmabuf
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
from .ipc import IpcExport, IpcHandle
from .memory import memory_stats, memory_summary
from .pool import Pool, PoolStats

if TYPE_CHECKING:  # type checkers see the factory (a callable module is beyond them)
    from .pool import pool as pool
else:  # the module, callable as its factory: aml_core.pool(area) and import aml_core.pool as p
    from . import pool
from .registry import area, backends, choose, default_registry, register, unregister
from .specs import AreaSpec, AreaStats, BackendStatus, Capability, DeviceInfo, Kind


def _version() -> str:
    """The version, written once in VERSION at the repository's root: from the installed
    distribution's metadata, else (an uninstalled source tree) from the VERSION beside the package."""
    from importlib import metadata

    try:
        return metadata.version("aml-core")
    except metadata.PackageNotFoundError:
        pass
    root = _compiled.source_root()
    version = _compiled.source_version(root) if root is not None else None
    return f"{version}+source" if version else "0+unknown"


__version__ = _version()

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
    "DmabufHandle",
    "ErrorCode",
    "ErrorTable",
    "IpcExport",
    "IpcHandle",
    "Kind",
    "NativeCause",
    "Pool",
    "PoolStats",
    "ProbeResult",
    "area",
    "backends",
    "choose",
    "export_dmabuf",
    "hookimpl",
    "ipc_open",
    "memory_stats",
    "memory_summary",
    "pool",
    "register",
    "strerror",
    "unregister",
]


def ipc_open(handle: IpcHandle) -> Buffer:
    """Open an IPC handle exported by another process (``area.ipc_export(buf).handle``)
    with the backend it names (``handle.backend``): a buffer of ``handle.size`` bytes
    over the same memory, in that backend's import area (close it with
    ``buf.area.munmap(buf)``). :class:`AMLTypeError` for anything but a handle,
    :class:`AMLNotSupported` for a backend that does not open IPC handles."""
    name = getattr(handle, "backend", None)
    if not isinstance(name, str):
        raise AMLTypeError(f"ipc_open takes an IPC handle exported by aml, not {type(handle).__name__}")
    desc = default_registry().descriptor(name)
    if desc.ipc_open is None:
        raise AMLNotSupported(f"backend {name!r} does not open IPC handles")
    return desc.ipc_open(handle)
