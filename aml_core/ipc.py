"""Inter-process sharing, for any backend: the handle that crosses the process boundary
and the exporter's side of a shared buffer.

The contract (docs/backend-authoring.md#ipc), which every backend that declares
:attr:`~aml_core.specs.Capability.IPC` keeps, GPU or not:

* ``area.ipc_export(buffer)`` takes a live buffer of the area (the Buffer or its base
  pointer) and returns an :class:`IpcExport`; its ``handle`` is an :class:`IpcHandle`,
  a frozen, picklable record whose ``backend`` names the registered backend that opens
  it, with the ``device``, the ``size`` in bytes, the native handle bytes (``data``) and
  the exporter's ``pid``.
* ``aml_core.ipc_open(handle)`` in another process finds the backend by
  ``handle.backend`` and calls its descriptor's ``ipc_open``: the result is a
  :class:`~aml_core.buffer.Buffer` of ``handle.size`` bytes over the same memory,
  belonging to an import area of the backend (not to any area the user made);
  ``buffer.area.munmap(buffer)`` closes it.
* Writes through either side are visible to the other once the writer's work is done;
  the exporter frees only after every importer closed.

:mod:`aml_core.gpu` re-exports both names (``aml_core.gpu.IpcHandle``), as before.
"""

from __future__ import annotations

import os

import attrs

from . import checks
from .buffer import Buffer
from .errors import AMLTypeError, AMLValueError

__all__ = ["importable", "revalidate", "MAX_HANDLE_SIZE", "IpcExport", "IpcHandle"]

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


def _offset(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    checks.size(value, "the IPC handle's offset", zero=True)


def _pid(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if checks.c_int(value, "the IPC handle's pid") <= 0:
        raise AMLValueError(f"the IPC handle's pid must be positive, got {value}")


def _backend(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str):
        raise AMLTypeError(f"the IPC handle's backend is a str, not {type(value).__name__}")


@attrs.frozen
class IpcHandle:
    """What crosses the process boundary (picklable): the backend that opens it, the
    device (0 for a backend without devices), the size in bytes, the native handle bytes
    (1..:data:`MAX_HANDLE_SIZE`; 64 for CUDA and HIP, a file path or a name for host
    shared memory), the exporter's pid, and the offset of the shared bytes in the native
    allocation (a pooled block's in its slab; 0 otherwise). Every field is checked when the
    handle is made (or unpickled)."""

    backend: str = attrs.field(validator=_backend)
    device: int = attrs.field(validator=_device)
    size: int = attrs.field(validator=_size)
    data: bytes = attrs.field(converter=_handle_bytes, repr=lambda d: d[:8].hex() + "...")
    pid: int = attrs.field(validator=_pid)
    offset: int = attrs.field(default=0, validator=_offset)

    # Pickles: a dict of the fields (what attrs writes for a slotted class), read by name.
    # aml 0.2's handles have no ``offset`` (it named whole allocations): they are read with
    # offset 0, their meaning. Any other set of fields is a handle of an aml version this
    # one cannot read: AMLValueError naming both, never a half-built handle.
    def __getstate__(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in _FIELDS}

    def __setstate__(self, state: object) -> None:
        if isinstance(state, tuple):  # attrs before 22.2 pickled slotted classes as tuples
            fields = _FIELDS if len(state) == len(_FIELDS) else _FIELDS_0_2
            state = dict(zip(fields, state, strict=True)) if len(state) == len(fields) else None
        names = set(state) if isinstance(state, dict) else None
        if names == set(_FIELDS_0_2):
            assert isinstance(state, dict)
            state = {**state, "offset": 0}
        elif names != set(_FIELDS):
            from . import __version__

            found = sorted(map(str, names)) if names is not None else type(state).__name__
            raise AMLValueError(
                f"this IPC handle was made by an aml version that aml {__version__} cannot read "
                f"(its fields: {found}); aml {__version__} reads the handles of aml 0.2 and later "
                f"({', '.join(_FIELDS)}): export it again with this aml version"
            )
        assert isinstance(state, dict)
        for name in _FIELDS:
            object.__setattr__(self, name, state[name])


#: The fields of an IpcHandle, in order; aml 0.2's lacked ``offset``.
_FIELDS = tuple(f.name for f in attrs.fields(IpcHandle))
_FIELDS_0_2 = tuple(name for name in _FIELDS if name != "offset")


def revalidate(handle: IpcHandle) -> None:
    """Check every field of a handle again, as an importer must: unpickling (or
    ``object.__setattr__``) bypasses the validators and the data converter."""
    attrs.validate(handle)
    _handle_bytes(handle.data)


def importable(handle: object, backend: str) -> IpcHandle:
    """The checks every importer makes before it opens ``handle`` for ``backend``: an
    :class:`IpcHandle` (else :class:`AMLTypeError`), every field valid again
    (:func:`revalidate`), exported by ``backend`` and by another process (else
    :class:`AMLValueError`)."""
    if not isinstance(handle, IpcHandle):
        raise AMLTypeError(f"ipc_open takes an IpcHandle, not {type(handle).__name__}")
    revalidate(handle)
    if handle.backend != backend:
        raise AMLValueError(f"this handle was exported by {handle.backend!r}, not {backend!r}")
    if handle.pid == os.getpid():
        raise AMLValueError(
            "an IPC handle cannot be opened in the process that exported it; use the buffer itself"
        )
    return handle


class IpcExport:
    """The exporter's side of a shared buffer."""

    def __init__(self, buffer: Buffer, handle: IpcHandle) -> None:
        """``buffer`` — the exported live buffer; ``handle`` — its :class:`IpcHandle`.
        Made by a backend's ``area.ipc_export(buffer)``."""
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
