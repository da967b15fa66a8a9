"""One error for a missing driver or device, wherever a GPU backend meets it, and the
selection of a device for one operation (:func:`selected_device`).

Creating an area (``create``, the default areas, ``aml_core.area``), virtual memory and
streams all start by counting devices through :func:`usable_device_count`. A missing
driver or device is ENOTSUP in AML's own error table (``hipErrorNoDevice``,
``hipErrorInsufficientDriver``, ``cudaErrorNoDevice``, ``cudaErrorInsufficientDriver``),
so each of them raises :class:`~aml_core.errors.AMLNotSupported` worded
``"no usable <backend> device: <native reason>"``, with the native cause attached; any
other failure to count devices stays FAILURE, as in ``aml_area_hip_create``
(docs/aml-contract.md#hip-area).
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..errors import AMLError, AMLFailure, AMLNotSupported

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["no_usable_device", "selected_device", "usable_device_count", "usable_runtime"]

_T = TypeVar("_T")


def no_usable_device(backend: str, cause: AMLError | str) -> AMLNotSupported:
    """The one error for a missing driver or device: ``"no usable <backend> device:
    <reason>"``, the native cause of ``cause`` (when an error) attached."""
    if isinstance(cause, str):
        return AMLNotSupported(f"no usable {backend} device: {cause}")
    reason = getattr(cause, "_raw_message", None) or type(cause).__name__
    if reason.startswith(f"no usable {backend} device: "):
        return AMLNotSupported(reason, native=cause.native)
    return AMLNotSupported(f"no usable {backend} device: {reason}", native=cause.native)


def usable_runtime(backend: str, load: Callable[[], _T]) -> _T:
    """``load()`` (a backend's runtime), a missing native library or driver raised as
    :func:`no_usable_device`."""
    try:
        return load()
    except AMLNotSupported as exc:
        raise no_usable_device(backend, exc) from exc


def usable_device_count(runtime: Runtime) -> int:
    """The runtime's device count, at least 1: :class:`AMLNotSupported`
    (:func:`no_usable_device`) when the driver or every device is missing,
    :class:`AMLFailure` when the count cannot be read for another reason."""
    name = runtime.traits.name
    try:
        count = runtime.device_count()
    except AMLNotSupported as exc:
        raise no_usable_device(name, exc) from exc
    except AMLError as exc:
        raise AMLFailure(f"{name} could not provide the number of devices", native=exc.native) from exc
    if count <= 0:
        raise no_usable_device(name, "the runtime reports no device")
    return count


class _Selects(Protocol):
    """What :func:`selected_device` needs of a runtime (a :class:`Runtime` has both)."""

    def get_device(self) -> int: ...
    def _set_device(self, device: int) -> None: ...


class selected_device:
    """``with selected_device(runtime, device) as current:`` makes ``device`` (a checked
    index) the calling thread's current device for the block and restores the caller's
    afterwards, also when the block raises (as ``aml_area_hip_mmap`` does around an
    allocation); ``current`` is the caller's device. No native call when ``device`` is
    already current. A failure to restore is raised (the block's own error, if any, stays
    the one raised, with the restore failure noted). A class, not a generator: GPU areas
    select the device around every allocation."""

    __slots__ = ("_current", "_device", "_runtime")

    def __init__(self, runtime: _Selects, device: int) -> None:
        self._runtime = runtime
        self._device = device

    def __enter__(self) -> int:
        current = self._current = self._runtime.get_device()
        if current != self._device:
            self._runtime._set_device(self._device)
        return current

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        current = self._current
        if current == self._device:
            return
        if exc is None:
            self._runtime._set_device(current)
            return
        try:
            self._runtime._set_device(current)
        except AMLError as restore:
            exc.add_note(f"restoring the caller's device {current} failed too: {restore}")
