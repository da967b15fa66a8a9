"""aml-cuda's native binding: NVIDIA's ``cuda-bindings``, imported here and nowhere else.

:func:`bindings` imports it, checks its version and returns the runtime and driver API
modules, or raises :class:`~aml_core.errors.AMLNotSupported` with the reason (missing, too
old, broken). It is called at each load (``aml_cuda.load_runtime``), so a probe always
says why. The values the bindings use come from the bindings' own enums (see
docs/native-abi.md#cuda): unlike the ctypes backends, aml-cuda has no ``abi.py``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from types import ModuleType

from aml_core.errors import AMLNotSupported

__all__ = [
    "CYRUNTIME_SENTINEL",
    "MIN_BINDINGS",
    "bindings",
    "bindings_version",
    "cyruntime_functions",
    "display_driver_version",
]

#: The oldest cuda-bindings major version with the CUDA 13 call forms used here.
MIN_BINDINGS = 13


def bindings() -> tuple[ModuleType, ModuleType]:
    """``(cuda.bindings.runtime, cuda.bindings.driver)``, checked; touches no device."""
    try:
        import cuda.bindings as package  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except Exception as exc:
        raise AMLNotSupported(
            f"cuda-bindings is not installed (pip install 'cuda-bindings>={MIN_BINDINGS}'): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    version = str(getattr(package, "__version__", "0"))
    try:
        major = int(version.split(".", 1)[0])
    except ValueError:
        major = 0
    if major < MIN_BINDINGS:
        raise AMLNotSupported(
            f"aml-cuda needs cuda-bindings>={MIN_BINDINGS} (CUDA 13 call forms); found {version}"
        )
    try:
        from cuda.bindings import driver as drv  # type: ignore[import-untyped, import-not-found, unused-ignore]
        from cuda.bindings import runtime as rt  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except Exception as exc:
        raise AMLNotSupported(
            f"cuda-bindings {version} could not be loaded: {type(exc).__name__}: {exc}"
        ) from exc
    return rt, drv


def bindings_version() -> str:
    """The installed cuda-bindings version, ``"0"`` if it has none, ``""`` if missing."""
    try:
        import cuda.bindings  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except Exception:
        return ""
    return str(getattr(cuda.bindings, "__version__", "0"))


def display_driver_version() -> str:
    """The NVIDIA kernel driver's version (``580.159.04``), read from
    ``/proc/driver/nvidia/version`` without touching the GPU; ``""`` if unknown."""
    try:
        with open("/proc/driver/nvidia/version", encoding="ascii", errors="replace") as f:
            first = f.readline()
    except OSError:
        return ""
    for word in first.split():
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return word
    return ""


#: What cuda-bindings' ``cyruntime`` functions return when they may have raised a Python
#: exception (they are declared ``except ?cudaErrorCallRequiresNewerDriver nogil``).
CYRUNTIME_SENTINEL = 36

_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def cyruntime_functions(names: Iterable[str]) -> dict[str, tuple[int, str]]:
    """The C functions of ``cuda.bindings.cyruntime`` (the runtime API that
    ``cuda.bindings.runtime`` calls), from the PyCapsules Cython exports them in for
    cimport (``__pyx_capi__``): name -> (address, its C signature: the capsule's name). Needs
    no CUDA header, no compilation and no driver. AMLNotSupported if one is missing."""
    try:
        from cuda.bindings import cyruntime  # type: ignore[import-untyped, import-not-found, unused-ignore]

        capi = cyruntime.__pyx_capi__
    except Exception as exc:
        raise AMLNotSupported(
            f"cuda-bindings {bindings_version()} exports no cyruntime functions: {type(exc).__name__}: {exc}"
        ) from exc
    out: dict[str, tuple[int, str]] = {}
    for name in names:
        capsule = capi.get(name)
        if capsule is None:
            raise AMLNotSupported(f"cuda.bindings.cyruntime does not export {name}")
        signature = _capsule_name(capsule)
        address = _capsule_pointer(capsule, signature)
        if not address:
            raise AMLNotSupported(f"the cuda.bindings.cyruntime capsule of {name} holds no address")
        out[name] = (int(address), signature.decode() if signature else "")
    return out
