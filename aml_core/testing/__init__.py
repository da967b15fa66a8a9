"""aml's conformance kit: a pytest plugin (opt-in) with reusable test classes.

Enable it with ``pytest -p aml_core.testing`` or ``pytest_plugins = ["aml_core.testing"]``
in a conftest, then subclass the classes below in your test modules (see
docs/backend-authoring.md). The plugin adds the ``aml_registry`` fixture: a fresh,
isolated registry for tests that register plugins by hand, and the ``gpu`` and ``gpu2``
markers. :mod:`aml_core.testing.lifetime` has the helpers of garbage-collected buffers,
:mod:`aml_core.testing.hook_fakes` stand-ins for CuPy and PyTorch.

The kit needs pytest: ``pip install 'aml-core[test]'`` (the ``test`` extra) brings it.
"""

from __future__ import annotations

from collections.abc import Iterator

try:
    import pytest
except ModuleNotFoundError as exc:  # pragma: no cover - tested in a child without pytest
    if exc.name != "pytest":
        raise
    raise ModuleNotFoundError(
        "aml_core.testing (the conformance kit) needs pytest, which is not installed: "
        "install aml-core with its test extra, pip install 'aml-core[test]'",
        name="pytest",
    ) from exc

from ..registry import Registry
from .conformance import (
    AreaConformance,
    IpcConformance,
    ManagedConformance,
    PooledIpcConformance,
    VirtualMemoryConformance,
)

__all__ = [
    "GPU2_MARKER",
    "GPU_MARKER",
    "AreaConformance",
    "IpcConformance",
    "ManagedConformance",
    "PooledIpcConformance",
    "VirtualMemoryConformance",
    "aml_registry",
]

#: The ``gpu`` marker: a test that needs a real GPU and its driver.
GPU_MARKER = "gpu: needs a real GPU and its driver (skipped elsewhere with the reason)"
#: The ``gpu2`` marker: a test of two devices. A driver double's host mode may emulate
#: them; on one real GPU the test skips with "needs 2 GPUs, this machine has 1".
GPU2_MARKER = (
    "gpu2: needs two devices: two GPUs, or a driver double's host mode emulating them "
    "(skipped elsewhere with the reason)"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", GPU_MARKER)
    config.addinivalue_line("markers", GPU2_MARKER)
    config.addinivalue_line("markers", "numa: needs several NUMA nodes")


@pytest.fixture
def aml_registry() -> Iterator[Registry]:
    """A registry that loads no entry points: register plugins with ``register()``."""
    reg = Registry(group="aml.backends.__isolated_for_tests__", builtins=False)
    yield reg
    reg.reset()
