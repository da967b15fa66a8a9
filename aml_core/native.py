"""Loading a vendor's C library through ctypes, once, for every ctypes backend.

:func:`load_library` honours the backend's override variable (``AML_HIP_LIBRARY``...)
and tries the candidate names in order; :class:`NativeLibrary` declares prototypes,
reports missing symbols clearly and turns return codes into the backend's exceptions
through its :class:`~aml_core.errors.ErrorTable`.

Example::

    lib = NativeLibrary.load(["libamdhip64.so.6", "libamdhip64.so.5"],
                             env="AML_HIP_LIBRARY", errors=HIP_ERRORS)
    lib.declare("hipMalloc", c_int, POINTER(c_void_p), c_size_t)
    ptr = c_void_p()
    lib.call("hipMalloc", byref(ptr), 1024)       # raises AMLMemoryError on hipErrorOutOfMemory
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import AMLNotSupported, ErrorTable

__all__ = ["NativeLibrary", "load_library"]


def load_library(candidates: Sequence[str], *, env: str | None = None) -> tuple[ctypes.CDLL, str]:
    """Load the first loadable library. If ``env`` names a set environment variable,
    only its path is tried. Raises :class:`AMLNotSupported` saying what was tried."""
    override = os.environ.get(env, "").strip() if env else ""
    names = [override] if override else list(candidates)
    errors: list[str] = []
    for name in names:
        try:
            return ctypes.CDLL(name, mode=ctypes.RTLD_LOCAL), name
        except OSError as exc:
            errors.append(f"{name}: {exc}")
    source = f" ({env}={override!r})" if override else ""
    raise AMLNotSupported("cannot load " + " or ".join(names) + source + ": " + "; ".join(errors))


class NativeLibrary:
    """A loaded library with declared functions and an error table."""

    def __init__(self, cdll: ctypes.CDLL, path: str, errors: ErrorTable) -> None:
        self.cdll = cdll
        self.path = path
        self.errors = errors
        self._functions: dict[str, Any] = {}

    @classmethod
    def load(cls, candidates: Sequence[str], *, env: str | None, errors: ErrorTable) -> NativeLibrary:
        cdll, path = load_library(candidates, env=env)
        return cls(cdll, path, errors)

    def has(self, name: str) -> bool:
        """True if the library exports ``name``."""
        try:
            getattr(self.cdll, name)
        except AttributeError:
            return False
        return True

    def declare(self, name: str, restype: Any, *argtypes: Any, required: bool = True) -> Any:
        """Declare a prototype; a missing required symbol is :class:`AMLNotSupported`.
        Returns the function, or None for a missing optional one."""
        try:
            fn = getattr(self.cdll, name)
        except AttributeError:
            if required:
                raise AMLNotSupported(f"{self.path} does not export {name}") from None
            return None
        fn.restype = restype
        fn.argtypes = list(argtypes)
        self._functions[name] = fn
        return fn

    def declare_all(
        self,
        required: Mapping[str, tuple[Any, Sequence[Any]]],
        optional: Mapping[str, tuple[Any, Sequence[Any]]] = {},
    ) -> None:
        """Declare a table of prototypes ``name -> (restype, argtypes)``: every required
        one (a missing symbol is :class:`AMLNotSupported`), and the optional ones present."""
        for name, (restype, argtypes) in required.items():
            self.declare(name, restype, *argtypes)
        for name, (restype, argtypes) in optional.items():
            self.declare(name, restype, *argtypes, required=False)

    def function(self, name: str) -> Any:
        try:
            return self._functions[name]
        except KeyError:
            raise AMLNotSupported(f"{name} was not declared or is missing from {self.path}") from None

    def call(self, name: str, *args: Any) -> None:
        """Call a function returning an error code; raise the translated error on failure."""
        rc = self.function(name)(*args)
        self.errors.check(name, rc)


class VendorLibrary:
    """What every ctypes backend's library wrapper (``HipLibrary``, ``ZeLibrary``,
    ``HsaLibrary``) holds: the loaded library with the backend's prototype tables declared,
    its error table and its path."""

    def __init__(
        self,
        native: NativeLibrary,
        required: Mapping[str, tuple[Any, Sequence[Any]]],
        optional: Mapping[str, tuple[Any, Sequence[Any]]],
    ) -> None:
        self.native = native
        self.errors = native.errors
        self.path = native.path
        native.declare_all(required, optional)
