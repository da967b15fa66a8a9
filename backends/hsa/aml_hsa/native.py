"""Loading ``libhsa-runtime64``, declaring its prototypes, and ``hsa_init`` once per process.

``load()`` loads ``libhsa-runtime64.so.1`` (the SONAME of every ROCr release;
``AML_HSA_LIBRARY`` names another file), declares the core and AMD-extension calls aml-hsa
uses through :class:`aml_core.native.NativeLibrary`, and the virtual-memory calls where
the library has them (interface 1.4, ROCm 6.0; ``reserve_align`` from 1.6, ROCm 6.2):
:attr:`HsaLibrary.interface` is inferred from those symbols.

``hsa_init`` is reference counted by ROCr: aml-hsa calls it once per process and library
(:meth:`HsaLibrary.init`), and ``hsa_shut_down`` once at exit (``atexit``), or when
:func:`shutdown_all` is called (tests switching libraries).
"""

from __future__ import annotations

import atexit
import os
import re
import threading
from ctypes import CFUNCTYPE, POINTER, c_char_p, c_int, c_size_t, c_uint32, c_uint64, c_void_p
from typing import Any, Final

from aml_core.errors import ErrorCode
from aml_core.native import NativeLibrary, VendorLibrary

from . import abi as C
from .errors import HsaStatusNames, make_error_table, status_string_function

__all__ = ["CANDIDATES", "ENV", "HsaLibrary", "load", "shutdown_all"]

#: The SONAME of every ROCr release.
CANDIDATES: Final[tuple[str, ...]] = ("libhsa-runtime64.so.1",)
#: Environment variable naming the library file to load instead.
ENV: Final = "AML_HSA_LIBRARY"

_st = c_int  # hsa_status_t
_h = c_uint64  # hsa_agent_t / hsa_amd_memory_pool_t / hsa_amd_vmem_alloc_handle_t, by value
_PV = POINTER(c_void_p)

#: ``hsa_status_t (*)(hsa_agent_t, void*)`` and ``(hsa_amd_memory_pool_t, void*)``.
ITERATE_CALLBACK = CFUNCTYPE(_st, _h, c_void_p)

#: Present in every ROCr aml-hsa supports (the Debian 5.2 library exports them all).
REQUIRED: Final[dict[str, tuple[Any, tuple[Any, ...]]]] = {
    "hsa_init": (_st, ()),
    "hsa_shut_down": (_st, ()),
    "hsa_status_string": (_st, (c_int, POINTER(c_char_p))),
    "hsa_system_get_info": (_st, (c_int, c_void_p)),
    "hsa_iterate_agents": (_st, (ITERATE_CALLBACK, c_void_p)),
    "hsa_agent_get_info": (_st, (_h, c_int, c_void_p)),
    "hsa_amd_agent_iterate_memory_pools": (_st, (_h, ITERATE_CALLBACK, c_void_p)),
    "hsa_amd_memory_pool_get_info": (_st, (_h, c_int, c_void_p)),
    "hsa_amd_agent_memory_pool_get_info": (_st, (_h, _h, c_int, c_void_p)),
    "hsa_amd_memory_pool_allocate": (_st, (_h, c_size_t, c_uint32, _PV)),
    "hsa_amd_memory_pool_free": (_st, (c_void_p,)),
    "hsa_amd_agents_allow_access": (_st, (c_uint32, POINTER(_h), POINTER(c_uint32), c_void_p)),
    "hsa_memory_copy": (_st, (c_void_p, c_void_p, c_size_t)),
    "hsa_amd_ipc_memory_create": (_st, (c_void_p, c_size_t, POINTER(C.hsa_amd_ipc_memory_t))),
    "hsa_amd_ipc_memory_attach": (
        _st,
        (POINTER(C.hsa_amd_ipc_memory_t), c_size_t, c_uint32, POINTER(_h), _PV),
    ),
    "hsa_amd_ipc_memory_detach": (_st, (c_void_p,)),
    # (ptr, info, alloc, num_agents_accessible, accessible): aml-hsa passes NULL for the last
    # three (no list of agents is wanted)
    "hsa_amd_pointer_info": (
        _st,
        (c_void_p, POINTER(C.hsa_amd_pointer_info_t), c_void_p, POINTER(c_uint32), c_void_p),
    ),
}

#: dma-buf export (interface 1.1, ROCm 5.6+) and the virtual-memory calls (interface 1.4+;
#: reserve_align 1.6+), declared where present.
OPTIONAL: Final[dict[str, tuple[Any, tuple[Any, ...]]]] = {
    "hsa_amd_portable_export_dmabuf": (_st, (c_void_p, c_size_t, POINTER(c_int), POINTER(c_uint64))),
    "hsa_amd_portable_close_dmabuf": (_st, (c_int,)),
    "hsa_amd_vmem_address_reserve": (_st, (_PV, c_size_t, c_uint64, c_uint64)),
    "hsa_amd_vmem_address_reserve_align": (_st, (_PV, c_size_t, c_uint64, c_uint64, c_uint64)),
    "hsa_amd_vmem_address_free": (_st, (c_void_p, c_size_t)),
    "hsa_amd_vmem_handle_create": (_st, (_h, c_size_t, c_int, c_uint64, POINTER(_h))),
    "hsa_amd_vmem_handle_release": (_st, (_h,)),
    "hsa_amd_vmem_map": (_st, (c_void_p, c_size_t, c_size_t, _h, c_uint64)),
    "hsa_amd_vmem_unmap": (_st, (c_void_p, c_size_t)),
    "hsa_amd_vmem_set_access": (
        _st,
        (c_void_p, c_size_t, POINTER(C.hsa_amd_memory_access_desc_t), c_size_t),
    ),
    "hsa_amd_vmem_get_access": (_st, (c_void_p, POINTER(c_int), _h)),
    "hsa_amd_vmem_export_shareable_handle": (_st, (POINTER(c_int), _h, c_uint64)),
    "hsa_amd_vmem_import_shareable_handle": (_st, (c_int, POINTER(_h))),
    "hsa_amd_vmem_retain_alloc_handle": (_st, (POINTER(_h), c_void_p)),
    "hsa_amd_vmem_get_alloc_properties_from_handle": (_st, (_h, POINTER(_h), POINTER(c_int))),
}

