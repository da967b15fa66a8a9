"""A GPU backend built from a runtime: AML's area API (``aml_area_<name>_create``,
``aml_area_<name>_destroy``, the default areas), IPC, virtual memory, streams and the probe
(the plugin descriptor is in :mod:`.plugin`).

``aml_cuda`` and ``aml_hip`` are each one :class:`GpuBackend` over their own runtime, and
their public functions *are* its bound methods (``aml_hip.create is aml_hip.BACKEND.create``):
the API is written here once, and a backend package only names its backend."""

from __future__ import annotations

import threading
from collections.abc import Callable

from .. import checks
from ..buffer import Buffer
from ..descriptor import ProbeResult
from ..errors import AMLError, AMLNotSupported, AMLTypeError, AMLValueError
from ..specs import Capability, Kind
from .area import GpuArea
from .devices import usable_device_count, usable_runtime
from .flags import GpuFlags, flags_for_kind
from .ipc import IpcHandle, IpcImportArea
from .peer import copy_peer
from .plugin import GPU_KINDS
from .runtime import Group, PeerOps, PointerAttributes, Runtime
from .stream import Stream
from .vmm import VirtualMemory

__all__ = ["GpuBackend"]


class GpuBackend:
    """One GPU backend. ``load_runtime`` is called lazily, once; it raises
    :class:`~aml_core.errors.AMLNotSupported` when the native library or driver is
    missing."""

    def __init__(
        self,
        name: str,
        load_runtime: Callable[[], Runtime],
        *,
        description: str = "",
        precheck: Callable[[], str | None] | None = None,
    ) -> None:
        """``name`` — the registered backend name; ``load_runtime`` — called once, on
        first use, to load the :class:`Runtime` (raises ``AMLNotSupported`` when the
        library or driver is missing); ``description`` — one line for ``aml info``;
        ``precheck`` — a cheap test run by :meth:`probe` before loading the runtime,
        returning why the backend cannot work here, or None."""
        self.name = name
        self.description = description
        self._load_runtime = load_runtime
        #: A cheaper test run by :meth:`probe` before loading the runtime: it returns
        #: why the backend cannot work here (no driver library...), or None.
        self._precheck = precheck
        self._runtime: Runtime | None = None
        self._lock = threading.Lock()
        self._imports: IpcImportArea | None = None
        self._defaults: dict[GpuFlags, GpuArea] = {}
        self._peer: PeerOps | None = None

    @property
    def runtime(self) -> Runtime:
        """The loaded runtime (loads it on first use)."""
        with self._lock:
            if self._runtime is None:
                self._runtime = self._load_runtime()
            return self._runtime

    def _usable_runtime(self) -> Runtime:
        """The runtime of a call that needs a device: a missing library, driver or device
        raises :class:`AMLNotSupported` worded as everywhere (:mod:`.devices`)."""
        rt = usable_runtime(self.name, lambda: self.runtime)
        usable_device_count(rt)
        return rt

    def reset(self) -> None:
        """Forget the loaded runtime and the cached areas (tests switch libraries)."""
        with self._lock:
            if self._imports is not None:
                self._imports.close()
            for area in self._defaults.values():
                area.close()
            self._imports = None
            self._defaults.clear()
            self._runtime = None
            self._peer = None

    # -- AML area API --------------------------------------------------------------------
    def create(self, device: int = -1, flags: int | GpuFlags = GpuFlags.DEFAULT) -> GpuArea:
        """``aml_area_cuda_create`` / ``aml_area_hip_create(&area, device, flags)``: a new
        area; close it (or :meth:`destroy` it) when done.

        ``device`` is a device index, or negative for the current device at mmap time.
        Errors: no usable driver or device → ENOTSUP
        (:class:`~aml_core.errors.AMLNotSupported`, "no usable <backend> device: ...");
        the device count cannot be read for another reason → FAILURE
        (:class:`~aml_core.errors.AMLFailure`); ``device`` >= the device count → EINVAL;
        unknown flag bits → EINVAL (docs/aml-contract.md#hip-area).
        """
        return GpuArea(usable_runtime(self.name, lambda: self.runtime), device, flags)

    @staticmethod
    def destroy(area: GpuArea) -> None:
        """``aml_area_cuda_destroy`` / ``aml_area_hip_destroy``: free whatever the area
        still holds (the same as ``area.close()``). Idempotent."""
        area.close()

    def _default(self, flags: GpuFlags) -> GpuArea:
        with self._lock:
            area = self._defaults.get(flags)
        if area is None or area.closed:
            area = GpuArea(usable_runtime(self.name, lambda: self.runtime), -1, flags)
            with self._lock:
                self._defaults[flags] = area
        return area

    def default_area(self) -> GpuArea:
        """``aml_area_cuda`` / ``aml_area_hip``: device memory on the current device,
        visible by a single device, not mapped on the host (shared: do not close it)."""
        return self._default(GpuFlags.DEFAULT)

    def unified_area(self) -> GpuArea:
        """``aml_area_cuda_unified`` / ``aml_area_hip_unified``: managed memory on the
        current device (shared: do not close it)."""
        return self._default(GpuFlags.ALLOC_UNIFIED)

    # -- IPC, virtual memory, streams ----------------------------------------------------
    def ipc_open(self, handle: IpcHandle) -> Buffer:
        """Open an IPC handle exported by another process: maps the device memory with
        lazy peer access; opening the same handle again returns the same buffer (close it
        as many times). Close before the exporter frees."""
        with self._lock:
            if self._imports is None or self._imports.closed:
                self._imports = IpcImportArea(self._runtime or self._load_runtime())
            imports = self._imports
        return imports.open(handle)

    def ipc_close(self, buffer: Buffer) -> None:
        """Close one open of an imported buffer (the native close on the last)."""
        buffer.area.munmap(buffer)

    def virtual_memory(self, device: int = 0) -> VirtualMemory:
        """The virtual-memory API and area of a device (reserve, create, map, access,
        export/import a POSIX fd, retain, properties, granularity); close it when done."""
        rt = usable_runtime(self.name, lambda: self.runtime)
        device = checks.c_int(device, "device")
        count = usable_device_count(rt)
        if not 0 <= device < count:
            raise AMLValueError(f"device {device!r} is not in 0..{count - 1}")
        return VirtualMemory(rt, device)

    def stream(self, *, non_blocking: bool = False) -> Stream:
        """A new stream (``cudaStreamCreateWithFlags`` / ``hipStreamCreateWithFlags``);
        close it when done. No usable driver or device: :class:`AMLNotSupported`, as
        :meth:`create` says it."""
        return Stream(self._usable_runtime(), non_blocking=non_blocking)

    # -- several devices: peer access and copies (docs/aml-contract.md#peer-access) -------
    def _peer_ops(self) -> PeerOps:
        """The runtime's PEER group, once a device was found (kept until :meth:`reset`:
        ``copy_peer`` of small buffers should not count devices every time)."""
        ops = self._peer
        if ops is None:
            ops = self._peer = self._usable_runtime().require(Group.PEER)
        return ops

    def can_access_peer(self, device: int, peer: int) -> bool:
        """``cudaDeviceCanAccessPeer`` / ``hipDeviceCanAccessPeer``: whether ``device``
        can reach ``peer``'s memory directly once peer access is enabled (False for a
        device and itself)."""
        return self._peer_ops().can_access_peer(device, peer)

    def enable_peer_access(self, peer: int, device: int | None = None) -> bool:
        """Let ``device`` (None or negative: the caller's current device, which is
        restored) reach ``peer``'s memory. Idempotent: True if this call enabled it,
        False if it was enabled already. A pair without a peer path is ENOTSUP."""
        return self._peer_ops().enable_peer_access(peer, device)

    def disable_peer_access(self, peer: int, device: int | None = None) -> bool:
        """Stop ``device`` (None or negative: the current device) reaching ``peer``'s
        memory. Idempotent: True if this call disabled it, False if it was not enabled."""
        return self._peer_ops().disable_peer_access(peer, device)

    def copy_peer(
        self, dst: Buffer, src: Buffer, size: int | None = None, *, dst_offset: int = 0, src_offset: int = 0
    ) -> None:
        """Copy ``size`` bytes (default: all of ``src`` after ``src_offset``) between two
        device buffers, each on its own device (``cudaMemcpyPeer`` / ``hipMemcpyPeer``);
        returns when the bytes are copied. See :func:`aml_core.gpu.peer.copy_peer`."""
        copy_peer(self._peer_ops(), dst, src, size, dst_offset=dst_offset, src_offset=src_offset)

    def pointer_attributes(self, ptr: int | Buffer) -> PointerAttributes:
        """``cudaPointerGetAttributes`` / ``hipPointerGetAttributes`` of an address or a
        buffer's ``ptr``."""
        address = ptr.ptr if isinstance(ptr, Buffer) else ptr
        return self.runtime.require(Group.ALLOCATION).pointer_attributes(address)

    # -- plugin --------------------------------------------------------------------------
    def probe(self) -> ProbeResult:
        """Whether the backend is usable here, and why not (never raises): loads the
        runtime, counts devices and reads their properties."""
        if self._runtime is None and self._precheck is not None:
            why = self._precheck()
            if why:
                return ProbeResult.unavailable(why)
        versions: dict[str, str] = {}  # what was found, also when no device is
        try:
            rt = self.runtime
            versions = dict(rt.traits.versions)
            count = rt.device_count()
            if count <= 0:
                return ProbeResult(available=False, reason=f"no {self.name} device found", versions=versions)
            devices = tuple(rt.device_info(i) for i in range(count))
        except AMLError as exc:
            return ProbeResult(available=False, reason=str(exc), versions=versions)
        caps = Capability.NONE
        for dev in devices:
            caps |= dev.capabilities
        return ProbeResult(
            available=True,
            detail=f"{count} device(s)",
            devices=devices,
            capabilities=caps,
            versions=versions,
        )

    def create_area(
        self, kind: Kind, device: int | None = None, *, all_devices: bool = False, **options: object
    ) -> GpuArea:
        """The ``aml_core.area(kind=...)`` factory: DEVICE → DEFAULT, HOST → ALLOC_HOST,
        MANAGED → ALLOC_UNIFIED, MAPPED → ALLOC_MAPPED | ALLOC_HOST; ``all_devices``
        adds ALLOC_GLOBAL."""
        if options:
            raise AMLTypeError(f"unknown {self.name} area options {sorted(options)}; allowed: all_devices")
        if kind not in GPU_KINDS:  # pragma: no cover - the registry checks kinds
            raise AMLNotSupported(f"{self.name} does not provide {kind.value} memory")
        return self.create(-1 if device is None else device, flags_for_kind(kind, all_devices=all_devices))
