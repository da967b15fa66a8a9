"""Shared fixtures of aml-cuda's tests.

Tests marked ``gpu`` need a usable CUDA device: where the backend's probe says it is
unavailable they are skipped with the probe's reason (no cuda-bindings, no driver, no
device), so the same suite runs in CI (CPU only) and on the GPU machine.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

import pytest

from aml_core.descriptor import ProbeResult

HERE = os.path.dirname(os.path.abspath(__file__))


@functools.cache
def cuda_probe() -> ProbeResult:
    try:
        import aml_cuda

        return aml_cuda.probe()
    except Exception as exc:  # the probe must not raise; report it as the reason
        return ProbeResult.unavailable(f"probe raised {type(exc).__name__}: {exc}")


def gpu_available() -> bool:
    return cuda_probe().available


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    probe = cuda_probe()
    if probe.available:
        return
    skip = pytest.mark.skip(reason=f"no usable CUDA GPU: {probe.reason}")
    for item in gpu_items:
        item.add_marker(skip)


def child_env() -> dict[str, str]:
    """The environment of a child Python process: the parent's sys.path, so that it
    imports the same aml_core and aml_cuda (installed or from the source tree)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


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
