"""The ``aml.backends`` entry point of aml-ze: the hook implementation and the cheap
probe only.

Importing this module loads no native library. :func:`precheck` only looks at the
file system (an ``AML_ZE_LIBRARY`` that names a missing file, or no
``libze_loader.so.1`` in the usual library directories); the probe then loads the
loader and calls ``zeInit`` through :mod:`aml_ze.api`, and nothing else if it fails.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from aml_core.descriptor import BackendDescriptor
from aml_core.gpu.groups import Group, capabilities
from aml_core.gpu.plugin import lazy_descriptor
from aml_core.hookspecs import hookimpl
from aml_core.specs import Capability, Kind

if TYPE_CHECKING:
    from .area import ZeBackend

__all__ = [
    "AREA_OPTIONS",
    "CAPABILITIES",
    "DESCRIPTION",
    "GROUPS",
    "KINDS",
    "NAME",
    "aml_backends",
    "precheck",
]

NAME = "ze"
DESCRIPTION = (
    "Intel GPUs through oneAPI Level Zero (libze_loader, ctypes): AML's device, shared and "
    "host areas, IPC, virtual memory"
)
KINDS = frozenset({Kind.DEVICE, Kind.HOST, Kind.MANAGED})
#: The options of ``aml_core.area(kind=..., backend="ze")`` by kind (``ZeBackend.create_area``:
#: the host area's and the device area's arguments), declared to the registry.
_DEVICE_OPTIONS = frozenset({"ordinal", "device_flags", "alignment", "dmabuf"})
AREA_OPTIONS = {
    Kind.HOST: frozenset({"host_flags", "alignment"}),
    Kind.DEVICE: _DEVICE_OPTIONS,
    Kind.MANAGED: _DEVICE_OPTIONS,
}
#: The capability groups aml-ze's runtime provides (its areas are its own: AML's Level
#: Zero area, not the CUDA/HIP ALLOCATION group).
GROUPS = frozenset({Group.IPC, Group.VIRTUAL_MEMORY})
#: Derived from the groups, plus what the areas' memory is: shared memory is MANAGED,
#: host memory PINNED; both speak the buffer protocol; all three speak DLPack.
CAPABILITIES = capabilities(GROUPS, Capability.DLPACK) | (
    Capability.BUFFER_PROTOCOL | Capability.MANAGED | Capability.PINNED
)
_LIBRARY = "libze_loader.so.1"
_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib", "/opt/intel/oneapi/lib")


def precheck() -> str | None:
    """Why aml-ze cannot work here, from the file system alone, or None."""
    override = os.environ.get("AML_ZE_LIBRARY", "").strip()
    if override:
        if "/" in override and not os.path.exists(override):
            return f"AML_ZE_LIBRARY={override!r} does not exist"
        return None
    dirs = [*os.environ.get("LD_LIBRARY_PATH", "").split(":"), *_DIRS]
    if not any(d and os.path.exists(os.path.join(d, _LIBRARY)) for d in dirs):
        return f"no Level Zero loader ({_LIBRARY}; Debian: apt-get install libze1)"
    return None


def _backend() -> ZeBackend:
    from .api import BACKEND

    return BACKEND


@hookimpl
def aml_backends() -> list[BackendDescriptor]:
    return [
        lazy_descriptor(
            NAME, DESCRIPTION, _backend, kinds=KINDS, capabilities=CAPABILITIES, area_options=AREA_OPTIONS
        )
    ]
