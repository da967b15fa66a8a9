"""No ``Any`` in a public signature where a type exists (issue 31 item 6): what the
registry's value objects take is typed (``Area.mmap``'s options, ``munmap_on`` and the
stream are the allocation contract's, reworked there)."""

from __future__ import annotations

import inspect

import pytest

from aml_core import BackendDescriptor, ProbeResult


@pytest.mark.parametrize(
    ("cls", "field", "expected"),
    [
        (BackendDescriptor, "kinds", "Iterable[Kind | str] | Kind | str"),
        (ProbeResult, "devices", "Iterable[DeviceInfo]"),
        (ProbeResult, "versions", "Mapping[str, str]"),
    ],
)
def test_value_objects_say_what_they_take(cls: type, field: str, expected: str) -> None:
    annotation = inspect.signature(cls).parameters[field].annotation
    assert annotation == expected, f"{cls.__name__}({field}: {annotation})"
