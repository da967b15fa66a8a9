"""The public API of aml-hsa (imported on first use by :mod:`aml_hsa`).

:data:`BACKEND` is an :class:`HsaBackend`: the shared GPU logic of :mod:`aml_core.gpu`
(virtual memory, IPC import, the probe) over :class:`aml_hsa.runtime.HsaRuntime`, with
pool areas (:mod:`aml_hsa.area`) where aml-cuda and aml-hip have their allocation-group
areas. The functions are its bound methods.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aml_core import checks
from aml_core.errors import AMLNotSupported, AMLTypeError
from aml_core.gpu.backend import BackendBase
from aml_core.specs import Kind

from . import plugin
from .area import PoolArea

if TYPE_CHECKING:
    from .runtime import HsaRuntime

# The public names are declared once, in aml_hsa/__init__.pyi (the lazy exports follow it).


def load_runtime() -> HsaRuntime:
    """Load ``libhsa-runtime64``, ``hsa_init`` it (once per process; ``hsa_shut_down`` at
    exit) and discover agents and pools; ENOTSUP with the reason when no library or no
    AMD GPU (KFD) is found."""
    from .native import load
    from .runtime import HsaRuntime

    return HsaRuntime(load())


class HsaBackend(BackendBase["HsaRuntime", PoolArea]):
    """The GPU backend of HSA: areas are pool areas (DEVICE: a GPU's coarse-grained pool,
    HOST: a CPU fine-grained pool); there is no managed memory and no stream."""

    def create(self, device: int = -1, flags: object = 0) -> PoolArea:
        """Device memory of GPU ``device`` (negative: device 0; HSA has no current device).
        ``flags`` must be 0: HSA picks memory by pool, not by AML's CUDA-style flags."""
        if flags:
            raise AMLNotSupported(
                "hsa areas take no flags: use create() for device memory, host_area() for host"
            )
        d = -1 if device is None else checks.c_int(device, "device")
        return PoolArea(self.runtime, Kind.DEVICE, 0 if d < 0 else d)

    def host_area(self) -> PoolArea:
        """Host memory from a CPU agent's fine-grained pool, accessible to every GPU."""
        return PoolArea(self.runtime, Kind.HOST)

    def default_area(self) -> PoolArea:
        """Device memory of device 0 (a new area each call: close it)."""
        return self.create(0)

    def unified_area(self) -> PoolArea:
        """HSA has no managed memory: always ENOTSUP (aml-hip's ``unified_area`` has it)."""
        raise AMLNotSupported("hsa has no managed memory (use aml-hip for hipMallocManaged)")

    def create_area(self, kind: Kind, device: int | None = None, **options: object) -> PoolArea:
        """The ``aml_core.area(kind=..., backend="hsa")`` factory: DEVICE → the GPU's
        coarse-grained pool, HOST → a CPU fine-grained pool."""
        if options:
            raise AMLTypeError(f"unknown hsa area options {sorted(options)}; hsa areas take none")
        if kind is Kind.DEVICE:
            return self.create(0 if device is None else device)
        if kind is Kind.HOST:
            return self.host_area()
        raise AMLNotSupported(f"hsa provides device and host memory, not {kind.value}")


#: The HSA backend (lazy: the library is loaded and initialized on first use;
#: ``BACKEND.reset()`` forgets the runtime, e.g. after changing ``AML_HSA_LIBRARY``).
BACKEND = HsaBackend(plugin.NAME, load_runtime, precheck=plugin.precheck, description=plugin.DESCRIPTION)


def get_runtime() -> HsaRuntime:
    """The loaded :class:`~aml_hsa.runtime.HsaRuntime` (loads and initializes the library)."""
    return BACKEND.runtime
