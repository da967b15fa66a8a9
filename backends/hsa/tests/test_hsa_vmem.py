"""The hsa_amd_vmem_* API under the vendor's names: ROCr's own test sequence (rocrtst's
functional virtual_memory test), read-only mappings that really fault, export/import of a
dma-buf fd between processes, and bad input, each a clear AML error that leaks nothing."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from ctypes import byref, c_int, c_uint64, c_void_p
from typing import Any

import pytest
from aml_hsa import MemoryType, Permission
from aml_hsa import abi as C
from hsa_helpers import HERE, HsaDouble, aml_hsa, open_fds

from aml_core.errors import AMLBusyError, AMLFailure, AMLNotSupported, AMLTypeError, AMLValueError
from aml_core.gpu.runtime import Group
from aml_core.specs import Capability
from tests.support.dropped import check_dropped_vm_failure_is_kept, check_dropped_vm_gives_back

CHILD = HERE / "hsa_children.py"


def _gpu() -> aml_hsa.Agent:
    return aml_hsa.get_runtime().gpus[0]


def _cpu() -> aml_hsa.Agent:
    return next(a for a in aml_hsa.agents() if a.type is aml_hsa.AgentType.CPU)


def _one_mapping() -> tuple[int, int, int]:
    """One granule of the device pool mapped in a reservation of its own: (granule, va, handle)."""
    pool = aml_hsa.device_pool(0)
    g = pool.granule
    va = aml_hsa.address_reserve(g)
    h = aml_hsa.handle_create(pool, g)
    aml_hsa.map(va, g, h)
    return g, va, h


def test_rocrtst_sequence(hsa: HsaDouble) -> None:
    """Reserve 20 granules; handles of type NONE and PINNED with their properties; map;
    NONE before set_access; RO then RW per agent; retain and release; unmap; free."""
    pool = aml_hsa.device_pool(0)
    g = pool.granule
    gpu = _gpu()
    va = aml_hsa.address_reserve(20 * g)
    assert va % g == 0
    handles = {kind: aml_hsa.handle_create(pool, g, kind) for kind in (MemoryType.NONE, MemoryType.PINNED)}
    for kind, handle in handles.items():
        assert aml_hsa.get_alloc_properties_from_handle(handle) == (pool, kind)
    first, second = va, va + 2 * g
    aml_hsa.map(first, g, handles[MemoryType.NONE])
    aml_hsa.map(second, g, handles[MemoryType.PINNED])
    assert aml_hsa.get_access(first, gpu) is Permission.NONE
    aml_hsa.set_access(first, g, [(gpu, Permission.RO)])
    assert aml_hsa.get_access(first, gpu) is Permission.RO
    aml_hsa.set_access(first, g, [(gpu, Permission.RW)])
    assert aml_hsa.get_access(first, gpu) is Permission.RW
    assert aml_hsa.get_access(first + g - 1, gpu) is Permission.RW  # any address of the mapping
    with pytest.raises(AMLValueError, match="not mapped"):
        aml_hsa.get_access(va + 10 * g, gpu)
    retained = aml_hsa.retain_alloc_handle(first)
    assert retained == handles[MemoryType.NONE]
    aml_hsa.handle_release(retained)
    # data through the mapping (hsa_memory_copy: host memory here, device memory forwarded)
    rt = aml_hsa.get_runtime()
    src = ctypes.create_string_buffer(bytes(range(64)), 64)
    rt.memory_copy(first, ctypes.addressof(src), 64)
    dst = ctypes.create_string_buffer(64)
    rt.memory_copy(ctypes.addressof(dst), first, 64)
    assert dst.raw == bytes(range(64))
    for address, handle in ((first, handles[MemoryType.NONE]), (second, handles[MemoryType.PINNED])):
        aml_hsa.unmap(address, g)
        aml_hsa.handle_release(handle)
        with pytest.raises(AMLValueError, match="released"):
            aml_hsa.handle_release(handle)
    aml_hsa.address_free(va, 20 * g)
    assert hsa.calls("hsa_amd_vmem_handle_release") == 3


def test_release_while_mapped_keeps_the_memory(hsa: HsaDouble) -> None:
    """The mapping keeps a released handle alive; retain gives it back; unmap frees it."""
    g, va, h = _one_mapping()
    aml_hsa.handle_release(h)
    assert hsa.live()["handle"] == 1
    with pytest.raises(AMLValueError):
        aml_hsa.get_alloc_properties_from_handle(h)
    again = aml_hsa.retain_alloc_handle(va)
    assert again == h
    aml_hsa.handle_release(again)
    aml_hsa.unmap(va, g)
    assert hsa.live()["handle"] == 0
    aml_hsa.address_free(va, g)


def test_set_access_replaces_every_agent(hsa: HsaDouble) -> None:
    """A second set_access overwrites the permissions of the agents it does not name."""
    g, va, h = _one_mapping()
    try:
        aml_hsa.set_access(va, g, [(_gpu(), Permission.RW)])
        if hsa.mode == "host":
            aml_hsa.set_access(va, g, [(_cpu(), Permission.RO)])
            assert aml_hsa.get_access(va, _cpu()) is Permission.RO
            assert aml_hsa.get_access(va, _gpu()) is Permission.NONE
    finally:
        aml_hsa.unmap(va, g)
        aml_hsa.handle_release(h)
        aml_hsa.address_free(va, g)


@pytest.mark.host_double
@pytest.mark.parametrize(("task", "faults"), [("ro-write", True), ("rw-write", False)])
def test_read_only_really_faults(hsa: HsaDouble, task: str, faults: bool) -> None:
    proc = subprocess.run(
        [sys.executable, str(CHILD), task],
        env=hsa.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "WRITING" in proc.stdout, proc.stderr
    if faults:
        assert proc.returncode == -signal.SIGSEGV, (proc.returncode, proc.stdout, proc.stderr)
        assert "WROTE" not in proc.stdout
    else:
        assert proc.returncode == 0, proc.stderr
        assert "WROTE" in proc.stdout


def test_export_import_in_process(hsa: HsaDouble) -> None:
    pool = aml_hsa.device_pool(0)
    h = aml_hsa.handle_create(pool, pool.granule)
    fd = aml_hsa.export_shareable_handle(h)
    try:
        other = aml_hsa.import_shareable_handle(fd)
        assert aml_hsa.get_alloc_properties_from_handle(other)[0] == pool
        aml_hsa.handle_release(other)
    finally:
        os.close(fd)
        aml_hsa.handle_release(h)


def test_reserve_align(hsa: HsaDouble) -> None:
    g = aml_hsa.device_pool(0).granule
    align = 1 << 21
    va = aml_hsa.address_reserve_align(g, 0, align)
    assert va % align == 0
    aml_hsa.address_free(va, g)
    with pytest.raises(AMLValueError, match="power of two"):
        aml_hsa.address_reserve_align(g, 0, 3 * 4096)


def test_interface_1_4_has_no_reserve_align(hsa_built: Callable[[tuple[int, int]], HsaDouble]) -> None:
    hsa_built((1, 4))
    rt = aml_hsa.get_runtime()
    assert rt.lib.interface == (1, 4)
    g = aml_hsa.device_pool(0).granule
    with pytest.raises(AMLNotSupported, match=r"reserve_align .*ROCm 6\.2"):
        aml_hsa.address_reserve_align(g, 0, 1 << 21)
    vm = aml_hsa.virtual_memory(0)
    try:
        with pytest.raises(AMLNotSupported, match=r"interface 1\.6"):
            vm.reserve(g, alignment=1 << 21)
        res = vm.reserve(g)  # no alignment asked: plain reserve
        vm.address_free(res)
    finally:
        vm.close()


def test_rocr_5_2_has_no_vmem(hsa_built: Callable[[tuple[int, int]], HsaDouble]) -> None:
    hsa_built((1, 0))
    rt = aml_hsa.get_runtime()
    assert rt.lib.interface == (1, 0)
    assert Group.VIRTUAL_MEMORY not in rt.groups()
    why = rt.missing_groups()
    assert Group.VIRTUAL_MEMORY in why
    assert "needs ROCm 6.0+" in why[Group.VIRTUAL_MEMORY]
    assert Group.IPC in rt.groups()
    with pytest.raises(AMLNotSupported, match="no virtual memory API"):
        aml_hsa.address_reserve(4096)
    with pytest.raises(AMLNotSupported, match=r"needs ROCm 6\.0"):
        aml_hsa.virtual_memory(0)
    pool = aml_hsa.device_pool(0)
    assert pool.rec_granule == pool.granule  # no REC_GRANULE before 6.0
    probe = aml_hsa.probe()
    assert probe.available
    assert not probe.capabilities & Capability.VIRTUAL_MEMORY
    assert probe.capabilities & Capability.IPC


# -- bad input: a clear AML error, nothing leaked --------------------------------------------------


class _State:
    def __init__(self) -> None:
        self.pool = aml_hsa.device_pool(0)
        self.g = self.pool.granule
        self.va = aml_hsa.address_reserve(4 * self.g)
        self.h = aml_hsa.handle_create(self.pool, self.g)
        aml_hsa.map(self.va, self.g, self.h)
        self.loose = aml_hsa.handle_create(self.pool, self.g)

    def close(self) -> None:
        aml_hsa.handle_release(self.loose)
        aml_hsa.unmap(self.va, self.g)
        aml_hsa.handle_release(self.h)
        aml_hsa.address_free(self.va, 4 * self.g)


def _closed_fd() -> int:
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    return r


def _released(s: _State) -> None:
    h = aml_hsa.handle_create(s.pool, s.g)
    aml_hsa.handle_release(h)
    aml_hsa.handle_release(h)


def _foreign_fd(s: _State) -> None:
    r, w = os.pipe()
    try:
        aml_hsa.import_shareable_handle(r)
    finally:
        os.close(r)
        os.close(w)


BAD: dict[str, tuple[Callable[[_State], Any], type[Exception], str]] = {
    "reserve size not a page multiple": (
        lambda s: aml_hsa.address_reserve(s.g + 1),
        AMLValueError,
        "page size",
    ),
    "reserve size 0": (lambda s: aml_hsa.address_reserve(0), AMLValueError, "> 0"),
    "reserve size a bool": (lambda s: aml_hsa.address_reserve(True), AMLTypeError, "bool"),
    "reserve flags": (lambda s: aml_hsa.address_reserve(s.g, 0, 1), AMLValueError, "flags must be 0"),
    "create size not a granule multiple": (
        lambda s: aml_hsa.handle_create(s.pool, s.g + 1),
        AMLValueError,
        "granule",
    ),
    "create unknown type": (lambda s: aml_hsa.handle_create(s.pool, s.g, 7), AMLValueError, "memory type"),
    "create flags": (lambda s: aml_hsa.handle_create(s.pool, s.g, 0, 2), AMLValueError, "flags"),
    "create in an unknown pool": (
        lambda s: aml_hsa.handle_create(0xBAD, s.g),
        AMLValueError,
        "unknown memory pool",
    ),
    "create in a pool without allocation": (
        lambda s: aml_hsa.handle_create(aml_hsa.pools(_gpu())[1], s.g),
        AMLValueError,
        "does not support allocations",
    ),
    "free of a range still mapped": (
        lambda s: aml_hsa.address_free(s.va, 4 * s.g),
        AMLBusyError,
        "unmap first",
    ),
    "free with the wrong size": (lambda s: aml_hsa.address_free(s.va, s.g), AMLValueError, "reserved size"),
    "free of an unknown range": (
        lambda s: aml_hsa.address_free(s.va + s.g, s.g),
        AMLValueError,
        "not a reserved",
    ),
    "map outside a reservation": (
        lambda s: aml_hsa.map(s.va + 4 * s.g, s.g, s.loose),
        AMLValueError,
        "not inside a reserved",
    ),
    "map over a mapping": (lambda s: aml_hsa.map(s.va, s.g, s.loose), AMLValueError, "overlaps"),
    "map with another size than the handle's": (
        lambda s: aml_hsa.map(s.va + s.g, 2 * s.g, s.loose),
        AMLValueError,
        "handle's size",
    ),
    "map with an offset": (
        lambda s: aml_hsa.map(s.va + s.g, s.g, s.loose, s.g),
        AMLValueError,
        "offset must be 0",
    ),
    "map with flags": (
        lambda s: aml_hsa.map(s.va + s.g, s.g, s.loose, 0, 1),
        AMLValueError,
        "flags must be 0",
    ),
    "map of an unknown handle": (lambda s: aml_hsa.map(s.va + s.g, s.g, 0x1234), AMLValueError, "not a live"),
    "unmap with the wrong size": (lambda s: aml_hsa.unmap(s.va, 2 * s.g), AMLValueError, "mapped size"),
    "unmap of an unmapped address": (
        lambda s: aml_hsa.unmap(s.va + s.g, s.g),
        AMLValueError,
        "not the start",
    ),
    "double release": (_released, AMLValueError, "released"),
    "get_access of an unmapped range": (
        lambda s: aml_hsa.get_access(s.va + 2 * s.g, _gpu()),
        AMLValueError,
        "not mapped",
    ),
    "get_access of an unknown agent": (
        lambda s: aml_hsa.get_access(s.va, 0xDEAD),
        AMLValueError,
        "unknown agent",
    ),
    "set_access of an unknown agent": (
        lambda s: aml_hsa.set_access(s.va, s.g, [(0xDEAD, Permission.RW)]),
        AMLValueError,
        "unknown agent",
    ),
    "set_access with an unknown permission": (
        lambda s: aml_hsa.set_access(s.va, s.g, [(_gpu(), 9)]),
        AMLValueError,
        "permission",
    ),
    "set_access with nothing": (lambda s: aml_hsa.set_access(s.va, s.g, []), AMLValueError, "non-empty"),
    "set_access with the wrong size": (
        lambda s: aml_hsa.set_access(s.va, 2 * s.g, [(_gpu(), Permission.RW)]),
        AMLValueError,
        "mapped size",
    ),
    "import of a closed fd": (
        lambda s: aml_hsa.import_shareable_handle(_closed_fd()),
        AMLValueError,
        "not an open",
    ),
    "import of a negative fd": (
        lambda s: aml_hsa.import_shareable_handle(-1),
        AMLValueError,
        "file descriptor",
    ),
    "import of a foreign fd": (_foreign_fd, AMLValueError, "INVALID_ALLOCATION"),
    "export flags": (lambda s: aml_hsa.export_shareable_handle(s.loose, 1), AMLValueError, "flags must be 0"),
    "retain of an unmapped address": (
        lambda s: aml_hsa.retain_alloc_handle(s.va + 3 * s.g),
        AMLValueError,
        "not mapped",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input(hsa: HsaDouble, case: str) -> None:
    action, error, message = BAD[case]
    state = _State()
    try:
        fds = open_fds()
        objects = hsa.objects()
        tracked = aml_hsa.get_runtime().live()
        with pytest.raises(error, match=message):
            action(state)
        assert open_fds() == fds, "an fd leaked"
        assert hsa.objects() == objects, "a native object leaked"
        assert aml_hsa.get_runtime().live() == tracked
    finally:
        state.close()


def test_checks_come_before_the_native_call(hsa: HsaDouble) -> None:
    """Bad input never reaches ROCr: the double sees no call."""
    state = _State()
    try:
        before = {fn: hsa.calls(fn) for fn in C.VMEM_FUNCTIONS}
        for case, (action, error, _) in BAD.items():
            if case == "import of a foreign fd":
                continue  # only ROCr can tell a dma-buf from another fd
            with pytest.raises(error):
                action(state)
        after = {fn: hsa.calls(fn) for fn in C.VMEM_FUNCTIONS}
        changed = {fn for fn in before if after[fn] != before[fn]}
        # _released creates and releases a handle once before the refused second release
        assert changed <= {"hsa_amd_vmem_handle_create", "hsa_amd_vmem_handle_release"}
        assert after["hsa_amd_vmem_handle_release"] - before["hsa_amd_vmem_handle_release"] == 1
    finally:
        state.close()


# -- a "success" with an impossible result is FAILURE ----------------------------------------------


def _fake(rt: Any, name: str, fn: Callable[..., int]) -> Any:
    real = rt.lib.native._functions[name]
    rt.lib.native._functions[name] = fn
    return real


@pytest.mark.parametrize(
    ("name", "fake", "call"),
    [
        ("hsa_amd_vmem_address_reserve", lambda va, *a: 0, aml_hsa.address_reserve),
        (
            "hsa_amd_vmem_handle_create",
            lambda pool, size, kind, flags, out: 0,
            lambda g: aml_hsa.handle_create(aml_hsa.device_pool(0), g),
        ),
    ],
    ids=["reserve-returns-NULL", "create-returns-NULL"],
)
def test_impossible_success_is_failure(hsa: HsaDouble, name: str, fake: Any, call: Any) -> None:
    rt = aml_hsa.get_runtime()
    real = _fake(rt, name, fake)
    try:
        with pytest.raises(AMLFailure, match="impossible"):
            call(aml_hsa.device_pool(0).granule)
    finally:
        rt.lib.native._functions[name] = real
    assert rt.live() == {"reservations": 0, "handles": 0, "mappings": 0}


def test_retain_of_another_handle_is_failure(hsa: HsaDouble) -> None:
    g, va, h = _one_mapping()
    rt = aml_hsa.get_runtime()

    def other(out: Any, addr: Any) -> int:
        ctypes.cast(out, ctypes.POINTER(c_uint64))[0] = h + 1
        return 0

    real = _fake(rt, "hsa_amd_vmem_retain_alloc_handle", other)
    try:
        with pytest.raises(AMLFailure, match="not the mapped handle"):
            aml_hsa.retain_alloc_handle(va)
    finally:
        rt.lib.native._functions["hsa_amd_vmem_retain_alloc_handle"] = real
    aml_hsa.unmap(va, g)
    aml_hsa.handle_release(h)
    aml_hsa.address_free(va, g)


def test_failed_release_stays_tracked(hsa: HsaDouble) -> None:
    pool = aml_hsa.device_pool(0)
    h = aml_hsa.handle_create(pool, pool.granule)
    hsa.inject("hsa_amd_vmem_handle_release", C.HSA_STATUS_ERROR)
    with pytest.raises(AMLFailure):
        aml_hsa.handle_release(h)
    assert aml_hsa.get_runtime().live()["handles"] == 1
    aml_hsa.handle_release(h)


# -- the double follows ROCr's contract (raw calls, no aml-hsa checks) -----------------------------


def test_double_contract_raw(hsa: HsaDouble) -> None:
    rt = aml_hsa.get_runtime()
    raw = rt.lib.raw
    pool = aml_hsa.device_pool(0)
    g = pool.granule
    gpu = _gpu().handle
    va = c_void_p()
    assert raw("hsa_amd_vmem_address_reserve", byref(va), 20 * g, 0, 0) == 0
    h = c_uint64()
    assert raw("hsa_amd_vmem_handle_create", pool.handle, g, 0, 0, byref(h)) == 0
    assert raw("hsa_amd_vmem_handle_create", pool.handle, g + 1, 0, 0, byref(c_uint64())) == 0x1001
    assert raw("hsa_amd_vmem_map", va, g, 0, h, 0) == 0
    assert raw("hsa_amd_vmem_map", va, g, 0, h, 0) == 0x1001  # overlapping
    assert raw("hsa_amd_vmem_map", c_void_p(va.value + 20 * g), g, 0, h, 0) == 0x1001  # outside
    perm = c_int(-1)
    assert raw("hsa_amd_vmem_get_access", va, byref(perm), gpu) == 0
    assert perm.value == 0
    assert raw("hsa_amd_vmem_get_access", c_void_p(va.value + 5 * g), byref(perm), gpu) == 0x1003
    assert raw("hsa_amd_vmem_get_access", va, byref(perm), 0xDEAD) == 0x1004
    assert raw("hsa_amd_vmem_address_free", va, 20 * g) == 0x100A  # still mapped
    assert raw("hsa_amd_vmem_unmap", va, 2 * g) == 0x1001  # wrong size
    assert raw("hsa_amd_vmem_unmap", va, g) == 0
    assert raw("hsa_amd_vmem_handle_release", h) == 0
    assert raw("hsa_amd_vmem_handle_release", h) == 0x1003  # twice
    assert raw("hsa_amd_vmem_address_free", va, g) == 0x1001  # wrong size
    assert raw("hsa_amd_vmem_address_free", va, 20 * g) == 0
    assert raw("hsa_amd_vmem_import_shareable_handle", 10_000, byref(h)) == 0x1003  # closed fd


def test_not_initialized(hsa: HsaDouble) -> None:
    lib = aml_hsa.get_runtime().lib
    aml_hsa.BACKEND.reset()
    aml_hsa.native.shutdown_all()
    assert hsa.live()["init"] == 0
    assert lib.raw("hsa_amd_vmem_address_reserve", byref(c_void_p()), 4096, 0, 0) == 0x100B


def test_sequence_script(hsa: HsaDouble) -> None:
    """The step-by-step log the GPU run writes (``hsa_sequence.py``) passes here too."""
    proc = subprocess.run(
        [sys.executable, str(HERE / "hsa_sequence.py")],
        env=hsa.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].split() == ["SEQUENCE", "OK"]


def test_a_dropped_virtual_memory_gives_back_what_it_holds(hsa: HsaDouble) -> None:
    """Dropped without close() (issue 20): collected, it unmaps, releases and frees."""
    check_dropped_vm_gives_back(hsa, lambda: aml_hsa.virtual_memory(0))


def test_a_dropped_virtual_memory_whose_release_fails(
    hsa: HsaDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release failing while a dropped virtual-memory area is collected: reported through
    sys.unraisablehook, kept, and given back by the backend's reset()."""
    check_dropped_vm_failure_is_kept(
        hsa,
        lambda: aml_hsa.virtual_memory(0),
        monkeypatch,
        "hsa_amd_vmem_address_free",
        C.HSA_STATUS_ERROR_INVALID_ALLOCATION,
        AMLValueError,
    )
