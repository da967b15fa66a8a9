"""AML error codes, their messages, the exception hierarchy and native-error translation.

Python callers never see sentinel return values: every failure is an :class:`AMLError`
whose :attr:`~AMLError.code` is one of AML's error numbers and, when a native call
failed, whose :attr:`~AMLError.native` names the backend, the function and the native
code. Each AML code has one exception class that also derives from the natural builtin
exception, so ``except MemoryError`` or ``except ValueError`` work as a Python
programmer expects:

========  =========================  ===============================================
code      class                      also derives from
========  =========================  ===============================================
FAILURE   :class:`AMLFailure`        :class:`RuntimeError`
ENOMEM    :class:`AMLMemoryError`    :class:`MemoryError`
EINVAL    :class:`AMLValueError`     :class:`ValueError`
          :class:`AMLTypeError`      :class:`ValueError` and :class:`TypeError`
EDOM      :class:`AMLDomainError`    :class:`ValueError`
ENOTSUP   :class:`AMLNotSupported`   :class:`NotImplementedError`
EBUSY     :class:`AMLBusyError`      :class:`RuntimeError`
EPERM     :class:`AMLPermissionError` :class:`PermissionError`
========  =========================  ===============================================

A backend translates native return codes with an :class:`ErrorTable`; a native code
missing from the table maps to FAILURE, never to success.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import NoReturn

import attrs

__all__ = [
    "AMLBusyError",
    "AMLDomainError",
    "AMLError",
    "AMLFailure",
    "AMLMemoryError",
    "AMLNotSupported",
    "AMLPermissionError",
    "AMLTypeError",
    "AMLValueError",
    "ErrorCode",
    "ErrorTable",
    "NativeCause",
    "error_class",
    "make_error",
    "strerror",
]


class ErrorCode(enum.IntEnum):
    """AML's error numbers (``aml/utils/error.h``)."""

    SUCCESS = 0
    FAILURE = 1
    ENOMEM = 2
    EINVAL = 3
    EDOM = 4
    ENOTSUP = 5
    EBUSY = 6
    EPERM = 7


_MESSAGES: dict[int, str] = {
    ErrorCode.SUCCESS: "Success",
    ErrorCode.FAILURE: "Generic error",
    ErrorCode.ENOMEM: "Not enough memory",
    ErrorCode.EINVAL: "Invalid argument",
    ErrorCode.EDOM: "Value out of bound",
    ErrorCode.ENOTSUP: "Operation not supported",
    ErrorCode.EBUSY: "Underlying resource is not available for operation",
    ErrorCode.EPERM: "Insufficient permissions",
}


def strerror(code: int) -> str:
    """Return AML's message for ``code``; negative codes (AML returns ``-AML_E...``)
    are read as their absolute value. A value outside AML's 0..7 is not an AML error
    code, and the message says so (``strerror(22)``: ``"Unknown error: 22 is not an AML
    error code (0..7)"``; an errno such as EINVAL=22 is not AML's EINVAL=3)."""
    try:
        value = abs(int(code))
    except (TypeError, ValueError, OverflowError):
        return f"Unknown error: {code!r} is not an AML error code (0..{max(ErrorCode)})"
    message = _MESSAGES.get(value)
    if message is None:
        return f"Unknown error: {value} is not an AML error code (0..{max(ErrorCode)})"
    return message


@attrs.frozen
class NativeCause:
    """The native call behind an :class:`AMLError`."""

    backend: str
    function: str
    code: int
    name: str

    def __str__(self) -> str:
        return f"{self.backend}: {self.function} returned {self.name} ({self.code})"


class AMLError(Exception):
    """Base of every error raised by aml.

    ``code`` is the AML :class:`ErrorCode`; ``native`` is the :class:`NativeCause`
    when a native call failed, else ``None``.
    """

    code: ErrorCode = ErrorCode.FAILURE

    def __init__(self, message: str | None = None, *, native: NativeCause | None = None) -> None:
        """``message``: what went wrong (default: :func:`strerror` of the class's code);
        ``native``: the :class:`NativeCause` of a failed native call, appended to the
        message as ``[backend: function returned NAME (code)]``."""
        self.native = native
        self._raw_message = message
        text = message if message is not None else strerror(self.code)
        if native is not None:
            text = f"{text} [{native}]"
        super().__init__(text)
        self.message = text

    def __reduce__(self) -> tuple[object, ...]:
        # Keep the class, the message and the native cause across pickling
        # (for errors sent back from worker processes).
        return (_rebuild, (type(self), self._raw_message, self.native))


def _rebuild(cls: type[AMLError], message: str | None, native: NativeCause | None) -> AMLError:
    return cls(message, native=native)


class AMLFailure(AMLError, RuntimeError):
    """FAILURE: a generic error, including any native error the backend's table does not know."""

    code = ErrorCode.FAILURE


