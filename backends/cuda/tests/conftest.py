"""Fixtures of aml-cuda's tests.

Tests marked ``gpu`` in this directory need a usable CUDA device: where the backend's
probe says it is unavailable they are skipped with the probe's reason (no cuda-bindings,
no driver, no device), so the same suite runs in CI (CPU only) and on the GPU machine.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from cuda_helpers import HERE, cuda_probe


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Only this directory's items: other packages' gpu tests have their own probes.
    mine = [
        item
        for item in items
        if item.get_closest_marker("gpu") is not None and str(item.path).startswith(HERE + os.sep)
    ]
    if not mine:
        return
    probe = cuda_probe()
    if probe.available:
        return
    skip = pytest.mark.skip(reason=f"no usable CUDA GPU: {probe.reason}")
    for item in mine:
        item.add_marker(skip)


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