#: ROCr library file versions whose ROCm release is known (the file name's suffix).
_ROCM_OF_FILE: Final[dict[str, str]] = {"1.5.0": "5.2"}


def rocr_label(path: str) -> str:
    """``"ROCr 5.2"`` for Debian's ``libhsa-runtime64.so.1.5.0``, else the file's name."""
    try:
        real = os.path.realpath(_resolve(path))
    except OSError:  # pragma: no cover - realpath does not raise on Linux
        real = path
    match = re.search(r"\.so\.(\d+\.\d+\.\d+)$", real)
    if match and match.group(1) in _ROCM_OF_FILE:
        return f"ROCr {_ROCM_OF_FILE[match.group(1)]}"
    return os.path.basename(real) or path


def _resolve(path: str) -> str:
    if os.sep in path:
        return path
    for directory in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/opt/rocm/lib"):
        candidate = os.path.join(directory, path)
        if os.path.exists(candidate):
            return candidate
    return path


class HsaLibrary(VendorLibrary):
    """A loaded libhsa-runtime64: prototypes, error table, interface version, init count."""

    def __init__(self, native: NativeLibrary, names: HsaStatusNames) -> None:
        super().__init__(native, REQUIRED, OPTIONAL)
        self.names = names
        names.lookup = status_string_function(native.function("hsa_status_string"))
        self.has = native.has
        self.interface: tuple[int, int] = C.interface_of(self.has)
        self.label = rocr_label(self.path)
        self._lock = threading.Lock()
        self._initialized = False

    def vmem_missing(self) -> str | None:
        """Why this library has no virtual-memory API (None when it has it)."""
        absent = [n for n in C.VMEM_FUNCTIONS if not self.has(n)]
        if not absent:
            return None
        which = "all of hsa_amd_vmem_*" if len(absent) == len(C.VMEM_FUNCTIONS) else ", ".join(absent)
        return f"{self.label} has no virtual memory API ({self.path} lacks {which}); needs ROCm 6.0+"

    def dmabuf_missing(self) -> str | None:
        """Why this library cannot export dma-bufs (None when it can)."""
        if all(self.has(n) for n in C.DMABUF_FUNCTIONS):
            return None
        return (
            f"{self.label} has no dma-buf export ({self.path} lacks hsa_amd_portable_export_dmabuf): "
            "needs ROCm 5.6+ (AMD interface 1.1)"
        )

    @property
    def interface_text(self) -> str:
        major, minor = self.interface
        return f"AMD interface {major}.{minor}+" if self.interface > (1, 0) else "AMD interface 1.0-1.3"

    def raw(self, name: str, *args: Any) -> int:
        """Call a function returning hsa_status_t and return the status."""
        return int(self.native.function(name)(*args))

    def call(self, name: str, *args: Any, message: str | None = None) -> None:
        """Call a function returning hsa_status_t; raise the translated error on failure."""
        rc = self.raw(name, *args)
        if rc != C.HSA_STATUS_SUCCESS:
            from .errors import meaning

            raise self.errors.error(name, rc, message or meaning(name, rc))

    # -- hsa_init / hsa_shut_down ------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        return self._initialized

    def init(self) -> None:
        """``hsa_init`` once for this process; the error says why it failed."""
        with self._lock:
            if self._initialized:
                return
            rc = self.raw("hsa_init")
            if rc == C.HSA_STATUS_ERROR_OUT_OF_RESOURCES:
                kfd = "" if os.path.exists("/dev/kfd") else ": /dev/kfd does not exist"
                raise self.errors.error(
                    "hsa_init",
                    rc,
                    f"no AMD GPU / KFD (hsa_init of {self.label} failed with OUT_OF_RESOURCES{kfd})",
                    code=ErrorCode.ENOTSUP,
                )
            if rc != C.HSA_STATUS_SUCCESS:
                raise self.errors.error("hsa_init", rc, f"hsa_init of {self.label} failed")
            self._initialized = True
            _INITIALIZED.append(self)

    def shut_down(self) -> None:
        """The one ``hsa_shut_down`` matching :meth:`init` (idempotent; errors ignored at exit)."""
        with self._lock:
            if not self._initialized:
                return
            self._initialized = False
            self.raw("hsa_shut_down")


_INITIALIZED: list[HsaLibrary] = []
_CACHE: dict[str, HsaLibrary] = {}
_CACHE_LOCK = threading.Lock()


def shutdown_all() -> None:
    """``hsa_shut_down`` every library this process initialized, and forget them."""
    with _CACHE_LOCK:
        while _INITIALIZED:
            _INITIALIZED.pop().shut_down()
        _CACHE.clear()


atexit.register(shutdown_all)


def load() -> HsaLibrary:
    """Load the HSA runtime (once per path); :class:`~aml_core.errors.AMLNotSupported`
    says why not. Does not call ``hsa_init``."""
    override = os.environ.get(ENV, "").strip()
    key = override or CANDIDATES[0]
    with _CACHE_LOCK:
        found = _CACHE.get(key)
        if found is not None:
            return found
        names = HsaStatusNames()
        native = NativeLibrary.load(CANDIDATES, env=ENV, errors=make_error_table(names))
        lib = HsaLibrary(native, names)
        _CACHE[key] = lib
        return lib
