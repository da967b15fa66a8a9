"""What every part of :class:`aml_hip.runtime.HipRuntime` calls HIP through: the loaded
library (:class:`~aml_hip.native.HipLibrary`: its prototypes, error table and ABI) and the
"out pointer" call shape (``hipMalloc(&ptr, ...)``)."""

from __future__ import annotations

from ctypes import byref, c_void_p
from typing import TYPE_CHECKING

from aml_core.errors import ErrorTable

if TYPE_CHECKING:
    from .abi import HipAbi
    from .native import HipLibrary

__all__ = ["HipCalls", "vp"]


def vp(value: int) -> c_void_p:
    """A pointer argument (0 is NULL)."""
    return c_void_p(value or None)


class HipCalls:
    """The library a part of the runtime calls (set by :class:`~aml_hip.runtime.HipRuntime`)."""

    lib: HipLibrary
    errors: ErrorTable
    abi: HipAbi
    version: int

    def _out_ptr(self, name: str, *args: object) -> int:
        out = c_void_p()
        self.lib.call(name, byref(out), *args)
        return int(out.value or 0)

    def _out_ptr_message(self, name: str, message: str, *args: object) -> int:
        """:meth:`_out_ptr` with the message a failure raises."""
        out = c_void_p()
        self.lib.call(name, byref(out), *args, message=message)
        return int(out.value or 0)
