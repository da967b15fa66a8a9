"""Fixtures of aml-cuda's tests.

Tests marked ``gpu`` in this directory need a usable CUDA device: where the backend's
probe says it is unavailable they are skipped with the probe's reason (no cuda-bindings,
no driver, no device), so the same suite runs in CI (CPU only) and on the GPU machine.
Tests marked ``gpu2`` need two: they skip with the same reason without a GPU, and with
"needs 2 GPUs, this machine has 1" on one.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from cuda_helpers import HERE, cuda_probe

from aml_core.testing import GPU2_MARKER


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", GPU2_MARKER)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Only this directory's items: other packages' gpu tests have their own probes.
    mine = [
        item
        for item in items
        if (item.get_closest_marker("gpu") or item.get_closest_marker("gpu2"))
        and str(item.path).startswith(HERE + os.sep)
    ]
    if not mine:
        return
    probe = cuda_probe()
    if not probe.available:
        skip = pytest.mark.skip(reason=f"no usable CUDA GPU: {probe.reason}")
        for item in mine:
            item.add_marker(skip)
        return
    count = len(probe.devices)
    if count < 2:
        two = pytest.mark.skip(reason=f"needs 2 GPUs, this machine has {count}")
        for item in mine:
            if item.get_closest_marker("gpu2") is not None:
                item.add_marker(two)


@pytest.fixture
def rt() -> Any:
    """The loaded CudaRuntime (GPU tests only)."""
    import aml_cuda

    return aml_cuda.get_runtime()


@pytest.fixture
def cupy() -> Any:
    return pytest.importorskip("cupy")


@pytest.fixture
def torch() -> Any:
    th = pytest.importorskip("torch")
    if not th.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return th
