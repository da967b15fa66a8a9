"""Fixtures of the aml-hip tests.

The tests run the backend against the HIP driver double (``backends/hip/tests/native/double.c``):

* ``AML_HIP_TEST_DOUBLE=host`` (default): the double over host memory, built with gcc;
  tests that need it skip with the reason when gcc is missing.
* ``AML_HIP_TEST_DOUBLE=forward``: the double forwarding every hip* call to CUDA, as
  HIP's NVIDIA platform does; every test that uses the double is then marked ``gpu``,
  and tests that need the host mode (emulated devices, AMD-only advice) skip.

The ``hip`` fixture points ``AML_HIP_LIBRARY`` at the double, resets it and
``aml_hip.BACKEND``, and after the test checks that nothing leaked (the double's live
counts are back to 0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

# hip_helpers first: it puts aml_core / aml_hip on sys.path when they are not installed.
from hip_helpers import HipDouble, aml_hip

from aml_core.gpu import Stream
from tests.support.double_fixtures import double_conftest

pytest_configure, pytest_collection_modifyitems, hip, double_library = double_conftest(
    HipDouble, "hip", "emulated devices or AMD-only behaviour", "AML_HIP_TEST_DOUBLE=forward runs CUDA"
)


@pytest.fixture
def hip_built(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int | None], HipDouble]]:
    """aml_hip running on a double built for one version (its file name and symbols
    follow that version: ``libamdhip64.so.5`` without hipExtHostAlloc for 5.2)."""
    with HipDouble.factory(monkeypatch) as make:
        yield lambda version: make(version=version)


@pytest.fixture
def areas(hip: HipDouble) -> Iterator[Callable[..., aml_hip.HipArea]]:
    """``areas(device, flags)`` creates an area that is closed after the test."""
    made: list[aml_hip.HipArea] = []

    def make(device: int = 0, flags: int = 0) -> aml_hip.HipArea:
        area = aml_hip.create(device, flags)
        made.append(area)
        return area

    yield make
    for area in made:
        area.close()


@pytest.fixture
def streams(hip: HipDouble) -> Iterator[Callable[[], Stream]]:
    """``streams()`` makes a non-blocking stream, destroyed after the test."""
    made: list[Stream] = []

    def make() -> Stream:
        s = aml_hip.stream(non_blocking=True)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()
