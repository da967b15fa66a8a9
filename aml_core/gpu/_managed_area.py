"""The managed-memory methods of a GPU area (docs/aml-contract.md#hip-managed-memory):
prefetch, advise, range attributes and stream attach of a buffer of an ALLOC_UNIFIED
area, each checking the area's kind and the buffer, then calling :mod:`.managed`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, overload

from ..area import Area
from ..buffer import Buffer
from ..errors import AMLNotSupported
from ..specs import Kind
from . import managed
from .runtime import Runtime

__all__ = ["ManagedAreaMethods"]


class ManagedAreaMethods(Area):
    """What :class:`~aml_core.gpu.area.GpuArea` offers for managed memory (an area of
    another kind raises ENOTSUP)."""

    runtime: Runtime

    def _managed(self, buffer: Buffer) -> None:
        if self.kind is not Kind.MANAGED:
            raise AMLNotSupported(f"this {self.kind.value} area has no managed memory (needs ALLOC_UNIFIED)")
        self._lookup(buffer, None)

    def prefetch(
        self,
        buffer: Buffer,
        location: int | str,
        *,
        offset: int = 0,
        size: int | None = None,
        stream: Any = None,
    ) -> None:
        """Migrate (part of) a managed buffer to a device or ``"host"`` on a stream."""
        self._managed(buffer)
        managed.prefetch(self.runtime, buffer, location, offset=offset, size=size, stream=stream)

    def advise(
        self,
        buffer: Buffer,
        advice: managed.Advice | int,
        location: int | str,
        *,
        offset: int = 0,
        size: int | None = None,
    ) -> None:
        """Advise the runtime about (part of) a managed buffer."""
        self._managed(buffer)
        managed.advise(self.runtime, buffer, advice, location, offset=offset, size=size)

    @overload
    def range_attribute(
        self,
        buffer: Buffer,
        attribute: Literal[managed.RangeAttribute.READ_MOSTLY],
        *,
        offset: int = 0,
        size: int | None = None,
    ) -> bool: ...
    @overload
    def range_attribute(
        self,
        buffer: Buffer,
        attribute: Literal[managed.RangeAttribute.ACCESSED_BY],
        *,
        offset: int = 0,
        size: int | None = None,
    ) -> tuple[int, ...]: ...
    @overload
    def range_attribute(
        self,
        buffer: Buffer,
        attribute: Literal[
            managed.RangeAttribute.PREFERRED_LOCATION,
            managed.RangeAttribute.LAST_PREFETCH_LOCATION,
            managed.RangeAttribute.PREFERRED_LOCATION_ID,
            managed.RangeAttribute.LAST_PREFETCH_LOCATION_ID,
        ],
        *,
        offset: int = 0,
        size: int | None = None,
    ) -> int: ...
    @overload
    def range_attribute(
        self,
        buffer: Buffer,
        attribute: managed.RangeAttribute | int,
        *,
        offset: int = 0,
        size: int | None = None,
    ) -> managed.RangeValue: ...
    def range_attribute(
        self,
        buffer: Buffer,
        attribute: managed.RangeAttribute | int,
        *,
        offset: int = 0,
        size: int | None = None,
    ) -> managed.RangeValue:
        """One attribute of a managed range, as a Python value (typed per attribute:
        READ_MOSTLY a bool, ACCESSED_BY a tuple of devices, the locations an int)."""
        self._managed(buffer)
        return managed.range_attribute(self.runtime, buffer, attribute, offset=offset, size=size)

    def range_attributes(
        self,
        buffer: Buffer,
        attributes: Iterable[managed.RangeAttribute | int],
        *,
        offset: int = 0,
        size: int | None = None,
    ) -> dict[managed.RangeAttribute, managed.RangeValue]:
        """Several attributes of a managed range, in one native call."""
        self._managed(buffer)
        return managed.range_attributes(self.runtime, buffer, attributes, offset=offset, size=size)

    def attach(
        self, buffer: Buffer, stream: Any, flags: managed.AttachFlags | int = managed.AttachFlags.SINGLE
    ) -> None:
        """Attach a managed buffer to a stream."""
        self._managed(buffer)
        managed.stream_attach(self.runtime, buffer, stream, flags)
