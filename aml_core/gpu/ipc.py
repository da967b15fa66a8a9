"""Inter-process sharing of device memory (docs/aml-contract.md#hip-ipc), written once for CUDA and HIP.

Exporter side: ``area.ipc_export(buffer)`` returns an :class:`IpcExport`; its
``handle`` is a picklable :class:`IpcHandle` to send to another process. Only the base
of a live device allocation can be exported; once the buffer is freed (or the export
closed) the export raises, and a new allocation gets a new handle.

Importer side: ``backend.ipc_open(handle)`` maps the memory into the caller's current
device, as hipIpcOpenMemHandle does (with lazy peer access: another device's memory is reached by
peer access), and returns a :class:`~aml_core.buffer.Buffer` of the backend's import
area whose ``device`` is the exporter's device index. Opening the
same handle twice in one process maps it once (an importer-side cache, as UMF has): the
same Buffer comes back and must be closed as many times as it was opened. Importers must
close before the exporter frees (HIP: freeing first is undefined behaviour).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

import attrs

from .. import checks
from ..area import Area
from ..buffer import Buffer
from ..errors import AMLError, AMLFailure, AMLNotSupported, AMLTypeError, AMLValueError
from ..interop import cuda_array_interface
from ..specs import Capability, Kind
from .runtime import Group

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["MAX_HANDLE_SIZE", "IpcExport", "IpcHandle", "IpcImportArea", "IpcOptions", "export_from"]

#: The largest native handle an IpcHandle carries (each runtime checks its exact size).
MAX_HANDLE_SIZE = 1024


def _handle_bytes(value: object) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise AMLTypeError(f"an IPC handle's data is bytes, not {type(value).__name__}")
    data = bytes(value)
    if not 0 < len(data) <= MAX_HANDLE_SIZE:
        raise AMLValueError(f"an IPC handle's data is 1..{MAX_HANDLE_SIZE} bytes, got {len(data)}")
    return data


def _device(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    checks.device(value, "the IPC handle's device")


def _size(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    checks.size(value, "the IPC handle's size")


def _pid(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if checks.c_int(value, "the IPC handle's pid") <= 0:
        raise AMLValueError(f"the IPC handle's pid must be positive, got {value}")


def _backend(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str):
        raise AMLTypeError(f"the IPC handle's backend is a str, not {type(value).__name__}")


@attrs.frozen
class IpcHandle:
    """What crosses the process boundary (picklable): the backend, the device, the
    size, the native handle (``traits.ipc_handle_size`` bytes: 64 for CUDA and HIP) and
    the exporter's pid. Every field is checked when the handle is made (or unpickled)."""

    backend: str = attrs.field(validator=_backend)
    device: int = attrs.field(validator=_device)
    size: int = attrs.field(validator=_size)
    data: bytes = attrs.field(converter=_handle_bytes, repr=lambda d: d[:8].hex() + "...")
    pid: int = attrs.field(validator=_pid)


class IpcExport:
    """The exporter's side of a shared buffer."""

    def __init__(self, buffer: Buffer, handle: IpcHandle) -> None:
        self._buffer = buffer
        self._handle = handle
        self._closed = False

    @property
    def handle(self) -> IpcHandle:
        """The picklable handle; raises once the export was closed or its buffer freed."""
        # Freeing a buffer also closes its exports: say the more useful thing first.
        if self._buffer.freed:
            raise AMLValueError(f"the exported buffer was freed ({self._buffer!r}); export a live buffer")
        if self._closed:
            raise AMLValueError("this IPC export was closed")
        return self._handle

    @property
    def buffer(self) -> Buffer:
        return self._buffer

    def close(self) -> None:
        """Stop handing out this export (importers keep their mappings)."""
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed or self._buffer.freed

    def __enter__(self) -> IpcExport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<aml IpcExport of {self._buffer!r}{' closed' if self.closed else ''}>"


def export_from(
    area: Area, runtime: Runtime, exports: dict[int, list[IpcExport]], buffer: Buffer | int
) -> IpcExport:
    """``area.ipc_export(buffer)`` of a device area, written once (aml_core.gpu.GpuArea,
    aml_hsa.PoolArea): look the live buffer up, wrap the runtime's native handle in a
    picklable :class:`IpcHandle`, and remember the export in ``exports`` (closed when the
    buffer is freed)."""
    if area.kind is not Kind.DEVICE:
        raise AMLNotSupported(f"IPC shares device memory; this is a {area.kind.value} area")
    with area._lock:
        area._check_open()
        buf = area._lookup(buffer, None)
        data = runtime.require(Group.IPC).ipc_get_handle(buf.ptr, buf.size)
        handle = IpcHandle(
            backend=area.backend, device=buf.device or 0, size=buf.size, data=data, pid=os.getpid()
        )
        export = IpcExport(buf, handle)
        exports.setdefault(buf.ptr, []).append(export)
        return export


