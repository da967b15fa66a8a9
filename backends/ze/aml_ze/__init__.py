"""aml-ze: AML's Level Zero areas (``aml_area_ze``), Level Zero IPC and virtual memory,
over the oneAPI Level Zero loader (``libze_loader.so.1``) through ctypes.

Quick start::

    import aml_ze
    from aml_ze import ZeFlags

    area = aml_ze.device_area(0, 0, 0, 64, ZeFlags.SHARED)   # aml_area_ze_device_create
    buf = area.mmap(1 << 20)                                 # zeMemAllocShared
    memoryview(buf)[:4] = b"aml!"                            # shared memory is host-accessible
    area.munmap(buf)                                         # zeMemFree
    aml_ze.destroy(area)                                     # aml_area_ze_destroy (= area.close())

Importing this package loads no native library: the API is loaded on first use, and the
loader when the runtime is first needed (``AML_ZE_LIBRARY`` names another file). The
names shared with the other GPU backends (the types of ``aml_core/gpu/vmm_exports.pyi``
and ``PointerAttributes``, and of aml-cuda's functions those Level Zero has: ``BACKEND``,
``destroy``, ``get_runtime``, ``ipc_close``, ``ipc_open``, ``load_runtime``,
``pointer_attributes``, ``probe``, ``virtual_memory``) mean the same things (aml-ze
provides no ``PEER`` group, so none of the peer-access functions); AML's own
Level Zero names are ``device_area``, ``host_area``, ``default_device_area``,
``default_host_area``, ``ZeArea``, ``ZeFlags``, ``ZeDeviceFlags``, ``ZeHostFlags``, plus
``alloc_properties`` (``zeMemGetAllocProperties``). There is no ``create``,
``default_area``, ``unified_area`` or ``stream``: AML's Level Zero area has its own
constructors and aml-ze submits no work to queues.
"""

from __future__ import annotations

from aml_core.lazy import lazy_stub

# The public names are declared once, in __init__.pyi (what type checkers read).
__getattr__, __dir__ = lazy_stub(__name__, distribution="aml-ze")
