"""Loading the Level Zero loader (``libze_loader.so.1``) and declaring its prototypes.

``load()`` opens ``libze_loader.so.1`` (``AML_ZE_LIBRARY`` names another file: a test
double, or a loader elsewhere) through :class:`aml_core.native.NativeLibrary` and
declares every function aml-ze calls. ``zeMemPutIpcHandle`` (spec 1.6, loader 1.10) is
optional: Debian's 1.8.12 loader does not export it, and an IPC handle is then released
when its memory is freed. The Sysman functions (:mod:`aml_ze.sysman`, free memory) are
optional too: ``zesInit``, ``zesDriverGet`` and ``zesDeviceGet`` came with spec 1.5
(loader 1.9), and a loader without any of them only leaves free memory unknown. Nothing
is *called* here: :class:`aml_ze.runtime.ZeRuntime` calls ``zeInit`` first and nothing
else if it fails (the 1.8.12 loader segfaults in ``zeDriverGet`` after a failed
``zeInit`` when Intel's driver is installed without a GPU).
"""

from __future__ import annotations

from ctypes import POINTER, c_size_t, c_uint32, c_void_p
from typing import Any, Final

from aml_core.native import NativeLibrary, VendorLibrary

from . import abi as C
from .errors import ERRORS

__all__ = ["CANDIDATES", "ENV", "OPTIONAL", "REQUIRED", "ZeLibrary", "load"]

#: Library names tried in order.
CANDIDATES: Final[tuple[str, ...]] = ("libze_loader.so.1",)
#: Environment variable naming the library file to load instead.
ENV: Final = "AML_ZE_LIBRARY"

_res = c_uint32  # ze_result_t
_h = c_void_p  # every handle is an opaque pointer
_PV = POINTER(c_void_p)
_u32 = c_uint32

#: name -> (restype, argtypes): all exported by the 1.8.12 loader (API 1.4).
REQUIRED: Final[dict[str, tuple[Any, tuple[Any, ...]]]] = {
    "zeInit": (_res, (_u32,)),
    "zeDriverGet": (_res, (POINTER(_u32), _PV)),
    "zeDriverGetApiVersion": (_res, (_h, POINTER(_u32))),
    "zeDeviceGet": (_res, (_h, POINTER(_u32), _PV)),
    "zeDeviceGetProperties": (_res, (_h, POINTER(C.ze_device_properties_t))),
    "zeDeviceGetMemoryProperties": (_res, (_h, POINTER(_u32), POINTER(C.ze_device_memory_properties_t))),
    "zeContextCreate": (_res, (_h, POINTER(C.ze_context_desc_t), _PV)),
    "zeContextDestroy": (_res, (_h,)),
    "zeMemAllocDevice": (_res, (_h, POINTER(C.ze_device_mem_alloc_desc_t), c_size_t, c_size_t, _h, _PV)),
    "zeMemAllocHost": (_res, (_h, POINTER(C.ze_host_mem_alloc_desc_t), c_size_t, c_size_t, _PV)),
    "zeMemAllocShared": (
        _res,
        (
            _h,
            POINTER(C.ze_device_mem_alloc_desc_t),
            POINTER(C.ze_host_mem_alloc_desc_t),
            c_size_t,
            c_size_t,
            _h,
            _PV,
        ),
    ),
    "zeMemFree": (_res, (_h, c_void_p)),
    "zeMemGetAllocProperties": (_res, (_h, c_void_p, POINTER(C.ze_memory_allocation_properties_t), _PV)),
    "zeMemGetIpcHandle": (_res, (_h, c_void_p, POINTER(C.ze_ipc_mem_handle_t))),
    # the 64-byte handle is passed BY VALUE
    "zeMemGetAddressRange": (_res, (_h, _h, _PV, POINTER(c_size_t))),
    "zeMemOpenIpcHandle": (_res, (_h, _h, C.ze_ipc_mem_handle_t, _u32, _PV)),
    "zeMemCloseIpcHandle": (_res, (_h, c_void_p)),
    "zeVirtualMemReserve": (_res, (_h, c_void_p, c_size_t, _PV)),
    "zeVirtualMemFree": (_res, (_h, c_void_p, c_size_t)),
    "zeVirtualMemQueryPageSize": (_res, (_h, _h, c_size_t, POINTER(c_size_t))),
    "zePhysicalMemCreate": (_res, (_h, _h, POINTER(C.ze_physical_mem_desc_t), _PV)),
    "zePhysicalMemDestroy": (_res, (_h, _h)),
    "zeVirtualMemMap": (_res, (_h, c_void_p, c_size_t, _h, c_size_t, _u32)),
    "zeVirtualMemUnmap": (_res, (_h, c_void_p, c_size_t)),
    "zeVirtualMemSetAccessAttribute": (_res, (_h, c_void_p, c_size_t, _u32)),
    "zeVirtualMemGetAccessAttribute": (_res, (_h, c_void_p, c_size_t, POINTER(_u32), POINTER(c_size_t))),
}

#: Declared when present: zeMemPutIpcHandle (spec 1.6+, loader 1.10+); Sysman's
#: zesInit, zesDriverGet, zesDeviceGet (spec 1.5+, loader 1.9+) and the memory-module
#: queries (in the 1.8.12 loader, through core device handles: see aml_ze.sysman).
OPTIONAL: Final[dict[str, tuple[Any, tuple[Any, ...]]]] = {
    "zeMemPutIpcHandle": (_res, (_h, C.ze_ipc_mem_handle_t)),
    "zesInit": (_res, (_u32,)),
    "zesDriverGet": (_res, (POINTER(_u32), _PV)),
    "zesDeviceGet": (_res, (_h, POINTER(_u32), _PV)),
    "zesDeviceGetProperties": (_res, (_h, POINTER(C.zes_device_properties_t))),
    "zesDeviceEnumMemoryModules": (_res, (_h, POINTER(_u32), _PV)),
    "zesMemoryGetProperties": (_res, (_h, POINTER(C.zes_mem_properties_t))),
    "zesMemoryGetState": (_res, (_h, POINTER(C.zes_mem_state_t))),
}


class ZeLibrary(VendorLibrary):
    """A loaded Level Zero loader (or double): its prototypes and error table."""

    def __init__(self, native: NativeLibrary) -> None:
        super().__init__(native, REQUIRED, OPTIONAL)

    def has(self, name: str) -> bool:
        """Whether the library exports ``name`` (and it was declared)."""
        return name in REQUIRED or (name in OPTIONAL and self.native.has(name))

    def call(self, name: str, *args: Any) -> None:
        """Call a function returning ze_result_t; raise the translated error on failure."""
        self.native.call(name, *args)

    def raw(self, name: str, *args: Any) -> int:
        """Call a function returning ze_result_t and return the code without raising."""
        return int(self.native.function(name)(*args))


def load() -> ZeLibrary:
    """Load the loader; :class:`~aml_core.errors.AMLNotSupported` says why not."""
    return ZeLibrary(NativeLibrary.load(CANDIDATES, env=ENV, errors=ERRORS))
