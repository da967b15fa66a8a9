"""The memory groups of a GPU runtime (:mod:`aml_core.gpu.runtime`): ``ALLOCATION``
(device, host and registered memory, pointer attributes, copies), ``MANAGED`` (managed
memory, prefetch, advice, range attributes, stream attach) and ``VIRTUAL_MEMORY``
(reserve, create, map, access, export/import an fd, retain), with the values they return.

Each public method checks its arguments (:mod:`aml_core.checks`) and calls the backend's
``_``-method with checked ints.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from .. import checks
from .._buffer import NativeAllocator
from ..errors import AMLValueError

if TYPE_CHECKING:
    from .runtime import RuntimeTraits

__all__ = [
    "CPU_DEVICE",
    "INVALID_DEVICE",
    "AllocationOps",
    "AllocationProperties",
    "ManagedOps",
    "PointerAttributes",
    "VirtualMemoryOps",
]


#: The host as a managed-memory location (cudaCpuDeviceId, hipCpuDeviceId).
CPU_DEVICE = -1
#: "No single location" in range attributes (cudaInvalidDeviceId, hipInvalidDeviceId).
INVALID_DEVICE = -2

#: Access flags both CUDA and HIP define: none, read, read-write.
_ACCESS_FLAGS = frozenset({0, 1, 3})
#: Attach flags both define: global 1, host 2, single 4.
_ATTACH_FLAGS = frozenset({1, 2, 4})
#: Range attribute data is at most this many ints (one per device and the host).
_MAX_ATTRIBUTE_INTS = 4096


@attrs.frozen
class PointerAttributes:
    """What the runtime knows of an address (``cudaPointerGetAttributes``)."""

    #: "device", "host", "managed" or "unregistered".
    memory_type: str
    device: int
    device_pointer: int
    host_pointer: int
    is_managed: bool


@attrs.frozen
class AllocationProperties:
    """Properties of a virtual-memory physical allocation."""

    #: 1 = pinned (the only type CUDA and HIP create here).
    type: int
    location_device: int
    #: Bit mask of shareable handle types (1 = POSIX file descriptor).
    handle_types: int


class AllocationOps(abc.ABC):
    """``ALLOCATION``: device and host memory, registration, attributes and copies."""

    traits: RuntimeTraits

    def malloc(self, size: int) -> int:
        return self._malloc(checks.size(size))

    def free(self, ptr: int) -> None:
        self._free(checks.pointer(ptr))

    def host_alloc(self, size: int, *, portable: bool, mapped: bool) -> int:
        return self._host_alloc(checks.size(size), bool(portable), bool(mapped))

    def free_host(self, ptr: int) -> None:
        self._free_host(checks.pointer(ptr))

    def host_register(self, ptr: int, size: int, *, portable: bool, mapped: bool) -> None:
        self._host_register(checks.pointer(ptr), checks.size(size), bool(portable), bool(mapped))

    def host_unregister(self, ptr: int) -> None:
        self._host_unregister(checks.pointer(ptr))

    def host_device_pointer(self, ptr: int) -> int:
        return self._host_device_pointer(checks.pointer(ptr))

    def pointer_attributes(self, ptr: int) -> PointerAttributes:
        return self._pointer_attributes(checks.pointer(ptr))

    def memcpy(self, dst: int, src: int, size: int) -> None:
        self._memcpy(checks.pointer(dst, "dst"), checks.pointer(src, "src"), checks.size(size))

    def memset(self, ptr: int, value: int, size: int) -> None:
        self._memset(checks.pointer(ptr), checks.byte(value), checks.size(size))

    def native_allocator(self) -> NativeAllocator | None:
        """The compiled allocator of this runtime (:class:`aml_core._buffer.NativeAllocator`:
        the C addresses of its get_device, malloc, free and, if it has them,
        malloc_managed, host_alloc and free_host, with an error hook raising what the
        ``_``-methods raise), which GpuArea installs so that mmap and munmap run in C;
        None (the default): areas call the ``_``-methods. The native calls must be the
        ones the ``_``-methods make (a buffer allocated by one is freed by the other): a
        subclass that replaces one of them gets None (see :func:`replaces_native`)."""
        return None

    @abc.abstractmethod
    def _malloc(self, size: int) -> int: ...
    @abc.abstractmethod
    def _free(self, ptr: int) -> None: ...
    @abc.abstractmethod
    def _host_alloc(self, size: int, portable: bool, mapped: bool) -> int: ...
    @abc.abstractmethod
    def _free_host(self, ptr: int) -> None: ...
    @abc.abstractmethod
    def _host_register(self, ptr: int, size: int, portable: bool, mapped: bool) -> None: ...
    @abc.abstractmethod
    def _host_unregister(self, ptr: int) -> None: ...
    @abc.abstractmethod
    def _host_device_pointer(self, ptr: int) -> int: ...
    @abc.abstractmethod
    def _pointer_attributes(self, ptr: int) -> PointerAttributes: ...
    @abc.abstractmethod
    def _memcpy(self, dst: int, src: int, size: int) -> None: ...
    @abc.abstractmethod
    def _memset(self, ptr: int, value: int, size: int) -> None: ...


class ManagedOps(abc.ABC):
    """``MANAGED``: managed (unified) memory and its advice, prefetch and attributes."""

    traits: RuntimeTraits

    def malloc_managed(self, size: int, *, attach_global: bool) -> int:
        return self._malloc_managed(checks.size(size), bool(attach_global))

    def mem_prefetch(self, ptr: int, size: int, device: int, stream: int) -> None:
        self._mem_prefetch(
            checks.pointer(ptr),
            checks.size(size),
            checks.device(device, host=CPU_DEVICE),
            checks.pointer(stream, "stream", null=True),
        )

    def mem_advise(self, ptr: int, size: int, advice: int, device: int) -> None:
        self._mem_advise(
            checks.pointer(ptr),
            checks.size(size),
            checks.member(advice, self.traits.advices, f"{self.traits.name} advice"),
            checks.device(device, host=CPU_DEVICE),
        )

    def mem_range_attributes(
        self, ptr: int, size: int, requests: Sequence[tuple[int, int]]
    ) -> list[list[int]]:
        """For each (attribute, count) request, ``count`` ints of data."""
        p, n = checks.pointer(ptr), checks.size(size)
        if not requests:
            raise AMLValueError("at least one range attribute is needed")
        checked: list[tuple[int, int]] = []
        for attribute, count in requests:
            a = checks.member(attribute, self.traits.range_attributes, f"{self.traits.name} range attribute")
            k = checks.integer(count, "count")
            if not 1 <= k <= _MAX_ATTRIBUTE_INTS:
                raise AMLValueError(f"a range attribute holds 1..{_MAX_ATTRIBUTE_INTS} ints, not {k}")
            checked.append((a, k))
        return self._mem_range_attributes(p, n, checked)

    def stream_attach(self, stream: int, ptr: int, size: int, flags: int) -> None:
        self._stream_attach(
            checks.pointer(stream, "stream", null=True),
            checks.pointer(ptr),
            checks.size(size, zero=True),
            checks.member(flags, _ATTACH_FLAGS, "attach flags"),
        )

    @abc.abstractmethod
    def _malloc_managed(self, size: int, attach_global: bool) -> int: ...
    @abc.abstractmethod
    def _mem_prefetch(self, ptr: int, size: int, device: int, stream: int) -> None: ...
    @abc.abstractmethod
    def _mem_advise(self, ptr: int, size: int, advice: int, device: int) -> None: ...
    @abc.abstractmethod
    def _mem_range_attributes(
        self, ptr: int, size: int, requests: Sequence[tuple[int, int]]
    ) -> list[list[int]]: ...
    @abc.abstractmethod
    def _stream_attach(self, stream: int, ptr: int, size: int, flags: int) -> None: ...


class VirtualMemoryOps(abc.ABC):
    """``VIRTUAL_MEMORY``: reserve address ranges, create physical memory, map it, grant
    access, share it as a POSIX file descriptor."""

    traits: RuntimeTraits

    def vmm_granularity(self, device: int, recommended: bool) -> int:
        return self._vmm_granularity(checks.device(device), bool(recommended))

    def vmm_reserve(self, size: int, alignment: int, address: int) -> int:
        return self._vmm_reserve(
            checks.size(size),
            checks.size(alignment, "alignment", zero=True),
            checks.pointer(address, "address", null=True),
        )

    def vmm_address_free(self, ptr: int, size: int) -> None:
        self._vmm_address_free(checks.pointer(ptr), checks.size(size))

    def vmm_create(self, size: int, device: int, exportable: bool) -> int:
        return self._vmm_create(checks.size(size), checks.device(device), bool(exportable))

    def vmm_release(self, handle: int) -> None:
        self._vmm_release(checks.pointer(handle, "handle"))

    def vmm_map(self, ptr: int, size: int, handle: int, offset: int) -> None:
        self._vmm_map(
            checks.pointer(ptr),
            checks.size(size),
            checks.pointer(handle, "handle"),
            checks.size(offset, "offset", zero=True),
        )

    def vmm_unmap(self, ptr: int, size: int) -> None:
        self._vmm_unmap(checks.pointer(ptr), checks.size(size))

    def vmm_set_access(self, ptr: int, size: int, access: Sequence[tuple[int, int]]) -> None:
        if not access:
            raise AMLValueError("set_access needs at least one (device, access) pair")
        pairs = [
            (checks.device(d), checks.member(f, _ACCESS_FLAGS, "access (none 0, read 1, read-write 3)"))
            for d, f in access
        ]
        self._vmm_set_access(checks.pointer(ptr), checks.size(size), pairs)

    def vmm_get_access(self, ptr: int, device: int) -> int:
        return self._vmm_get_access(checks.pointer(ptr), checks.device(device))

    def vmm_export_fd(self, handle: int) -> int:
        return self._vmm_export_fd(checks.pointer(handle, "handle"))

    def vmm_import_fd(self, fd: int) -> int:
        return self._vmm_import_fd(checks.fd(fd))

    def vmm_retain(self, ptr: int) -> int:
        return self._vmm_retain(checks.pointer(ptr))

    def vmm_properties(self, handle: int) -> AllocationProperties:
        return self._vmm_properties(checks.pointer(handle, "handle"))

    @abc.abstractmethod
    def _vmm_granularity(self, device: int, recommended: bool) -> int: ...
    @abc.abstractmethod
    def _vmm_reserve(self, size: int, alignment: int, address: int) -> int: ...
    @abc.abstractmethod
    def _vmm_address_free(self, ptr: int, size: int) -> None: ...
    @abc.abstractmethod
    def _vmm_create(self, size: int, device: int, exportable: bool) -> int: ...
    @abc.abstractmethod
    def _vmm_release(self, handle: int) -> None: ...
    @abc.abstractmethod
    def _vmm_map(self, ptr: int, size: int, handle: int, offset: int) -> None: ...
    @abc.abstractmethod
    def _vmm_unmap(self, ptr: int, size: int) -> None: ...
    @abc.abstractmethod
    def _vmm_set_access(self, ptr: int, size: int, access: Sequence[tuple[int, int]]) -> None: ...
    @abc.abstractmethod
    def _vmm_get_access(self, ptr: int, device: int) -> int: ...
    @abc.abstractmethod
    def _vmm_export_fd(self, handle: int) -> int: ...
    @abc.abstractmethod
    def _vmm_import_fd(self, fd: int) -> int: ...
    @abc.abstractmethod
    def _vmm_retain(self, ptr: int) -> int: ...
    @abc.abstractmethod
    def _vmm_properties(self, handle: int) -> AllocationProperties: ...