@attrs.frozen
class IpcOptions:
    """mmap options of the import area: the handle to open."""

    handle: IpcHandle | None = None


@attrs.frozen
class _Imported:
    tag: str
    key: bytes


class IpcImportArea(Area):
    """Opened IPC handles of one backend in this process, cached by handle."""

    options_type = IpcOptions

    def __init__(self, runtime: Runtime) -> None:
        super().__init__(
            backend=runtime.traits.name,
            kind=Kind.DEVICE,
            device=None,
            capabilities=Capability.IPC | Capability.DLPACK | Capability.CUDA_ARRAY_INTERFACE,
        )
        self._runtime = runtime
        self._ops = runtime.require(Group.IPC)
        self._by_key: dict[bytes, Buffer] = {}
        self._opens: dict[int, int] = {}
        self._open_lock = threading.Lock()

    def open(self, handle: IpcHandle) -> Buffer:
        """Map a handle exported by another process (cached: one mapping per handle)."""
        if not isinstance(handle, IpcHandle):
            raise AMLTypeError(f"ipc_open takes an IpcHandle, not {type(handle).__name__}")
        # Every field again: unpickling (or object.__setattr__) bypasses the validators.
        attrs.validate(handle)
        _handle_bytes(handle.data)
        if handle.backend != self.backend:
            raise AMLValueError(f"this handle was exported by {handle.backend!r}, not {self.backend!r}")
        if handle.pid == os.getpid():
            raise AMLValueError(
                "an IPC handle cannot be opened in the process that exported it; use the buffer itself"
            )
        count = self._runtime.device_count()
        if handle.device >= count:
            raise AMLValueError(
                f"the IPC handle's device {handle.device} does not exist here ({count} devices)"
            )
        with self._open_lock:
            self._check_open()
            buf = self._by_key.get(handle.data)
            if buf is not None and not buf.freed:
                if buf.size != handle.size or buf.device != handle.device:
                    raise AMLValueError(
                        f"this IPC handle claims {handle.size} bytes on device {handle.device}; the "
                        f"allocation it names is open here as {buf.size} bytes on device {buf.device}"
                    )
                self._opens[buf.ptr] += 1
                return buf
            buf = self.mmap(handle.size, IpcOptions(handle))
            self._by_key[handle.data] = buf
            self._opens[buf.ptr] = 1
            return buf

    def open_count(self, buffer: Buffer) -> int:
        """How many opens of this mapping are not yet closed."""
        return self._opens.get(buffer.ptr, 0) if not buffer.freed else 0

    def _allocate(self, size: int, options: IpcOptions) -> Buffer:
        handle = options.handle
        if handle is None:
            raise AMLValueError("the IPC import area maps handles: use ipc_open(handle)")
        ptr = self._ops.ipc_open_handle(handle.data, handle.size)
        if ptr == 0:
            raise AMLFailure(f"{self.backend}: opening the IPC handle reported success but returned NULL")
        try:
            # The size the exporter exported, where the runtime can tell (a tampered handle
            # may claim more than was exported: reading past the mapping would crash).
            actual = self._ops.ipc_mapped_size(ptr)
            if actual is not None and actual < handle.size:
                raise AMLValueError(
                    f"the IPC handle claims {handle.size} bytes; the exported allocation has {actual}"
                )
            return self._new_buffer(
                ptr,
                size,
                host_accessible=False,
                dl_device=(self._runtime.traits.dl_device, handle.device),
                native=_Imported("ipc", handle.data),
                device=handle.device,
            )
        except BaseException as exc:
            try:  # never keep a mapping that no buffer tracks
                self._ops.ipc_close_handle(ptr)
            except AMLError as also:
                exc.add_note(f"closing the IPC mapping failed too: {also}")
            raise

    def munmap(self, buffer: Buffer | int, size: int | None = None) -> None:
        """Close one open of the mapping; the last close unmaps it."""
        with self._open_lock:
            with self._lock:
                self._check_open()
                buf = self._lookup(buffer, size)
            if self._opens.get(buf.ptr, 1) > 1:
                self._opens[buf.ptr] -= 1
                return
            super().munmap(buf)
            self._opens.pop(buf.ptr, None)
            self._by_key.pop(buf.native.key, None)

    def _free(self, buffer: Buffer) -> None:
        self._ops.ipc_close_handle(buffer.ptr)

    def _cuda_array_interface(self, buffer: Buffer) -> dict[str, Any] | None:
        return cuda_array_interface(buffer.device_ptr, buffer.size)

    def close(self) -> None:
        with self._open_lock:
            self._opens.clear()
            self._by_key.clear()
        super().close()
