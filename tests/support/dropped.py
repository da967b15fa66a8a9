"""Virtual memory dropped without close() (issue 20, item 5), checked the same way on every
backend's double: collected, it gives back what it holds; a release that fails then is
reported through ``sys.unraisablehook`` and retried by the backend's ``reset()``."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import Any

import pytest

from aml_core.errors import AMLError
from aml_core.gpu.vmm import VirtualMemory

from .double_fixtures import DriverDouble

__all__ = ["check_dropped_vm_gives_back", "check_dropped_vm_failure_is_kept", "hold_everything"]


def _held(double: DriverDouble) -> dict[str, int]:
    return {kind: n for kind, n in double.live().items() if n}


def _objects(double: DriverDouble) -> dict[str, int]:
    """The live native objects, less HSA's hsa_init count (reset() leaves it)."""
    return {kind: n for kind, n in _held(double).items() if kind != "init"}


def hold_everything(vm: VirtualMemory) -> list[Any]:
    """Make ``vm`` hold one of each thing: a reservation with a mapping, one without, a
    physical allocation never mapped, and a buffer (returned in a list, its only reference)."""
    g = vm.granularity()
    res = vm.reserve(2 * g)
    phys = vm.create(g)
    vm.map(res.ptr, g, phys)
    vm.create(g)
    vm.reserve(g)
    return [vm.mmap(g)]


def _drop(objects: list[Any]) -> None:
    objects.clear()
    gc.collect()


def check_dropped_vm_gives_back(double: DriverDouble, make: Callable[[], VirtualMemory]) -> None:
    """A virtual-memory area dropped unclosed lives while its buffer does (a buffer holds
    its area), then gives back everything, with a ResourceWarning, when collected."""
    vms = [make()]
    buffers = hold_everything(vms[0])
    held = _held(double)
    _drop(vms)
    assert _held(double) == held  # the buffer holds its area
    with pytest.warns(ResourceWarning, match="unclosed"):
        _drop(buffers)
    double.forget()  # the backend's reset(): unloads the runtime (ze: destroys its context)
    assert _objects(double) == {}


def check_dropped_vm_failure_is_kept(
    double: DriverDouble,
    make: Callable[[], VirtualMemory],
    monkeypatch: pytest.MonkeyPatch,
    function: str,
    error: int,
    error_type: type[AMLError],
) -> None:
    """``function`` (a release call) fails once while a dropped virtual-memory area gives
    back what it holds: the error is reported through ``sys.unraisablehook``, as a
    GC-driven free's is, what was not given back stays held, and the backend's reset()
    gives it back."""
    seen: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: seen.append(info.exc_value))
    vms = [make()]
    buffers = hold_everything(vms[0])
    buffers.clear()  # freed now: the area holds the rest
    double.inject(function, error)
    _drop(vms)
    assert [type(exc) for exc in seen] == [error_type]
    assert function in str(seen[0])
    assert _held(double)  # kept for reset()
    double.forget()  # the backend's reset(): closes the kept area, then unloads
    assert _objects(double) == {}
