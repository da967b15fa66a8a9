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
from hsa_helpers import HsaDouble

from tests.support.double_fixtures import double_conftest

pytest_configure, pytest_collection_modifyitems, hsa, double_library = double_conftest(
    HsaDouble, "hsa", "host memory, IPC", "this run forwards to CUDA", also=("hsa_built",)
)


@pytest.fixture
def hsa_built(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[tuple[int, int]], HsaDouble]]:
    with HsaDouble.factory(monkeypatch) as make:
        yield make
