"""Fixtures of the aml-hsa tests.

* ``hsa``: aml_hsa running on the driver double (``native/double.c``, interface 1.6) in the
  mode of ``AML_HSA_TEST_DOUBLE`` (``host`` by default; ``forward`` forwards memory to CUDA
  and marks the tests ``gpu``). Reset before; after the test, nothing may be left: no
  object tracked by aml-hsa, no native object in the double, hsa_init's count back to 0.
* ``hsa_built(interface)``: the same on a double emulating an older interface ((1, 4):
  ROCm 6.0/6.1 without reserve_align; (1, 0): ROCr 5.2 without hsa_amd_vmem_*).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from hsa_helpers import MODE, HsaDouble, build_double

from aml_core.testing.double_fixtures import add_double_markers, mark_double_items


def pytest_configure(config: pytest.Config) -> None:
    add_double_markers(config, "the HSA driver double", "host memory, IPC")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_double_items(items, ("hsa", "hsa_built"), MODE, "this run forwards to CUDA")


@pytest.fixture
def hsa(monkeypatch: pytest.MonkeyPatch) -> Iterator[HsaDouble]:
    with HsaDouble.running(build_double(), monkeypatch) as double:
        yield double


@pytest.fixture
def hsa_built(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[tuple[int, int]], HsaDouble]]:
    with HsaDouble.factory(monkeypatch) as make:
        yield make
