"""Free device memory through Level Zero's Sysman API (``zes*``).

Level Zero's core API has no free-memory query; Sysman has. A device's memory modules
(``zesDeviceEnumMemoryModules``) each say where they are (``zesMemoryGetProperties``:
``ZES_MEM_LOC_DEVICE`` on the device, ``ZES_MEM_LOC_SYSTEM`` in the host's memory) and
how many bytes are free (``zesMemoryGetState``: ``free`` of ``size``, for every process).
A device's free memory is the sum over its device-located modules (a GPU of two tiles
lists one module per tile); system-memory modules are left out.

Sysman has its own device handles, found one of two ways, never both (the specification
asks applications not to mix them):

* **legacy**, when ``ZES_ENABLE_SYSMAN=1`` was in the environment when ``zeInit`` ran: the
  driver then initialised Sysman with the core API, and a core device handle *is* the
  Sysman handle (API 1.4's ``typedef ze_device_handle_t zes_device_handle_t``). This is
  the only way with Debian's 1.8.12 loader (API 1.4), which has no ``zesInit``;
* **zesInit** otherwise, when the loader exports it (spec 1.5, loader 1.9+): ``zesInit(0)``
  once, then ``zesDriverGet`` / ``zesDeviceGet``; each Sysman device is matched to a
  core device by UUID (``zesDeviceGetProperties``'s ``core.uuid`` against
  ``zeDeviceGetProperties``'s), since the two lists need not be in the same order. A
  UUID that two devices share matches neither.

aml-ze never sets ``ZES_ENABLE_SYSMAN`` itself: it changes how the driver initialises
for the whole process. Everything that goes wrong (a loader without Sysman, a failed
``zesInit``, no matching device, no device-located module, a failed query) makes the
answer "not known" (None, or an :class:`~aml_core.errors.AMLError` that
:meth:`aml_core.gpu.runtime.Runtime.free_memory` reads as None): free memory is a
report, and a report never fails the probe. Why the handles could not be found is kept in
:attr:`Sysman.reason`; the search is not retried.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from ctypes import byref, c_uint32, c_void_p
from typing import Final

from aml_core.errors import AMLError, AMLFailure

from . import abi as C
from .errors import result_name
from .native import ZeLibrary

__all__ = ["LEGACY_ENV", "Sysman"]

#: The variable that, set to 1 before ``zeInit``, makes core handles Sysman handles.
LEGACY_ENV: Final = "ZES_ENABLE_SYSMAN"
_MODERN: Final = ("zesInit", "zesDriverGet", "zesDeviceGet", "zesDeviceGetProperties")
_MEMORY: Final = ("zesDeviceEnumMemoryModules", "zesMemoryGetProperties", "zesMemoryGetState")


def _vp(value: int) -> c_void_p:
    return c_void_p(value or None)


class Sysman:
    """The Sysman handles of a runtime's core devices, found on first use, and their free
    memory (see the module doc)."""

    def __init__(
        self,
        library: ZeLibrary,
        devices: Sequence[int],
        uuid_of: Callable[[int], bytes],
        *,
        legacy: bool,
    ) -> None:
        """``devices``: the core device handles, by index; ``uuid_of(index)``: a core
        device's UUID; ``legacy``: ``ZES_ENABLE_SYSMAN=1`` was set when ``zeInit`` ran."""
        self.lib = library
        self.devices = tuple(devices)
        self.uuid_of = uuid_of
        #: "legacy" or "zesInit": how Sysman handles are found
        self.way: Final = "legacy" if legacy else "zesInit"
        #: why there are no Sysman handles (None: found, or not searched yet)
        self.reason: str | None = None
        self._lock = threading.Lock()
        self._handles: tuple[int | None, ...] | None = None

    # -- handles -------------------------------------------------------------------------
    def handle(self, device: int) -> int | None:
        """The Sysman handle of core device ``device`` (None: Sysman cannot tell)."""
        with self._lock:
            if self._handles is None:
                try:
                    self._handles = self._find()
                except AMLError as exc:
                    self.reason = str(exc)
                    self._handles = (None,) * len(self.devices)
                if self.reason is None and not any(self._handles):
                    self.reason = "no Sysman device matches a core device (by UUID)"
            return self._handles[device] if 0 <= device < len(self._handles) else None

    def _missing(self, names: Sequence[str]) -> list[str]:
        return [name for name in names if not self.lib.has(name)]

    def _find(self) -> tuple[int | None, ...]:
        missing = self._missing(_MEMORY if self.way == "legacy" else (*_MODERN, *_MEMORY))
        if missing:
            hint = f" (a loader before 1.9: set {LEGACY_ENV}=1 before zeInit)" if "zesInit" in missing else ""
            raise AMLFailure(f"{self.lib.path} does not export {', '.join(missing)}{hint}")
        if self.way == "legacy":
            return tuple(self.devices)
        rc = self.lib.raw("zesInit", 0)
        if rc != C.ZE_RESULT_SUCCESS:
            raise AMLFailure(f"zesInit returned {result_name(rc)}: no driver supports Sysman")
        by_uuid: dict[bytes, int] = {}
        seen: Counter[bytes] = Counter()
        for driver in self._list("zesDriverGet"):
            for handle in self._list("zesDeviceGet", _vp(driver)):
                props = C.zes_device_properties_t()
                props.stype = C.ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES
                props.core.stype = C.ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES
                self.lib.call("zesDeviceGetProperties", _vp(handle), byref(props))
                uuid = bytes(props.core.uuid)
                seen[uuid] += 1
                by_uuid[uuid] = handle
        cores = [self.uuid_of(i) for i in range(len(self.devices))]
        seen.update(cores)  # a UUID two core devices share is ambiguous too
        return tuple(by_uuid.get(u) if seen[u] == 2 else None for u in cores)

    def _list(self, function: str, *args: object) -> list[int]:
        """The handles a ``(..., uint32_t *pCount, handle *out)`` call lists."""
        count = c_uint32(0)
        self.lib.call(function, *args, byref(count), None)
        if count.value == 0:
            return []
        out = (c_void_p * count.value)()
        self.lib.call(function, *args, byref(count), out)
        handles = [int(out[i] or 0) for i in range(min(count.value, len(out)))]
        if not all(handles):
            raise AMLFailure(f"{function} returned SUCCESS and a NULL handle")
        return handles

    # -- free memory ---------------------------------------------------------------------
    def free_memory(self, device: int) -> int | None:
        """Free bytes of core device ``device``: the sum over its device-located memory
        modules. None when Sysman cannot tell; a failed query raises its AMLError."""
        handle = self.handle(device)
        if handle is None:
            return None
        free, found = 0, False
        for module in self._list("zesDeviceEnumMemoryModules", _vp(handle)):
            props = C.zes_mem_properties_t()
            props.stype = C.ZES_STRUCTURE_TYPE_MEM_PROPERTIES
            props.location = 0xFFFFFFFF  # left so by a "success" that fills nothing: skipped
            self.lib.call("zesMemoryGetProperties", _vp(module), byref(props))
            if props.location != C.ZES_MEM_LOC_DEVICE:
                continue
            state = C.zes_mem_state_t()
            state.stype = C.ZES_STRUCTURE_TYPE_MEM_STATE
            self.lib.call("zesMemoryGetState", _vp(module), byref(state))
            if state.size == 0 or state.free > state.size:
                raise AMLFailure(
                    f"zesMemoryGetState returned SUCCESS and {state.free} bytes free of {state.size}"
                )
            free += int(state.free)
            found = True
        return free if found else None
