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
names shared with the other GPU backends (those of :data:`aml_core.gpu.plugin.GPU_TYPES` and of
:data:`~aml_core.gpu.plugin.GPU_FUNCTIONS` those Level Zero has: ``BACKEND``,
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

from typing import TYPE_CHECKING

from aml_core.gpu.plugin import GPU_FUNCTIONS, GPU_PEER_METHODS, GPU_VMM_TYPES
from aml_core.lazy import lazy_exports

if TYPE_CHECKING:
    from aml_core.gpu import (
        PointerAttributes as PointerAttributes,
    )
    from aml_core.gpu.vmm_exports import *  # noqa: F403  (GPU_VMM_TYPES)

    from .api import (
        BACKEND as BACKEND,
    )
    from .api import (
        AllocProperties as AllocProperties,
    )
    from .api import (
        ZeArea as ZeArea,
    )
    from .api import (
        ZeDeviceFlags as ZeDeviceFlags,
    )
    from .api import (
        ZeFlags as ZeFlags,
    )
    from .api import (
        ZeHostFlags as ZeHostFlags,
    )
    from .api import (
        alloc_properties as alloc_properties,
    )
    from .api import (
        default_device_area as default_device_area,
    )
    from .api import (
        default_host_area as default_host_area,
    )
    from .api import (
        destroy as destroy,
    )
    from .api import (
        device_area as device_area,
    )
    from .api import (
        get_runtime as get_runtime,
    )
    from .api import (
        host_area as host_area,
    )
    from .api import (
        ipc_close as ipc_close,
    )
    from .api import (
        ipc_open as ipc_open,
    )
    from .api import (
        load_runtime as load_runtime,
    )
    from .api import (
        pointer_attributes as pointer_attributes,
    )
    from .api import (
        probe as probe,
    )
    from .api import (
        virtual_memory as virtual_memory,
    )

#: The types of :mod:`aml_core.gpu` that Level Zero has (of GPU_TYPES: no managed advice or streams).
_TYPES = (*GPU_VMM_TYPES, "PointerAttributes")
#: Of GPU_FUNCTIONS, those Level Zero has (see the module doc).
_FUNCTIONS = tuple(
    n
    for n in GPU_FUNCTIONS
    if n not in ("create", "default_area", "unified_area", "stream", *GPU_PEER_METHODS)
)
_OWN = (
    "AllocProperties",
    "ZeArea",
    "ZeDeviceFlags",
    "ZeFlags",
    "ZeHostFlags",
    "alloc_properties",
    "default_device_area",
    "default_host_area",
    "device_area",
    "host_area",
)
__all__ = [*_TYPES, *_FUNCTIONS, *_OWN, "__version__"]  # noqa: PLE0604, F405
__getattr__, __dir__ = lazy_exports(
    __name__,
    dict.fromkeys(_TYPES, "aml_core.gpu") | dict.fromkeys((*_FUNCTIONS, *_OWN), ".api"),
    distribution="aml-ze",
)
