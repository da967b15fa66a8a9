"""Loading ``libamdhip64`` and declaring its prototypes, version-aware.

``load()`` tries ``libamdhip64.so.7``, ``.so.6`` and ``.so.5`` in that order
(``AML_HIP_LIBRARY`` names one file instead), declares every function aml-hip calls
through :class:`aml_core.native.NativeLibrary`, and reads ``hipRuntimeGetVersion``: the
version picks the :class:`~aml_hip.abi.HipAbi` (IPC lazy-peer flag, hipMemoryType
numbering, hipMemAllocationProp layout, VMM shareable-handle convention, host allocation
calls). ``hipGetDeviceProperties`` is deliberately not used: from 6.0 its ctypes-visible
symbol has the pre-6.0 struct layout (the 6.x one is ``hipGetDevicePropertiesR0600``), so
device facts come from ``hipDeviceGetName``, ``hipDeviceTotalMem`` and
``hipDeviceGetAttribute``, whose ABI did not change.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_uint, c_ulonglong, c_void_p
from typing import Any, Final

from aml_core.errors import AMLNotSupported
from aml_core.native import NativeLibrary, VendorLibrary

from . import abi as C
from .errors import HipErrorNames, c_char_p_function, make_error_table

__all__ = ["CANDIDATES", "ENV", "STREAM_ORDERED_FUNCTIONS", "VMM_FUNCTIONS", "HipLibrary", "load"]

#: Library names tried in order (SONAME libamdhip64.so.<major>: docs/native-abi.md#hip-library-and-version).
CANDIDATES: Final[tuple[str, ...]] = ("libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5")
#: Environment variable naming the library file to load instead.
ENV: Final = "AML_HIP_LIBRARY"

_err = c_int  # hipError_t
_PV = POINTER(c_void_p)

#: name -> (restype, argtypes); all present in HIP 5.2 (checked against the Debian library).
REQUIRED: Final[dict[str, tuple[Any, tuple[Any, ...]]]] = {
    "hipRuntimeGetVersion": (_err, (POINTER(c_int),)),
    "hipGetDeviceCount": (_err, (POINTER(c_int),)),
    "hipSetDevice": (_err, (c_int,)),
    "hipGetDevice": (_err, (POINTER(c_int),)),
    # the allocation behind an address: an IPC importer checks the size a handle claims
    "hipMemGetAddressRange": (_err, (_PV, POINTER(c_size_t), c_void_p)),
    "hipDeviceGetAttribute": (_err, (POINTER(c_int), c_int, c_int)),
    "hipDeviceGetName": (_err, (c_char_p, c_int, c_int)),
    "hipDeviceTotalMem": (_err, (POINTER(c_size_t), c_int)),
    "hipMemGetInfo": (_err, (POINTER(c_size_t), POINTER(c_size_t))),
    "hipDeviceSynchronize": (_err, ()),
    "hipMalloc": (_err, (_PV, c_size_t)),
    "hipFree": (_err, (c_void_p,)),
    "hipHostMalloc": (_err, (_PV, c_size_t, c_uint)),
    "hipHostFree": (_err, (c_void_p,)),
    "hipHostRegister": (_err, (c_void_p, c_size_t, c_uint)),
    "hipHostUnregister": (_err, (c_void_p,)),
    "hipHostGetDevicePointer": (_err, (_PV, c_void_p, c_uint)),
    "hipMallocManaged": (_err, (_PV, c_size_t, c_uint)),
    "hipMemAdvise": (_err, (c_void_p, c_size_t, c_int, c_int)),
    "hipMemPrefetchAsync": (_err, (c_void_p, c_size_t, c_int, c_void_p)),
    "hipMemRangeGetAttribute": (_err, (c_void_p, c_size_t, c_int, c_void_p, c_size_t)),
    "hipMemRangeGetAttributes": (
        _err,
        (_PV, POINTER(c_size_t), POINTER(c_int), c_size_t, c_void_p, c_size_t),
    ),
    "hipStreamAttachMemAsync": (_err, (c_void_p, c_void_p, c_size_t, c_uint)),
    "hipStreamCreateWithFlags": (_err, (_PV, c_uint)),
    "hipStreamDestroy": (_err, (c_void_p,)),
    "hipStreamSynchronize": (_err, (c_void_p,)),
    "hipMemcpy": (_err, (c_void_p, c_void_p, c_size_t, c_int)),
    "hipMemset": (_err, (c_void_p, c_int, c_size_t)),
    "hipIpcGetMemHandle": (_err, (POINTER(C.hipIpcMemHandle_t), c_void_p)),
    "hipIpcOpenMemHandle": (_err, (_PV, C.hipIpcMemHandle_t, c_uint)),
    "hipIpcCloseMemHandle": (_err, (c_void_p,)),
    "hipPointerGetAttributes": (_err, (POINTER(C.hipPointerAttribute_t), c_void_p)),
    "hipGetErrorName": (c_char_p, (c_int,)),
    "hipGetLastError": (_err, ()),
    # peer access and copies between devices (docs/native-abi.md#hip-peer-access)
    "hipDeviceCanAccessPeer": (_err, (POINTER(c_int), c_int, c_int)),
    "hipDeviceEnablePeerAccess": (_err, (c_int, c_uint)),
    "hipDeviceDisablePeerAccess": (_err, (c_int,)),
    "hipMemcpyPeer": (_err, (c_void_p, c_int, c_void_p, c_int, c_size_t)),
}

#: Declared when present: newer host calls, virtual memory (exported since 5.1: native-abi.md#hip)
#: and stream-ordered allocation with its events (native-abi.md#hip-stream-ordered-allocation).
OPTIONAL: Final[dict[str, tuple[Any, tuple[Any, ...]]]] = {
    "hipExtHostAlloc": (_err, (_PV, c_size_t, c_uint)),
    "hipFreeHost": (_err, (c_void_p,)),
    "hipMemAddressReserve": (_err, (_PV, c_size_t, c_size_t, c_void_p, c_ulonglong)),
    "hipMemAddressFree": (_err, (c_void_p, c_size_t)),
    # prop: a pointer to the version's hipMemAllocationProp layout
    "hipMemCreate": (_err, (_PV, c_size_t, c_void_p, c_ulonglong)),
    "hipMemRelease": (_err, (c_void_p,)),
    "hipMemMap": (_err, (c_void_p, c_size_t, c_size_t, c_void_p, c_ulonglong)),
    "hipMemUnmap": (_err, (c_void_p, c_size_t)),
    "hipMemSetAccess": (_err, (c_void_p, c_size_t, POINTER(C.hipMemAccessDesc), c_size_t)),
    "hipMemGetAccess": (_err, (POINTER(c_ulonglong), POINTER(C.hipMemLocation), c_void_p)),
    "hipMemExportToShareableHandle": (_err, (c_void_p, c_void_p, c_int, c_ulonglong)),
    # osHandle: a pointer to the fd (6.2/6.3) or the fd cast to void* (7.x): see HipAbi.shareable
    "hipMemImportFromShareableHandle": (_err, (_PV, c_void_p, c_int)),
    "hipMemRetainAllocationHandle": (_err, (_PV, c_void_p)),
    "hipMemGetAllocationPropertiesFromHandle": (_err, (c_void_p, c_void_p)),
    "hipMemGetAllocationGranularity": (_err, (POINTER(c_size_t), c_void_p, c_int)),
    # stream-ordered allocation (symbol version hip_5.1) and events (hip_4.2); hipEvent_t is a pointer
    "hipMallocAsync": (_err, (_PV, c_size_t, c_void_p)),
    "hipFreeAsync": (_err, (c_void_p, c_void_p)),
    "hipEventCreateWithFlags": (_err, (_PV, c_uint)),
    "hipEventDestroy": (_err, (c_void_p,)),
    "hipEventRecord": (_err, (c_void_p, c_void_p)),
    "hipEventQuery": (_err, (c_void_p,)),
    "hipEventSynchronize": (_err, (c_void_p,)),
    "hipStreamWaitEvent": (_err, (c_void_p, c_void_p, c_uint)),
}

#: The calls of the VIRTUAL_MEMORY group: a library without one of them lacks the group.
VMM_FUNCTIONS: Final[tuple[str, ...]] = tuple(n for n in OPTIONAL if n.startswith("hipMem"))
#: The calls of the STREAM_ORDERED group: a library without one of them lacks the group.
STREAM_ORDERED_FUNCTIONS: Final[tuple[str, ...]] = (
    "hipMallocAsync",
    "hipFreeAsync",
    "hipEventCreateWithFlags",
    "hipEventDestroy",
    "hipEventRecord",
    "hipEventQuery",
    "hipEventSynchronize",
    "hipStreamWaitEvent",
)


class HipLibrary(VendorLibrary):
    """A loaded libamdhip64: its prototypes, error table, version and ABI."""

    def __init__(self, native: NativeLibrary, names: HipErrorNames) -> None:
        super().__init__(native, REQUIRED, OPTIONAL)
        self.names = names
        names.bind(c_char_p_function(native.function("hipGetErrorName")))
        raw = c_int(0)
        native.call("hipRuntimeGetVersion", ctypes.byref(raw))
        if raw.value <= 0:
            raise AMLNotSupported(f"{self.path} reports HIP version {raw.value}; cannot pick its ABI")
        self.version: int = raw.value
        self.abi: C.HipAbi = C.abi_for(self.version)
        # The ABI names the current host calls; fall back to the other one of each pair if
        # a library lacks it (a 6.3+ library keeps the deprecated names too).
        self.host_alloc = self.abi.host_alloc if native.has(self.abi.host_alloc) else "hipHostMalloc"
        self.host_free = self.abi.host_free if native.has(self.abi.host_free) else "hipHostFree"

    @property
    def version_text(self) -> str:
        """``"HIP 6.2.41133"``, with a note for versions newer than docs/native-abi.md knows."""
        text = f"HIP {C.version_string(self.version)}"
        if self.version // 10_000_000 > C.NEWEST_KNOWN_MAJOR:
            text += f" (ABI of {self.abi.label} assumed)"
        return text

    def has(self, name: str) -> bool:
        """Whether the library exports ``name`` (and it was declared)."""
        try:
            self.native.function(name)
        except AMLNotSupported:
            return False
        return True

    def call(self, name: str, *args: Any, message: str | None = None) -> None:
        """Call a function returning hipError_t; raise the translated error on failure."""
        fn = self.native.function(name)
        rc = int(fn(*args))
        if rc != C.hipSuccess:
            raise self.errors.error(name, rc, message)

    def raw(self, name: str, *args: Any) -> int:
        """Call a function returning hipError_t and return the code without raising."""
        return int(self.native.function(name)(*args))


def load() -> HipLibrary:
    """Load the HIP runtime; :class:`~aml_core.errors.AMLNotSupported` says why not."""
    names = HipErrorNames()
    native = NativeLibrary.load(CANDIDATES, env=ENV, errors=make_error_table(names))
    return HipLibrary(native, names)
