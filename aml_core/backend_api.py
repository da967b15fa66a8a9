"""What a backend needs from the core, public: the buffer base, the device-area helpers and
the native allocator table (issue 31, item 4).

A backend (``backends/*/aml_*``, or one of a third party) imports from this module, and
from the public modules listed below, and **never** from a private one (``aml_core._*``,
``aml_core.gpu._*``): ``tests/test_backend_api.py`` checks the backends of this
repository. The names here are re-exports: the code lives in the compiled core
(``aml_core/_buffer.pyx``, ``aml_core/_allocator.pyx``) and ``aml_core/gpu/_device_area.py``,
which may be reorganised in any release; these names stay.

**Compatibility rule.** Within one minor series of aml-core (0.3.0, 0.3.1, ...) every
name of this module's ``__all__``, and of the public modules below, keeps its signature
and meaning: a backend written against 0.3.0 runs on every 0.3.x. A change that would
break a backend is made only in a new minor version, and only after the old spelling
warned (``DeprecationWarning``) for one whole minor version: a backend that runs on 0.N
without deprecation warnings runs on 0.(N+1). So a third-party backend that imports
only public names may require ``aml-core>=0.N,<0.(N+2)``. The backends of this
repository are released with aml-core and still require its own minor version
(``backends/_setup.py``).

The names:

* :class:`Buffer` (``aml_core.buffer``) and :class:`BufferBase` (its compiled base, which
  holds ``ptr``, ``size``, the export count and the live-table entry): what
  ``Area._new_buffer`` returns; a backend's area never makes a buffer any other way.
* :class:`AreaLock`: the per-area lock of the compiled bookkeeping, for an area that
  must hold it around its own native calls (aml-ze's pooled host path).
* :class:`RuntimeMemory`: the device-area helper an area over a GPU runtime mixes in
  (the device's total and free memory from the runtime, for ``Pool.set_limit`` and
  the messages of ENOMEM).
* :class:`NativeAllocator`: the table of C function pointers (``malloc``, ``free``,
  ``get_device``...) through which the compiled core allocates without a Python call
  (docs/backend-authoring.md, "The native allocator").

The rest of the surface is in public modules of their own: :mod:`aml_core.area`
(``Area``, ``NoOptions``, ``compiled_mmap``), :mod:`aml_core.descriptor`
(``BackendDescriptor``), :mod:`aml_core.specs`, :mod:`aml_core.errors` (``ErrorTable``,
``ErrorCode``), :mod:`aml_core.checks`, :mod:`aml_core.hookspecs` (``hookimpl``),
:mod:`aml_core.native` (``NativeLibrary``, ``VendorLibrary``), and for GPU runtimes
:mod:`aml_core.gpu.backend` (``GpuBackend``, ``BackendBase``), :mod:`aml_core.gpu.runtime`,
:mod:`aml_core.gpu.groups`, :mod:`aml_core.gpu.plugin` (``lazy_descriptor``),
:mod:`aml_core.gpu.ipc` and :mod:`aml_core.gpu.hooks`.
"""

from __future__ import annotations

from ._buffer import AreaLock, BufferBase, NativeAllocator
from .buffer import Buffer
from .gpu._device_area import RuntimeMemory

__all__ = ["AreaLock", "Buffer", "BufferBase", "NativeAllocator", "RuntimeMemory"]
