"""The hooks a backend plugin implements (pluggy). These docstrings are the reference.

A plugin is a module named by an entry point in the group ``aml.backends``::

    # pyproject.toml of the distribution aml-cxl
    [project.entry-points."aml.backends"]
    cxl = "aml_cxl.plugin"

The module must be cheap to import (no native library loaded at import time): the
registry imports every installed plugin to list backends. A plugin object can also be
registered in-process with ``aml_core.register(plugin, name=...)``; it takes the same
path through pluggy as an entry point.
"""

from __future__ import annotations

from collections.abc import Sequence

import pluggy

from .descriptor import BackendDescriptor

PROJECT = "aml"

hookspec = pluggy.HookspecMarker(PROJECT)
#: Decorate your hook implementations with this marker.
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def aml_backends() -> Sequence[BackendDescriptor]:  # type: ignore[empty-body]
    """Return the backends this plugin provides.

    Called once per process by the registry (results are cached; tests may call
    ``aml_core.registry.reset()``). Must not touch hardware: put that in the
    descriptor's ``probe``. An exception here, or a return value that is not
    descriptors, makes the plugin ``broken`` with the error as reason; it never stops
    other backends. The registry calls it through its pluggy manager's ``pm.hook``, one
    plugin at a time, so hook wrappers and pluggy's tracing see each call. Two plugins
    declaring the same backend name: the higher priority wins (ties: distribution name,
    then plugin name); the other is ``shadowed``.

    Complete example (the module ``aml_cxl/plugin.py`` of a third-party backend)::

        from aml_core import (AMLTypeError, BackendDescriptor, Capability, DeviceInfo,
                              Kind, ProbeResult, hookimpl)

        def _probe() -> ProbeResult:
            import os
            if not os.path.exists("/dev/dax0.0"):
                return ProbeResult.unavailable("no /dev/dax0.0 device")
            return ProbeResult(
                available=True,
                devices=(DeviceInfo(index=0, name="CXL DAX 0.0", total_memory=64 << 30),),
            )

        def _create_area(kind: Kind, device: int | None = None, **options: object):
            if options:   # an unknown option is the caller's mistake: AMLTypeError
                raise AMLTypeError(f"unknown cxl area option(s) {sorted(options)}")
            from aml_cxl.area import DaxArea   # heavy imports happen here, lazily
            return DaxArea(device=device or 0)

        @hookimpl
        def aml_backends():
            return [BackendDescriptor(
                name="cxl", priority=50, kinds={Kind.HOST},
                probe=_probe, create_area=_create_area,
                capabilities=Capability.BUFFER_PROTOCOL | Capability.FILE_BACKED,
                description="CXL memory through a DAX device",
            )]
    """
