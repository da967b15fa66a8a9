"""aml's conformance kit: a pytest plugin (opt-in) with reusable test classes.

Enable it with ``pytest -p aml_core.testing`` or ``pytest_plugins = ["aml_core.testing"]``
in a conftest, then subclass the classes below in your test modules (see
docs/backend-authoring.md). The plugin adds the ``aml_registry`` fixture: a fresh,
isolated registry for tests that register plugins by hand.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..registry import Registry
from .conformance import AreaConformance, IpcConformance, ManagedConformance, VirtualMemoryConformance

__all__ = [
    "AreaConformance",
    "IpcConformance",
    "ManagedConformance",
    "VirtualMemoryConformance",
    "aml_registry",
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a real GPU and its driver")
    config.addinivalue_line("markers", "gpu2: needs two devices (two GPUs, or a double emulating them)")
    config.addinivalue_line("markers", "numa: needs several NUMA nodes")


@pytest.fixture
def aml_registry() -> Iterator[Registry]:
    """A registry that loads no entry points: register plugins with ``register()``."""
    reg = Registry(group="aml.backends.__isolated_for_tests__", builtins=False)
    yield reg
    reg.reset()