class AMLMemoryError(AMLError, MemoryError):
    """ENOMEM: not enough memory."""

    code = ErrorCode.ENOMEM


class AMLValueError(AMLError, ValueError):
    """EINVAL: an invalid argument."""

    code = ErrorCode.EINVAL


class AMLTypeError(AMLValueError, TypeError):
    """EINVAL for an argument of the wrong type (also a :class:`TypeError`)."""


class AMLDomainError(AMLError, ValueError):
    """EDOM: a value out of bound (a size beyond the address space, a NUMA node
    outside the allowed set)."""

    code = ErrorCode.EDOM


class AMLNotSupported(AMLError, NotImplementedError):
    """ENOTSUP: the operation is not supported here (no device, no driver, a
    capability the backend lacks)."""

    code = ErrorCode.ENOTSUP


class AMLBusyError(AMLError, RuntimeError):
    """EBUSY: the underlying resource is not available (a device in use, a buffer
    still exported to a consumer)."""

    code = ErrorCode.EBUSY


class AMLPermissionError(AMLError, PermissionError):
    """EPERM: insufficient permissions."""

    code = ErrorCode.EPERM


_CLASSES: dict[ErrorCode, type[AMLError]] = {
    ErrorCode.FAILURE: AMLFailure,
    ErrorCode.ENOMEM: AMLMemoryError,
    ErrorCode.EINVAL: AMLValueError,
    ErrorCode.EDOM: AMLDomainError,
    ErrorCode.ENOTSUP: AMLNotSupported,
    ErrorCode.EBUSY: AMLBusyError,
    ErrorCode.EPERM: AMLPermissionError,
}


def error_class(code: int) -> type[AMLError]:
    """The exception class for an AML code; SUCCESS and unknown values give
    :class:`AMLFailure` (an error is never reported as success)."""
    try:
        return _CLASSES[ErrorCode(abs(int(code)))]
    except (ValueError, KeyError):
        return AMLFailure


def make_error(code: int, message: str | None = None, *, native: NativeCause | None = None) -> AMLError:
    """Build (not raise) the exception for ``code``."""
    return error_class(code)(message, native=native)


def _as_dict(mapping: Mapping[int, ErrorCode]) -> dict[int, ErrorCode]:
    return dict(mapping)


def _default_name(code: int) -> str:
    return f"error {code}"


@attrs.frozen
class ErrorTable:
    """A backend's translation of native return codes into AML codes.

    ``mapping`` lists the native codes the backend knows; anything else is FAILURE.
    ``success`` is the native success value. ``name`` turns a native code into its
    native name for messages (``hipGetErrorName``, ``cudaGetErrorName``, ...); it
    must not raise.

    Example::

        HIP_ERRORS = ErrorTable(
            backend="hip",
            mapping={2: ErrorCode.ENOMEM, 1: ErrorCode.EINVAL, 101: ErrorCode.EINVAL},
            name=lambda code: hip.error_name(code),
        )
        HIP_ERRORS.check("hipMalloc", lib.hipMalloc(ctypes.byref(ptr), size))
    """

    backend: str
    mapping: Mapping[int, ErrorCode] = attrs.field(converter=_as_dict)
    name: Callable[[int], str] = _default_name
    success: int = 0

    def __attrs_post_init__(self) -> None:
        for native, code in self.mapping.items():
            if ErrorCode(code) is ErrorCode.SUCCESS:
                raise ValueError(
                    f"{self.backend}: native code {native} is mapped to SUCCESS; "
                    "only the table's success value means success"
                )

    def translate(self, native_code: int) -> ErrorCode:
        """The AML code for a failing native code (FAILURE when unknown)."""
        return ErrorCode(self.mapping.get(int(native_code), ErrorCode.FAILURE))

    def cause(self, function: str, native_code: int) -> NativeCause:
        code = int(native_code)
        try:
            name = self.name(code)
        except Exception:  # a name lookup must never hide the real error
            name = f"error {code}"
        return NativeCause(backend=self.backend, function=function, code=code, name=name)

    def error(
        self,
        function: str,
        native_code: int,
        message: str | None = None,
        *,
        code: ErrorCode | None = None,
    ) -> AMLError:
        """Build the exception for a failed native call. ``code`` overrides the
        table where the specification gives a call its own rule."""
        aml_code = code if code is not None else self.translate(native_code)
        return make_error(aml_code, message, native=self.cause(function, native_code))

    def check(self, function: str, native_code: int, message: str | None = None) -> None:
        """Return if ``native_code`` is success, else raise the translated error."""
        if int(native_code) != self.success:
            raise self.error(function, native_code, message)

    def fail(self, function: str, native_code: int, message: str | None = None) -> NoReturn:
        raise self.error(function, native_code, message)
