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
from tests.support.dropped import check_dropped_vm_failure_is_kept, check_dropped_vm_gives_back


def test_a_dropped_area_destroys_its_context(ze: ZeDouble) -> None:
    area = aml_ze.device_area()
    assert ze.live()["context"] == 1
    del area
    gc.collect()
    assert ze.live()["context"] == 0


def test_a_dropped_area_whose_context_destroy_fails(ze: ZeDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    """The failure is reported as a GC-driven free's is (``sys.unraisablehook``), and the
    context is kept: the backend's reset() destroys it."""
    seen: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: seen.append(info.exc_value))
    area = aml_ze.host_area()
    ze.inject("zeContextDestroy", C.ZE_RESULT_ERROR_DEVICE_LOST)
    del area
    gc.collect()
    assert [type(e) for e in seen] == [AMLFailure]
    assert "zeContextDestroy" in str(seen[0])
    assert ze.live()["context"] == 1
    aml_ze.BACKEND.reset()
    assert ze.live()["context"] == 0


def test_a_dropped_virtual_memory_gives_back_what_it_holds(ze: ZeDouble) -> None:
    check_dropped_vm_gives_back(ze, lambda: aml_ze.virtual_memory(0))


def test_a_dropped_virtual_memory_whose_release_fails(ze: ZeDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    """What could not be given back is kept, with its area, and the backend's reset()
    gives it back (then destroys the runtime's context, which a leftover reservation
    would keep in use: HANDLE_OBJECT_IN_USE)."""
    check_dropped_vm_failure_is_kept(
        ze,
        lambda: aml_ze.virtual_memory(0),
        monkeypatch,
        "zeVirtualMemFree",
        C.ZE_RESULT_ERROR_DEVICE_LOST,
        AMLFailure,
    )


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
