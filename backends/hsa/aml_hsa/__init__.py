"""aml-hsa: AMD GPUs through HSA/ROCr (``libhsa-runtime64``, ctypes): agents and memory
pools, pool areas, the ``hsa_amd_vmem_*`` virtual-memory API and HSA IPC.

Two APIs for virtual memory:

* the one aml-cuda and aml-hip share: ``aml_hsa.virtual_memory(device)`` is an
  :class:`aml_core.gpu.VirtualMemory` (reserve, create, map, access, export/import an fd,
  retain, properties, one-step and growable buffers) over the device's coarse-grained pool;
* the vendor's calls under the vendor's names, **HSA-only** (:mod:`aml_hsa.vmem`):
  ``address_reserve``, ``address_reserve_align`` (ROCm 6.2+), ``address_free``,
  ``handle_create``, ``handle_release``, ``map``, ``unmap``, ``set_access``, ``get_access``,
  ``export_shareable_handle``, ``import_shareable_handle``, ``retain_alloc_handle``,
  ``get_alloc_properties_from_handle``, with ``agents``, ``pools``, ``device_pool``,
  ``host_pool`` and the enums ``Permission``, ``MemoryType``, ``Segment``, ``AgentType``.

Areas: ``aml_hsa.create(device)`` (device memory from the GPU's coarse-grained pool),
``aml_hsa.host_area()`` (a CPU fine-grained pool), or ``aml_core.area(kind=...,
backend="hsa")``. Unlike aml-cuda and aml-hip there is no managed memory, no stream and no
``pointer_attributes``; areas take no flags.

Importing this package loads no native library. The library is ``libhsa-runtime64.so.1``
(``AML_HSA_LIBRARY`` names another file); ``hsa_init`` is called once per process on first
use and ``hsa_shut_down`` at exit. Debian 12's ROCr 5.2 has no ``hsa_amd_vmem_*``: there the
virtual-memory group is absent and says why (ROCm 6.0+ needed).
"""

from __future__ import annotations

from aml_core.lazy import lazy_stub

# The public names are declared once, in __init__.pyi (what type checkers read).
__getattr__, __dir__ = lazy_stub(__name__, distribution="aml-hsa")
