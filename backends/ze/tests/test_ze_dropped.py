"""Native objects of aml-ze dropped without close() (issue 20, items 4 and 5): a
:class:`~aml_ze.ZeArea` destroys its context, and a virtual-memory area gives back its
reservations and physical memory, once they are collected."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import aml_ze
import pytest
from aml_ze import abi as C
from ze_helpers import ZeDouble

from aml_core.errors import AMLFailure


def test_a_dropped_area_destroys_its_context(ze: ZeDouble) -> None:
    area = aml_ze.device_area()
    assert ze.live()["context"] == 1
    del area
    gc.collect()
    assert ze.live()["context"] == 0


def _hold_everything(vm: aml_ze.VirtualMemory) -> None:
    """A reservation with a mapping, one without, a physical allocation never mapped and
    a buffer: everything a virtual-memory area can hold."""
    g = vm.granularity()
    res = vm.reserve(2 * g)
    phys = vm.create(g)
    vm.map(res.ptr, g, phys)
    vm.create(g)
    vm.reserve(g)


def _drop(objects: list[object]) -> None:
    """Drop the last references to ``objects`` and collect."""
    objects.clear()
    gc.collect()


def test_a_dropped_virtual_memory_gives_back_what_it_holds(ze: ZeDouble) -> None:
    vm = aml_ze.virtual_memory(0)
    _hold_everything(vm)
    buffers = [vm.mmap(vm.granularity())]
    held = {k: n for k, n in ze.live().items() if n}
    assert held == {"context": 1, "reservation": 3, "physical": 3, "mapping": 2}
    del vm
    gc.collect()
    assert {k: n for k, n in ze.live().items() if n} == held  # the buffer holds its area
    with pytest.warns(ResourceWarning, match="unclosed"):
        _drop(buffers)
    assert {k: n for k, n in ze.live().items() if n} == {"context": 1}  # the runtime's own
    aml_ze.BACKEND.reset()  # destroys the runtime's context: nothing holds it now
    assert ze.live()["context"] == 0


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> list[BaseException]:
    """What finalizers report through ``sys.unraisablehook`` during the test."""
    seen: list[BaseException] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: seen.append(info.exc_value))
    return seen


def test_a_dropped_area_whose_context_destroy_fails(ze: ZeDouble, unraisable: list[BaseException]) -> None:
    """The failure is reported as a GC-driven free's is, and the context is kept: the
    backend's reset() destroys it."""
    area = aml_ze.host_area()
    ze.inject("zeContextDestroy", C.ZE_RESULT_ERROR_DEVICE_LOST)
    del area
    gc.collect()
    assert [type(e) for e in unraisable] == [AMLFailure]
    assert "zeContextDestroy" in str(unraisable[0])
    assert ze.live()["context"] == 1
    aml_ze.BACKEND.reset()
    assert ze.live()["context"] == 0


def test_a_dropped_virtual_memory_whose_release_fails(ze: ZeDouble, unraisable: list[BaseException]) -> None:
    """The failure is reported as a GC-driven free's is; what could not be given back is
    kept, with its area, and the backend's reset() gives it back (then destroys the
    runtime's context, which a leftover reservation would keep in use)."""
    vm = aml_ze.virtual_memory(0)
    _hold_everything(vm)
    ze.inject("zeVirtualMemFree", C.ZE_RESULT_ERROR_DEVICE_LOST)
    del vm
    gc.collect()
    assert [type(e) for e in unraisable] == [AMLFailure]
    assert ze.live()["reservation"] == 1
    aml_ze.BACKEND.reset()
    assert {k: n for k, n in ze.live().items() if n} == {}


CHILD = """
import gc, json, sys
import aml_ze
areas = [aml_ze.device_area(), aml_ze.host_area()]
with_buffer = aml_ze.host_area()
buf = with_buffer.mmap(4096)
vm = aml_ze.virtual_memory(0)
g = vm.granularity()
res = vm.reserve(2 * g)
phys = vm.create(g)
vm.map(res.ptr, g, phys)
vmbuf = vm.mmap(g)
dropped = aml_ze.device_area()
cycle = [aml_ze.virtual_memory(0)]
cycle.append(cycle)
cycle[0].reserve(g)
del dropped, cycle
print(json.dumps({"ok": True}))
"""


def test_left_at_interpreter_exit(ze: ZeDouble) -> None:
    """Areas and virtual memory still held (or in a cycle) at interpreter exit: the
    process exits cleanly, nothing reported (its exit returns the memory)."""
    proc = subprocess.run(
        [sys.executable, "-X", "dev", "-c", CHILD],
        capture_output=True,
        text=True,
        env=ze.env(),
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Exception ignored" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"ok": True}
