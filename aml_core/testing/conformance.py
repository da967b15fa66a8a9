"""Reusable conformance tests that any backend runs against its own areas.

Subclass a class and provide its fixture; tests a backend cannot pass skip by the
capabilities the area declares (``area.capabilities``)::

    import pytest
    from aml_core.testing import AreaConformance

    class TestMyArea(AreaConformance):
        @pytest.fixture
        def area(self):
            area = MyArea()
            yield area
            area.close()

Data is written and read through the buffer protocol for host-accessible memory and
through ``area.write(buf, data)`` / ``area.read(buf)`` otherwise (GPU areas have them);
override :meth:`AreaConformance.write` / :meth:`AreaConformance.read` if yours differ.

The classes are written by concern, each in its module: what every area does
(:mod:`.conformance_mapping`), the zero-copy protocols (:mod:`.conformance_views`),
garbage collection (:mod:`.conformance_lifetime`), the entry point and factory
(:mod:`.conformance_discovery`), IPC (:mod:`.conformance_ipc`), managed memory
(:mod:`.conformance_managed`) and virtual memory (:mod:`.conformance_vmm`), over what
they share (:mod:`.conformance_base`).
"""

from __future__ import annotations

from .conformance_discovery import DiscoveryChecks
from .conformance_ipc import IpcConformance, PooledIpcConformance
from .conformance_lifetime import LifetimeChecks
from .conformance_managed import ManagedConformance
from .conformance_mapping import MappingChecks
from .conformance_views import ViewChecks
from .conformance_vmm import VirtualMemoryConformance

__all__ = [
    "AreaConformance",
    "IpcConformance",
    "ManagedConformance",
    "PooledIpcConformance",
    "VirtualMemoryConformance",
]


class AreaConformance(MappingChecks, DiscoveryChecks, ViewChecks, LifetimeChecks):
    """What every area must do. Needs a fixture ``area`` yielding a fresh, open area.

    Settings (class attributes to override): :attr:`sizes`, :attr:`threads`,
    :attr:`rounds`, :attr:`enomem_size`, :attr:`leak_rounds`, :attr:`registered`; the
    leak-check hook :meth:`native_live`; :meth:`write` / :meth:`read`."""
