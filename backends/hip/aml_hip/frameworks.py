"""CuPy scopes, CuPy's pinned memory and Numba's memory manager over aml_hip areas and pools.

Written once in :mod:`aml_core.gpu.cupy_scope` and :mod:`aml_core.gpu.numba_emm` for the GPU
backends (aml_cuda has the same functions), bound here to the ``hip`` backend::

    pool = aml_core.pool(aml_hip.create(0))
    with aml_hip.cupy_scope(pool):
        x = cupy.zeros(1 << 20)             # from the pool, in this thread

    aml_hip.use_with_numba(pool)             # before Numba's first CUDA use
"""

from __future__ import annotations

from aml_core.area import Area
from aml_core.gpu import cupy_scope as _cupy
from aml_core.gpu import numba_emm as _numba
from aml_core.gpu.cupy_scope import CupyPinnedHook, CupyScope

__all__ = [
    "CupyPinnedHook",
    "CupyScope",
    "cupy_scope",
    "numba_manager",
    "use_pinned_with_cupy",
    "use_with_numba",
]

#: The backend these functions take areas of.
BACKEND_NAME = "hip"


def cupy_scope(area: Area) -> CupyScope:
    """A scope (``with scope:``) in which CuPy allocates from ``area`` (an aml_hip device or
    managed area, or a pool over one) in the calling thread (:func:`aml_core.gpu.cupy_scope.cupy_scope`)."""
    return _cupy.cupy_scope(area, backend=BACKEND_NAME)


def use_pinned_with_cupy(pinned: Area) -> CupyPinnedHook:
    """Make CuPy take pinned host memory from ``pinned`` (``aml_hip.pinned_pool(node)``)
    (:func:`aml_core.gpu.cupy_scope.use_pinned_with_cupy`)."""
    return _cupy.use_pinned_with_cupy(pinned, backend=BACKEND_NAME)


def numba_manager(area: Area, *, pinned: Area | None = None) -> type:
    """Numba's External Memory Management plugin class over ``area`` (and ``pinned`` for
    its pinned host memory) (:func:`aml_core.gpu.numba_emm.numba_manager`)."""
    return _numba.numba_manager(area, pinned=pinned, backend=BACKEND_NAME)


def use_with_numba(area: Area, *, pinned: Area | None = None) -> type:
    """:func:`numba_manager` installed with ``numba.cuda.set_memory_manager`` (before
    Numba's first CUDA use) (:func:`aml_core.gpu.numba_emm.use_with_numba`)."""
    return _numba.use_with_numba(area, pinned=pinned, backend=BACKEND_NAME)
