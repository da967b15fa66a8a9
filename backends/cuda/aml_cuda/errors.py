"""CUDA's native error codes translated into AML's (docs/aml-contract.md#cuda-area, on ``cudaError_t``).

Runtime API (``cudaError_t``), as AML's HIP/CUDA area documents it:

=====================================================  ==========
native                                                 AML
=====================================================  ==========
cudaErrorInsufficientDriver, cudaErrorNoDevice         ENOTSUP
cudaErrorMemoryAllocation                              ENOMEM
cudaErrorInvalidValue, cudaErrorInvalidDevice          EINVAL
cudaErrorDeviceAlreadyInUse, cudaErrorDevicesUnavailable  EBUSY
cudaErrorInitializationError                           FAILURE
cudaErrorNotSupported (extension)                      ENOTSUP
cudaErrorPeerAccessUnsupported (extension)             ENOTSUP
cudaErrorNotPermitted (extension)                      EPERM
anything else                                          FAILURE
=====================================================  ==========

The extensions are not in AML's area: its C library folds them into FAILURE, but a
caller can act on "not supported here" (also: "no peer path between these devices")
and "not permitted" differently, so they get the AML codes of the same name. The peer
calls' "already enabled" and "not enabled" (704, 705) are answers of the idempotent
``enable_peer_access`` / ``disable_peer_access``, never raised
(docs/aml-contract.md#peer-access).

Driver API (``CUresult``, used for virtual memory) follows the same rules:
CUDA_ERROR_NO_DEVICE, and the driver's "no usable driver" codes CUDA_ERROR_STUB_LIBRARY
and CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (its equivalents of cudaErrorInsufficientDriver)
→ ENOTSUP; CUDA_ERROR_OUT_OF_MEMORY → ENOMEM; CUDA_ERROR_INVALID_VALUE and
CUDA_ERROR_INVALID_DEVICE → EINVAL; CUDA_ERROR_CONTEXT_ALREADY_IN_USE and
CUDA_ERROR_DEVICE_UNAVAILABLE (the same numbers as the runtime's device-in-use codes)
→ EBUSY; CUDA_ERROR_NOT_INITIALIZED → FAILURE; CUDA_ERROR_NOT_SUPPORTED → ENOTSUP;
CUDA_ERROR_NOT_PERMITTED → EPERM; CUDA_ERROR_PEER_ACCESS_UNSUPPORTED → ENOTSUP (as the
runtime's); anything else → FAILURE.

Names come from ``cudaGetErrorName`` / ``cuGetErrorName``; a name lookup never raises
(with no driver, ``cuGetErrorName`` cannot be called: the enum's name is used).
"""

from __future__ import annotations

from aml_core.errors import ErrorCode, ErrorTable

from .native import bindings

_rt, _drv = bindings()

__all__ = [
    "DRIVER_ERRORS",
    "DRIVER_MAPPING",
    "RUNTIME_ERRORS",
    "RUNTIME_MAPPING",
    "driver_error_name",
    "runtime_error_name",
]

_E = _rt.cudaError_t
_R = _drv.CUresult

#: ``cudaError_t`` → AML code (the rest is FAILURE).
RUNTIME_MAPPING: dict[int, ErrorCode] = {
    int(_E.cudaErrorInsufficientDriver): ErrorCode.ENOTSUP,
    int(_E.cudaErrorNoDevice): ErrorCode.ENOTSUP,
    int(_E.cudaErrorMemoryAllocation): ErrorCode.ENOMEM,
    int(_E.cudaErrorInvalidValue): ErrorCode.EINVAL,
    int(_E.cudaErrorInvalidDevice): ErrorCode.EINVAL,
    int(_E.cudaErrorDeviceAlreadyInUse): ErrorCode.EBUSY,
    int(_E.cudaErrorDevicesUnavailable): ErrorCode.EBUSY,
    int(_E.cudaErrorInitializationError): ErrorCode.FAILURE,
    int(_E.cudaErrorNotSupported): ErrorCode.ENOTSUP,
    int(_E.cudaErrorPeerAccessUnsupported): ErrorCode.ENOTSUP,
    int(_E.cudaErrorNotPermitted): ErrorCode.EPERM,
}

#: ``CUresult`` → AML code (the rest is FAILURE).
DRIVER_MAPPING: dict[int, ErrorCode] = {
    int(_R.CUDA_ERROR_NO_DEVICE): ErrorCode.ENOTSUP,
    int(_R.CUDA_ERROR_STUB_LIBRARY): ErrorCode.ENOTSUP,
    int(_R.CUDA_ERROR_SYSTEM_DRIVER_MISMATCH): ErrorCode.ENOTSUP,
    int(_R.CUDA_ERROR_OUT_OF_MEMORY): ErrorCode.ENOMEM,
    int(_R.CUDA_ERROR_INVALID_VALUE): ErrorCode.EINVAL,
    int(_R.CUDA_ERROR_INVALID_DEVICE): ErrorCode.EINVAL,
    int(_R.CUDA_ERROR_CONTEXT_ALREADY_IN_USE): ErrorCode.EBUSY,
    int(_R.CUDA_ERROR_DEVICE_UNAVAILABLE): ErrorCode.EBUSY,
    int(_R.CUDA_ERROR_NOT_INITIALIZED): ErrorCode.FAILURE,
    int(_R.CUDA_ERROR_NOT_SUPPORTED): ErrorCode.ENOTSUP,
    int(_R.CUDA_ERROR_NOT_PERMITTED): ErrorCode.EPERM,
    int(_R.CUDA_ERROR_PEER_ACCESS_UNSUPPORTED): ErrorCode.ENOTSUP,
}


def _enum_name(enum_type: object, code: int, prefix: str) -> str:
    try:
        return str(enum_type(code).name)  # type: ignore[operator]
    except Exception:
        return f"{prefix} {code}"


def runtime_error_name(code: int) -> str:
    """``cudaGetErrorName(code)``; never raises."""
    try:
        err, name = _rt.cudaGetErrorName(code)
        if int(err) == 0 and name and name != b"unrecognized error code":
            return bytes(name).decode(errors="replace")
    except Exception:
        pass
    return _enum_name(_E, code, "cudaError_t")


def driver_error_name(code: int) -> str:
    """``cuGetErrorName(code)``; never raises (with no driver: the enum's name)."""
    try:
        err, name = _drv.cuGetErrorName(code)
        if int(err) == 0 and name:
            return bytes(name).decode(errors="replace")
    except Exception:
        pass
    return _enum_name(_R, code, "CUresult")


RUNTIME_ERRORS = ErrorTable(backend="cuda", mapping=RUNTIME_MAPPING, name=runtime_error_name)
DRIVER_ERRORS = ErrorTable(backend="cuda", mapping=DRIVER_MAPPING, name=driver_error_name)
