"""aml-cuda's native binding: NVIDIA's ``cuda-bindings``, imported here and nowhere else.

:func:`bindings` imports it, checks its version and returns the runtime and driver API
modules, or raises :class:`~aml_core.errors.AMLNotSupported` with the reason (missing, too
old, broken). It is called at each load (``aml_cuda.load_runtime``), so a probe always
says why. The values the bindings use come from the bindings' own enums (see
docs/native-abi.md#cuda): unlike the ctypes backends, aml-cuda has no ``abi.py``.
"""

from __future__ import annotations

from types import ModuleType

from aml_core.errors import AMLNotSupported

__all__ = ["MIN_BINDINGS", "bindings", "bindings_version", "display_driver_version"]

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
