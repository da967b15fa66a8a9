"""Fixtures of the aml-ze tests.

The ``ze`` fixture points ``AML_ZE_LIBRARY`` at the driver double
(``backends/ze/tests/native/double.c``), resets it and ``aml_ze.BACKEND``, and after the
test checks that nothing leaked (the double's live counts are back to 0).
``AML_ZE_TEST_DOUBLE=forward`` runs the same tests on the double's forward-to-CUDA mode;
tests that need the host mode (emulated devices, budgets) then skip.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

# ze_helpers first: it puts aml_core / aml_ze on sys.path when they are not installed.
from ze_helpers import ZeDouble, aml_ze, build_double

from tests.support.double_fixtures import double_conftest

pytest_configure, pytest_collection_modifyitems, ze, double_library = double_conftest(
    ZeDouble, "ze", "emulated devices", "AML_ZE_TEST_DOUBLE=forward"
)


@pytest.fixture
def ze_noput(monkeypatch: pytest.MonkeyPatch) -> Iterator[ZeDouble]:
    """aml_ze on a double without zeMemPutIpcHandle (Debian's 1.8.12 loader)."""
    with ZeDouble.running(build_double(put=False), monkeypatch) as double:
        yield double


@pytest.fixture
def areas(ze: ZeDouble) -> Iterator[Callable[..., aml_ze.ZeArea]]:
    """``areas(kind, **arguments)`` makes a device ("device"), shared ("shared") or host
    ("host") area that is closed after the test."""
    made: list[aml_ze.ZeArea] = []

    def make(kind: str = "device", **arguments: object) -> aml_ze.ZeArea:
        if kind == "host":
            area = aml_ze.host_area(**arguments)  # type: ignore[arg-type]
        else:
            flags = aml_ze.ZeFlags.SHARED if kind == "shared" else aml_ze.ZeFlags.DEVICE
            area = aml_ze.device_area(flags=flags, **arguments)  # type: ignore[arg-type]
        made.append(area)
        return area

    yield make
    for area in made:
        area.close()
