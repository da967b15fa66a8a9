"""What every part of :class:`aml_cuda.runtime.CudaRuntime` calls CUDA through: the
bindings (bound once, :func:`aml_cuda.native.bindings`), the two error tables and the
driver API's set-up (``cuInit``, the ``CUdevice`` of an index).

Calls go through :meth:`CudaCalls._call` / :meth:`CudaCalls._dcall` (checked) or
:meth:`CudaCalls._raw` (a call whose codes are answers), which look the function up in
the bindings here (tests replace ``_rt`` / ``_drv`` of this module); only the hot path
(:mod:`aml_cuda.runtime`'s allocation, :mod:`aml_cuda.streams`' stream-ordered calls) binds
its functions once. A runtime call's failure goes through :meth:`CudaCalls._fail` (the runtime's last error
cleared, :data:`~aml_cuda.errors.RUNTIME_ERRORS`), a driver call's through
:meth:`CudaCalls._dfail` (:data:`~aml_cuda.errors.DRIVER_ERRORS`).
"""

from __future__ import annotations

import abc
import contextlib
from typing import Any, NoReturn

from aml_core.errors import AMLNotSupported, ErrorTable

from .native import bindings

__all__ = ["CudaCalls", "version_text"]

_rt, _drv = bindings()
_cudaGetLastError = _rt.cudaGetLastError


def _outputs(out: list[Any]) -> Any:
    return out[0] if len(out) == 1 else tuple(out) if out else None


def version_text(v: int) -> str:
    """A CUDA version number (13000) as ``"13.0"``."""
    return f"{v // 1000}.{(v % 1000) // 10}"


class CudaCalls(abc.ABC):
    """The error tables and driver set-up a part of the runtime calls (set by
    :class:`~aml_cuda.runtime.CudaRuntime`)."""

    errors: ErrorTable
    driver_errors: ErrorTable
    _driver_ready: bool

    def _fail(self, function: str, err: Any, message: str | None = None) -> NoReturn:
        with contextlib.suppress(Exception):
            self._clear_last_error()  # clear the runtime's last error: it is reported here
        raise self.errors.error(function, int(err), message)

    def _dfail(self, function: str, err: Any, message: str | None = None) -> NoReturn:
        raise self.driver_errors.error(function, int(err), message)

    def _raw(self, function: str, *args: Any) -> Any:
        """``cuda.bindings.runtime.<function>(*args)`` as it answers: ``(error, outputs...)``
        (for a call whose error codes are answers, not failures)."""
        return getattr(_rt, function)(*args)

    def _call(self, function: str, *args: Any, message: str | None = None) -> Any:
        """``cuda.bindings.runtime.<function>(*args)``, checked: its output (None when it
        has none, a tuple when several); a failure raised through :meth:`_fail` with
        ``message``."""
        err, *out = getattr(_rt, function)(*args)
        if err:
            self._fail(function, err, message)
        return _outputs(out)

    def _dcall(self, function: str, *args: Any, message: str | None = None) -> Any:
        """:meth:`_call` of the driver API (``cuda.bindings.driver``), a failure raised
        through :meth:`_dfail`."""
        err, *out = getattr(_drv, function)(*args)
        if err:
            self._dfail(function, err, message)
        return _outputs(out)

    def _hot(self, function: str, result: Any, *args: int) -> Any:
        """The result of a hot-path call (a function bound once), checked: its output (as
        :meth:`_call`'s); a failure raised by :meth:`_native_fail`, which words it from
        ``args`` only then."""
        err, *out = result
        if err:
            self._native_fail(function, err, *args)
        return _outputs(out)

    def _native_fail(self, function: str, code: int, *args: int) -> NoReturn:
        """The error of a hot-path call, and the compiled allocator's error hook (so that
        both raise the same): ``args`` are the call's size (and flags), or the device
        of ``cudaSetDevice``."""
        message = None
        if function == "cudaSetDevice":
            message = f"could not select CUDA device {args[0]}"
        elif function == "cudaHostAlloc":
            size, flags = args
            message = f"cudaHostAlloc of {size} bytes (flags 0x{flags:x}) failed"
        elif args:
            message = f"{function} of {args[0]} bytes failed"
        self._fail(function, code, message)

    def _clear_last_error(self) -> None:
        """Read (and so clear) the runtime's last error: an answer such as "peer access
        already enabled" is recorded like any failure and would surface later."""
        _cudaGetLastError()

    def _driver(self) -> None:
        """``cuInit(0)`` once; a missing driver library is ENOTSUP (the bindings raise
        a cuda.pathfinder error instead of returning a CUresult)."""
        if self._driver_ready:
            return
        try:
            (err,) = _drv.cuInit(0)
        except Exception as exc:
            raise AMLNotSupported(
                f"the NVIDIA driver library (libcuda.so.1) could not be loaded: {type(exc).__name__}: {exc}"
            ) from exc
        if err:
            self._dfail("cuInit", err, "the CUDA driver could not be initialized")
        self._driver_ready = True

    def _cu_device(self, device: int) -> Any:
        self._driver()
        return self._dcall("cuDeviceGet", device, message=f"no CUDA device {device}")
