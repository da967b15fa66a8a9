"""CUDA managed memory, a part of :class:`aml_cuda.runtime.CudaRuntime` (its ``MANAGED``
group beyond ``cudaMallocManaged``): prefetch, advice, range attributes and stream
attachment. CUDA 13 forms: ``cudaMemAdvise`` / ``cudaMemPrefetchAsync`` take a
``cudaMemLocation`` (device -1 is ``{Host, 0}``)."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from aml_core.gpu import runtime as core

from .calls import CudaCalls, _rt

__all__ = ["TRAITS_ADVICES", "TRAITS_RANGE_ATTRIBUTES", "CudaManaged"]

#: cudaMemoryAdvise 1-6 (SetReadMostly .. UnsetAccessedBy).
TRAITS_ADVICES = frozenset(range(1, 7))
#: cudaMemRangeAttribute 1-8 (ReadMostly .. LastPrefetchLocationId).
TRAITS_RANGE_ATTRIBUTES = frozenset(range(1, 9))

_E = _rt.cudaError_t
_ADVICES = {i: _rt.cudaMemoryAdvise(i) for i in TRAITS_ADVICES}
_RANGE_ATTRIBUTES = {i: _rt.cudaMemRangeAttribute(i) for i in TRAITS_RANGE_ATTRIBUTES}


class CudaManaged(CudaCalls, core.ManagedOps):
    """``cudaMemPrefetchAsync``, ``cudaMemAdvise``, ``cudaMemRangeGetAttributes`` and
    ``cudaStreamAttachMemAsync``."""

    _locations: dict[int, Any]
    _libcuda: ctypes.CDLL | None

    def _location(self, device: int) -> Any:
        """The ``cudaMemLocation`` of a device, or ``{Host, 0}`` for -1 (cached: the
        bindings only read it)."""
        loc = self._locations.get(device)
        if loc is None:
            loc = _rt.cudaMemLocation()
            if device == core.CPU_DEVICE:
                loc.type = _rt.cudaMemLocationType.cudaMemLocationTypeHost
                loc.id = 0
            else:
                loc.type = _rt.cudaMemLocationType.cudaMemLocationTypeDevice
                loc.id = device
            self._locations[device] = loc
        return loc

    def _mem_prefetch(self, ptr: int, size: int, device: int, stream: int) -> None:
        self._call("cudaMemPrefetchAsync", ptr, size, self._location(device), 0, stream)

    def _mem_advise(self, ptr: int, size: int, advice: int, device: int) -> None:
        adv = _ADVICES.get(advice)
        if adv is None:
            raise self.errors.error(
                "cudaMemAdvise", int(_E.cudaErrorInvalidValue), f"unknown advice {advice}"
            )
        self._call("cudaMemAdvise", ptr, size, adv, self._location(device))

    def _mem_range_attributes(
        self, ptr: int, size: int, requests: Sequence[tuple[int, int]]
    ) -> list[list[int]]:
        sizes = [4 * count for _, count in requests]
        try:
            names = [_RANGE_ATTRIBUTES[attr] for attr, _ in requests]
        except KeyError as exc:
            raise self.errors.error(
                "cudaMemRangeGetAttributes",
                int(_E.cudaErrorInvalidValue),
                f"unknown range attribute {exc.args[0]}",
            ) from None
        try:
            data = self._call("cudaMemRangeGetAttributes", sizes, names, len(names), ptr, size)
        except TypeError:
            # An older cuda-bindings without a helper for some attribute: ask the
            # driver through ctypes instead (same numbers, same semantics).
            return [self._range_attribute_ctypes(ptr, size, a, c) for a, c in requests]
        out: list[list[int]] = []
        for (_, count), value in zip(requests, data, strict=True):
            if isinstance(value, (list, tuple)):
                out.append([int(v) for v in value][:count])
            else:
                out.append([int(value)])
        return out

    def _range_attribute_ctypes(self, ptr: int, size: int, attribute: int, count: int) -> list[int]:
        self._driver()
        if self._libcuda is None:
            lib = ctypes.CDLL("libcuda.so.1")
            fn = lib.cuMemRangeGetAttribute
            fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint64, ctypes.c_size_t]
            fn.restype = ctypes.c_int
            self._libcuda = lib
        data = (ctypes.c_int * count)()
        err = self._libcuda.cuMemRangeGetAttribute(data, 4 * count, attribute, ptr, size)
        if err:
            self._dfail("cuMemRangeGetAttribute", err)
        return list(data)

    def _stream_attach(self, stream: int, ptr: int, size: int, flags: int) -> None:
        self._call("cudaStreamAttachMemAsync", stream, ptr, size, flags)
