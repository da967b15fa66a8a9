"""Zero-copy hand-off helpers shared by the backends.

The buffer protocol and DLPack capsules are produced by :class:`aml_core.buffer.Buffer`
(its C base counts every export); this module builds the CUDA Array Interface."""

from __future__ import annotations

from typing import Any

__all__ = ["cuda_array_interface"]


def cuda_array_interface(ptr: int, size: int, *, readonly: bool = False) -> dict[str, Any]:
    """``__cuda_array_interface__`` (version 3) of ``size`` bytes at ``ptr`` as a
    one-dimensional ``uint8`` array. ``stream`` is None: aml leaves no pending work
    on the memory it hands out."""
    return {
        "shape": (size,),
        "typestr": "|u1",
        "data": (ptr, readonly),
        "version": 3,
        "strides": None,
        "stream": None,
    }
