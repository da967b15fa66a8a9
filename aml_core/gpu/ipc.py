"""Inter-process sharing of device memory (docs/aml-contract.md#hip-ipc), written once for CUDA and HIP.

Exporter side: ``area.ipc_export(buffer)`` returns an :class:`IpcExport`; its
``handle`` is a picklable :class:`IpcHandle` to send to another process. Only the base
of a live device allocation can be exported; once the buffer is freed (or the export
closed) the export raises, and a new allocation gets a new handle. The export keeps its
buffer alive; the area remembers its exports weakly (to close them when the buffer is
freed), so a buffer dropped with its export is freed by the garbage collector like any
other: keep one of them while other processes use the memory.

Importer side: ``backend.ipc_open(handle)`` maps the memory into the caller's current
device, as hipIpcOpenMemHandle does (with lazy peer access: another device's memory is reached by
peer access), and returns a :class:`~aml_core.buffer.Buffer` of the backend's import
area whose ``device`` is the exporter's device index. Opening the same handle twice from
one device maps it once (an importer-side cache, as UMF has): the same Buffer comes back
and must be closed as many times as it was opened; a Buffer dropped without being closed
is unmapped (every open of it) when it is garbage collected. The cache is per device, as
the runtimes map a handle once per device context: opening it from another current device
maps it again there (another address, another Buffer), and each mapping is closed with
its device selected. Importers must close before the exporter frees (HIP: freeing first
is undefined behaviour).

A block of a pool (``pool.ipc_export(buf)``) is shared as its slab's native handle plus
the block's ``offset``: the importer maps each slab once (runtimes refuse to open one
allocation twice in a process) and gives each block its own Buffer at
``base + offset``; the slab is unmapped when its last block is closed.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING, TypedDict

import attrs

from .._buffer import AreaLock
from ..area import Area, compiled_mmap
from ..buffer import Buffer, native_as
from ..errors import AMLError, AMLFailure, AMLNotSupported, AMLValueError
from ..ipc import MAX_HANDLE_SIZE, IpcExport, IpcHandle, importable
from ..specs import Capability, Kind, format_size
from ..stream import StreamLike
from ._copies import CopyingArea
from ._device_area import DeviceMemoryArea
from .devices import selected_device
from .runtime import Group

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = [
    "MAX_HANDLE_SIZE",
    "ExportRegistry",
    "IpcExport",
    "IpcHandle",
    "IpcImportArea",
    "IpcOptions",
    "close_exports",
    "export_from",
]

#: An area's exports by buffer address, held weakly (the export holds the buffer).
ExportRegistry = dict[int, list["weakref.ref[IpcExport]"]]


def close_exports(exports: ExportRegistry, ptr: int) -> None:
    """Close the exports of the buffer at ``ptr`` that are still alive (its _free)."""
    for ref in exports.pop(ptr, ()):
        export = ref()
        if export is not None:
            export.close()


def export_from(area: Area, runtime: Runtime, exports: ExportRegistry, buffer: Buffer | int) -> IpcExport:
    """``area.ipc_export(buffer)`` of a device area, written once (aml_core.gpu.GpuArea,
    aml_hsa.PoolArea): look the live buffer up, wrap the runtime's native handle in a
    picklable :class:`IpcHandle`, and remember the export weakly in ``exports`` (closed
    when the buffer is freed; the area does not keep the buffer alive through it)."""
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
        exports.setdefault(buf.ptr, []).append(weakref.ref(export))
        return export


@attrs.frozen
class IpcOptions:
    """mmap options of the import area: the handle to open, and the importing device (the
    current device of the opening thread, in whose context the handle is mapped)."""

    handle: IpcHandle | None = None
    device: int = 0


class IpcOptionsDict(TypedDict, total=False):
    """:class:`IpcOptions` as a mapping, typed."""

    handle: IpcHandle | None
    device: int


#: (native handle, offset, importing device): one Buffer per key.
_Key = tuple[bytes, int, int]


@attrs.frozen
class _Imported:
    tag: str
    #: one Buffer per key; one mapping per (native handle, importing device).
    key: _Key


class IpcImportArea(DeviceMemoryArea, CopyingArea):
    """Opened IPC handles of one backend in this process, cached by handle."""

    options_type = IpcOptions

    @compiled_mmap
    def mmap(
        self, size: int, options: IpcOptions | IpcOptionsDict | None = None, *, stream: StreamLike = None
    ) -> Buffer:
        """Open an IPC handle as a buffer of ``size`` bytes (what :func:`aml_core.ipc_open`
        does: call that instead). One native mapping per (handle, importing device) is
        shared by every open of it and closed with the last.

        Options (:class:`IpcOptions`, or an :class:`IpcOptionsDict` of its keys):

        - ``handle``: the :class:`~aml_core.ipc.IpcHandle` to open (required).
        - ``device``: the importing device, current when the handle is opened (default 0).

        Errors of the import area: :class:`~aml_core.errors.AMLValueError` without a
        handle, for a handle that claims more bytes than the exporter's allocation has,
        or one that names memory already open here as another buffer;
        :class:`~aml_core.errors.AMLFailure` when opening "succeeds" with NULL; the
        runtime's errors by its error table."""
        return super().mmap(size, options)

    def __init__(self, runtime: Runtime) -> None:
        """The import area of ``runtime``'s backend in this process (one per backend:
        ``GpuBackend.ipc_open`` makes it); ``runtime`` must provide the IPC group."""
        super().__init__(runtime, None, Capability.IPC)
        self._ops = runtime.require(Group.IPC)
        #: (handle data, offset, importing device) -> the address of its open Buffer (tracked
        #: by the area, not kept alive here: a Buffer dropped unclosed is unmapped by its
        #: finalizer).
        self._by_key: dict[_Key, int] = {}
        self._opens: dict[int, int] = {}
        # AreaLocks: their holders count as inside the area, so the GC-driven _free of a
        # dropped import never runs under them (nor waits for them).
        self._open_lock = AreaLock(self, threading.RLock())
        #: (native handle, importing device) -> [mapped base, buffers using the mapping]
        self._mappings: dict[tuple[bytes, int], list[int]] = {}
        self._map_lock = AreaLock(self, threading.RLock())
        #: (mapped base, importing device) of mappings an error path opened and could not
        #: close: kept for close() to retry, never dropped untracked.
        self._unclosed: list[tuple[int, int]] = []

    def open(self, handle: IpcHandle) -> Buffer:
        """Map a handle exported by another process into the current device (cached: one
        mapping per handle and importing device)."""
        handle = importable(handle, self.backend)
        count = self._runtime.device_count()
        if handle.device >= count:
            raise AMLValueError(
                f"the IPC handle's device {handle.device} does not exist here ({count} devices)"
            )
        # One Buffer per (native handle, offset, importing device): a handle that names an
        # open one with another size or device is tampered (mapping it again would give a
        # second buffer at a live address).
        importer = self._runtime.get_device()
        key = (handle.data, handle.offset, importer)
        with self._open_lock:
            self._check_open()
            ptr = self._by_key.get(key)
            buf = None if ptr is None else self._tracked(ptr)
            if buf is not None and self._settle(buf):
                # Dropped and waiting for its GC-driven unmap: that runs now (here is a
                # safe point), and a new Buffer is opened; a failed unmap keeps it live.
                buf = buf if self._is_live(buf) else None
            if buf is not None and not buf.freed:
                if buf.size != handle.size or buf.device != handle.device:
                    raise AMLValueError(
                        f"this IPC handle claims {format_size(handle.size, exact=True)} on device "
                        f"{handle.device}; the allocation it names is open here as "
                        f"{format_size(buf.size, exact=True)} on device {buf.device}"
                    )
                self._opens[buf.ptr] += 1
                return buf
            buf = self.mmap(handle.size, IpcOptions(handle, importer))
            self._by_key[key] = buf.ptr
            self._opens[buf.ptr] = 1
            return buf

    def _memcpy(self, dst: int, src: int, size: int) -> None:
        self._runtime.require(Group.ALLOCATION).memcpy(dst, src, size)

    def _written(self) -> None:
        self._runtime.synchronize()

    def open_count(self, buffer: Buffer) -> int:
        """How many opens of this mapping are not yet closed."""
        return self._opens.get(buffer.ptr, 0) if not buffer.freed else 0

    def _allocate(self, size: int, options: IpcOptions) -> Buffer:
        handle = options.handle
        if handle is None:
            raise AMLValueError("the IPC import area maps handles: use ipc_open(handle)")
        where = (handle.data, options.device)
        with self._map_lock:
            mapping = self._mappings.get(where)
            if mapping is None:
                end = handle.offset + handle.size
                base = self._ops.ipc_open_handle(handle.data, end)
                if base == 0:
                    raise AMLFailure(
                        f"{self.backend}: opening the IPC handle reported success but returned NULL"
                    )
                try:
                    # The size the exporter exported, where the runtime can tell (a tampered
                    # handle may claim more than was exported: reading past it would crash).
                    actual = self._ops.ipc_mapped_size(base)
                    if actual is not None and actual < end:
                        raise AMLValueError(
                            f"the IPC handle claims {format_size(handle.size, exact=True)} at offset "
                            f"{handle.offset}; the exported allocation has {format_size(actual, exact=True)}"
                        )
                except BaseException as exc:
                    self._close_noting(base, options.device, exc)
                    raise
                mapping = self._mappings[where] = [base, 0]
            mapping[1] += 1
        try:
            ptr = mapping[0] + handle.offset
            if self._tracked(ptr) is not None:  # the area would refuse it, and keep the count
                raise AMLValueError(
                    f"this IPC handle names memory open here as another buffer (0x{ptr:x}): tampered"
                )
            return self._new_buffer(
                ptr,
                size,
                host_accessible=False,
                dl_device=(self._runtime.traits.dl_device, handle.device),
                native=_Imported("ipc", (handle.data, handle.offset, options.device)),
                device=handle.device,
            )
        except BaseException as exc:  # never keep a mapping that no buffer tracks
            with self._map_lock:
                mapping[1] -= 1
                if mapping[1] == 0:
                    del self._mappings[where]
                    self._close_noting(mapping[0], options.device, exc)
            raise

    def munmap(self, buffer: Buffer | int, size: int | None = None, *, stream: object = None) -> None:
        """Close one open of the mapping; the last close unmaps it (an import orders no
        work on streams: a stream is refused, AMLNotSupported)."""
        if stream is not None:
            self._no_streams()
        with self._open_lock:
            with self._lock:
                self._check_open()
                buf = self._lookup(buffer, size)
            if self._opens.get(buf.ptr, 1) > 1:
                self._opens[buf.ptr] -= 1
                return
            super().munmap(buf)  # _free forgets its opens

    def _free(self, buffer: Buffer) -> None:
        """Unmap one Buffer (every open of it: munmap's last close, close(), or the
        finalizer of a Buffer dropped unclosed); the last Buffer over a mapping closes it,
        in the context it was opened in."""
        key = native_as(buffer, _Imported).key
        data, _, device = key
        with self._open_lock, self._map_lock:
            mapping = self._mappings[(data, device)]
            if mapping[1] > 1:
                mapping[1] -= 1
            else:
                with selected_device(self._runtime, device):  # raises: the mapping stays, counted
                    self._ops.ipc_close_handle(mapping[0])
                del self._mappings[(data, device)]
            self._opens.pop(buffer.ptr, None)
            if self._by_key.get(key) == buffer.ptr:
                del self._by_key[key]

    def _close_noting(self, base: int, device: int, exc: BaseException) -> None:
        """Close a mapping on an error path (the caller holds the map lock); if that fails
        too, note it on ``exc`` and keep the mapping for :meth:`close` to retry."""
        try:
            self._ops.ipc_close_handle(base)
        except AMLError as also:
            exc.add_note(f"closing the IPC mapping failed too: {also}; close() retries it")
            self._unclosed.append((base, device))

    def close(self) -> None:
        """Close every open mapping (see :meth:`Area.close`), and retry the mappings an
        error path could not close; one that fails again stays kept and its error is
        raised (close() again retries it)."""
        with self._open_lock:
            self._opens.clear()
            self._by_key.clear()
        first: AMLError | None = None
        try:
            super().close()
        except AMLError as exc:
            first = exc
        with self._map_lock:
            kept: list[tuple[int, int]] = []
            for base, device in self._unclosed:
                try:
                    with selected_device(self._runtime, device):
                        self._ops.ipc_close_handle(base)
                except AMLError as exc:
                    kept.append((base, device))
                    first = first or exc
            self._unclosed = kept
        if first is not None:
            raise first
