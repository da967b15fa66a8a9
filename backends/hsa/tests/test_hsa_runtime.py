"""Agents and pools, pool areas and the registry, the probe (the real Debian ROCr 5.2 with
no GPU, and the double), hsa_init's reference count, and HSA IPC between processes."""

from __future__ import annotations

import copy
import ctypes
import gc
import json
import os
import pickle
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aml_hsa import AgentType, PoolLocation, Segment
from aml_hsa import abi as C
from hsa_helpers import HERE, REPO, HsaDouble, aml_hsa, child_env, forget

import aml_core
from aml_core.errors import (
    AMLFailure,
    AMLMemoryError,
    AMLNotSupported,
    AMLTypeError,
    AMLValueError,
    ErrorCode,
)
from aml_core.ipc import IpcHandle
from aml_core.specs import Capability, Kind
from tests.support.bad_copies import bad_copies, refused_before_any_copy
from tests.support.ipc_peer import IpcPeer

DEBIAN_LIBRARY = Path("/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1")


def test_agents_and_pools(hsa: HsaDouble) -> None:
    hsa.need_gpus(2)
    agents = aml_hsa.agents()
    assert [a.type for a in agents][:1] == [AgentType.CPU]
    gpus = [a for a in agents if a.type is AgentType.GPU]
    assert [g.device for g in gpus] == [0, 1]
    for gpu in gpus:
        pools = aml_hsa.pools(gpu)
        coarse = aml_hsa.device_pool(gpu.device or 0)
        assert coarse in pools
        assert coarse.segment is Segment.GLOBAL
        assert coarse.coarse_grained
        assert not coarse.fine_grained
        assert coarse.alloc_allowed
        assert coarse.granule > 0
        assert coarse.granule & (coarse.granule - 1) == 0
        assert coarse.rec_granule >= coarse.granule
        assert coarse.location is PoolLocation.GPU
        assert coarse.agent == gpu
        assert coarse.size > 0
    host = aml_hsa.host_pool()
    assert host.fine_grained
    assert host.agent.type is AgentType.CPU
    assert host.location is PoolLocation.CPU
    with pytest.raises(AMLValueError, match=r"not in 0\.\.1"):
        aml_hsa.device_pool(2)
    with pytest.raises(AMLValueError, match="unknown agent"):
        aml_hsa.pools(0x1)


def test_granularity_from_the_pool(hsa: HsaDouble) -> None:
    pool = aml_hsa.device_pool(0)
    vm = aml_hsa.virtual_memory(0)
    try:
        assert vm.granularity() == pool.granule
        assert vm.granularity(recommended=True) == pool.rec_granule
        buf = vm.growable(16 * pool.granule)
        buf.grow(3 * pool.granule)
        assert buf.mapped == 3 * pool.granule
        vm.munmap(buf)
    finally:
        vm.close()


def test_device_and_host_areas(hsa: HsaDouble) -> None:
    with aml_core.area(kind=Kind.DEVICE, backend="hsa") as device:
        assert device.pool == aml_hsa.device_pool(0)
        buf = device.mmap(1000)
        device.write(buf, b"abc", 10)
        assert device.read(buf, 3, 10) == b"abc"
        device.munmap(buf)
    with aml_core.area(kind=Kind.HOST, backend="hsa") as host:
        assert host.pool == aml_hsa.host_pool()
        buf = host.mmap(64)
        view = memoryview(buf)
        view[:3] = b"xyz"
        assert host.read(buf, 3) == b"xyz"
        view.release()
        host.munmap(buf)
    assert hsa.calls("hsa_amd_agents_allow_access") == 1  # host memory made visible to the GPU
    with pytest.raises(AMLNotSupported):
        aml_core.area(kind=Kind.MANAGED, backend="hsa")
    with pytest.raises(AMLTypeError, match="options"):
        aml_hsa.BACKEND.create_area(Kind.DEVICE, 0, flags=1)
    with pytest.raises(AMLTypeError, match=r"hsa does not honour \['flags'\]"):  # declared: none
        aml_core.area(kind=Kind.DEVICE, backend="hsa", flags=1)
    with pytest.raises(AMLNotSupported, match="no flags"):
        aml_hsa.create(0, 1)
    with pytest.raises(AMLNotSupported, match="managed"):
        aml_hsa.BACKEND.unified_area()


def test_pool_allocation_failure_frees(hsa: HsaDouble) -> None:
    """allow_access failing after the allocation frees it (host areas)."""
    hsa.inject("hsa_amd_agents_allow_access", C.HSA_STATUS_ERROR_INVALID_AGENT)
    with aml_hsa.host_area() as host, pytest.raises(AMLValueError):
        host.mmap(100)
    assert hsa.objects() == {}


def test_allow_access_and_give_back_failing_keep_the_memory_for_close(hsa: HsaDouble) -> None:
    """Double fault (issue 20): allow_access fails and giving the allocation back
    (hsa_amd_memory_pool_free) fails too. The allocation stays tracked, held by the area,
    and close() frees it."""
    hsa.inject("hsa_amd_agents_allow_access", C.HSA_STATUS_ERROR_INVALID_AGENT)
    hsa.inject("hsa_amd_memory_pool_free", C.HSA_STATUS_ERROR)
    host = aml_hsa.host_area()
    with pytest.raises(AMLValueError) as info:
        host.mmap(100)
    assert any("giving the allocation back failed too" in note for note in info.value.__notes__)
    gc.collect()
    assert host.stats.live_mappings == 1
    assert hsa.objects() == {"pool_alloc": 1}
    host.close()  # retries the free
    assert host.stats.live_mappings == 0
    assert hsa.calls("hsa_amd_memory_pool_free") == 2
    assert hsa.objects() == {}


def test_hsa_init_once_and_shut_down(hsa: HsaDouble) -> None:
    aml_hsa.get_runtime()
    aml_hsa.BACKEND.reset()
    aml_hsa.get_runtime()  # a new runtime on the same library: no second hsa_init
    assert hsa.calls("hsa_init") == 1
    assert hsa.live()["init"] == 1
    forget()
    assert hsa.calls("hsa_shut_down") == 1
    assert hsa.live()["init"] == 0


def test_hsa_shut_down_at_exit(hsa: HsaDouble) -> None:
    """The process's one hsa_shut_down runs at exit (an atexit handler registered before
    aml_hsa's runs after it and sees the count back to 0)."""
    code = f"""
import atexit, ctypes
lib = ctypes.CDLL({str(hsa.path)!r})
lib.hsadouble_live.restype = ctypes.c_long
atexit.register(lambda: print("at exit:", lib.hsadouble_live(b"init"), lib.hsadouble_calls(b"hsa_shut_down")))
import aml_hsa
aml_hsa.get_runtime()
print("running:", lib.hsadouble_live(b"init"))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], env=hsa.env(), capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["running: 1", "at exit: 0 1"]


@pytest.mark.host_double
def test_probe_without_kfd(hsa: HsaDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    forget()
    monkeypatch.setenv("HSADOUBLE_NO_KFD", "1")
    result = aml_hsa.probe()
    assert not result.available
    assert "no AMD GPU / KFD" in result.reason
    assert "OUT_OF_RESOURCES" in result.reason
    assert hsa.live()["init"] == 0  # a failed hsa_init is not matched by a shut down


def test_probe_with_the_double(hsa: HsaDouble) -> None:
    result = aml_hsa.probe()
    assert result.available
    assert len(result.devices) == aml_hsa.get_runtime().device_count()
    assert result.capabilities & Capability.VIRTUAL_MEMORY
    assert result.capabilities & Capability.IPC
    assert not result.reason
    assert result.versions["AMD interface"] == "1.6+"


def test_probe_reports_each_gpu_s_pci_bus_id(
    hsa: HsaDouble, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HSA_AMD_AGENT_INFO_DOMAIN and _BDFID (the double: domain 0, bus 3 + agent index),
    and what the topology adds from sysfs (here an empty tree: unknown)."""
    from aml_core import topology

    monkeypatch.setattr(topology, "SYSFS", str(tmp_path))
    devices = aml_hsa.probe().devices
    assert [d.details["pci_bus_id"] for d in devices] == [
        f"0000:{4 + i:02x}:00.0" for i in range(len(devices))
    ]
    assert all(d.details["numa_node"] is None for d in devices)


def test_probe_reports_free_memory(hsa: HsaDouble) -> None:
    """HSA_AMD_AGENT_INFO_MEMORY_AVAIL per GPU agent: what a pool allocation takes shows
    on its own agent (the forward double asks cuMemGetInfo: other processes count too)."""
    hsa.need_gpus(2)
    before = [d.free_memory for d in aml_hsa.probe().devices]
    assert all(free is not None and free > 0 for free in before), before
    with aml_hsa.create(0, 0) as device:
        buf = device.mmap(64 << 20)
        during = [d.free_memory for d in aml_hsa.probe().devices]
        assert during[0] is not None
        assert before[0] is not None
        assert before[0] - during[0] >= 64 << 20, (before, during)
        if hsa.mode == "host":
            assert during[1] == before[1]
        device.munmap(buf)


@pytest.mark.host_double
def test_free_memory_of_rocr_5_2_is_not_known(hsa_built: Callable[[tuple[int, int]], HsaDouble]) -> None:
    """ROCr 5.2 has no MEMORY_AVAIL (the double built as 5.2 refuses it, as ROCr refuses an
    unknown attribute): free memory is "not known", the probe still describes the device."""
    hsa_built((1, 0))
    result = aml_hsa.probe()
    assert result.available
    assert result.devices[0].total_memory > 0
    assert result.devices[0].free_memory is None


def test_failed_free_memory_query_is_not_known(hsa: HsaDouble) -> None:
    rt = aml_hsa.get_runtime()
    hsa.inject("hsa_agent_get_info", 0x1001, times=-1)  # INVALID_ARGUMENT from every query now
    assert rt.free_memory(0) is None


def test_missing_library(monkeypatch: pytest.MonkeyPatch) -> None:
    forget()
    monkeypatch.setenv("AML_HSA_LIBRARY", "/nonexistent/libhsa-runtime64.so.1")
    try:
        result = aml_hsa.probe()
        assert not result.available
        assert "cannot load /nonexistent/libhsa-runtime64.so.1" in result.reason
    finally:
        forget()


@pytest.mark.skipif(not DEBIAN_LIBRARY.exists(), reason="Debian's libhsa-runtime64-1 is not installed")
@pytest.mark.skipif(os.path.exists("/dev/kfd"), reason="this machine has an AMD GPU (/dev/kfd)")
def test_real_library_without_a_gpu() -> None:
    """Debian's ROCr 5.2 and no /dev/kfd: hsa_init fails with OUT_OF_RESOURCES and the
    backend is cleanly unavailable; the library has no hsa_amd_vmem_*. In a fresh process:
    once the double is loaded here, the loader hands it out for its SONAME."""
    env = child_env()
    env.pop("AML_HSA_LIBRARY", None)
    code = """
import json, aml_hsa, aml_hsa.native
result = aml_hsa.probe()
lib = aml_hsa.native.load()
print(json.dumps([result.available, result.reason, list(lib.interface), lib.vmem_missing(), lib.initialized]))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    available, reason, interface, missing, initialized = json.loads(proc.stdout)
    assert available is False
    if os.path.realpath(DEBIAN_LIBRARY).endswith(".so.1.5.0"):
        name = "ROCr 5.2"
    else:  # another distribution's libhsa-runtime64-1 (Ubuntu 24.04 ships ROCr 5.7's 1.11.0)
        name = os.path.basename(os.path.realpath(DEBIAN_LIBRARY))
    assert reason.startswith(f"no AMD GPU / KFD (hsa_init of {name} failed with OUT_OF_RESOURCES")
    assert interface == [1, 0]
    assert missing == (
        f"{name} has no virtual memory API (libhsa-runtime64.so.1 lacks all of hsa_amd_vmem_*); "
        "needs ROCm 6.0+"
    )
    assert initialized is False
    info = subprocess.run(
        [sys.executable, "-m", "aml_core", "info", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert info.returncode == 0, info.stderr
    backends = {b["name"]: b for b in json.loads(info.stdout)["backends"]}
    assert backends["hsa"]["available"] is False
    assert "no AMD GPU / KFD" in backends["hsa"]["reason"]


@pytest.mark.host_double
def test_ipc_between_processes(hsa: HsaDouble) -> None:
    size = 4096
    with aml_hsa.create(0) as area:
        buf = area.mmap(size)
        area.write(buf, bytes(range(256)) * (size // 256))
        export = area.ipc_export(buf)
        handle = export.handle
        assert len(handle.data) == C.IPC_HANDLE_SIZE
        proc = subprocess.run(
            [sys.executable, str(HERE / "hsa_children.py"), "ipc"],
            input=pickle.dumps(handle),
            env=hsa.env(),
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stdout.decode().split() == ["OK", "0"]
        assert area.read(buf, 5) == b"child"
        with pytest.raises(AMLValueError, match="process that exported it"):
            aml_hsa.ipc_open(handle)
        area.munmap(buf)
        with pytest.raises(AMLValueError, match="freed"):
            _ = export.handle


def test_ipc_errors(hsa: HsaDouble) -> None:
    with aml_hsa.create(0) as area:
        buf = area.mmap(4096)
        hsa.inject("hsa_amd_ipc_memory_create", C.HSA_STATUS_ERROR_INVALID_ARGUMENT)
        with pytest.raises(AMLValueError):
            area.ipc_export(buf)
        area.munmap(buf)
    with aml_hsa.host_area() as host, pytest.raises(AMLNotSupported, match="device memory"):
        host.ipc_export(host.mmap(10))


# -- the importer's size check: hsa_amd_pointer_info after the attach -----------------------
@pytest.fixture
def exported(hsa: HsaDouble) -> Iterator[tuple[IpcPeer, IpcHandle]]:
    """An 8 KiB device buffer exported by another process (its first bytes b"peer")."""
    with IpcPeer("hsa_helpers:HsaDouble", hsa.env()) as peer:
        ref, handle = peer.export(8192, b"peer")
        yield peer, handle
        peer.free(ref)


def _claiming(handle: IpcHandle, **fields: object) -> IpcHandle:
    tampered = copy.copy(handle)
    for name, value in fields.items():
        object.__setattr__(tampered, name, value)  # what a tampered pickle carries
    return tampered


@pytest.mark.host_double  # IPC between two processes: the double's host mode
@pytest.mark.parametrize(
    "fields",
    [{"size": 1 << 30}, {"size": 8193}, {"offset": 4096, "size": 8192}],
    ids=["size=1 GiB", "size=8193", "offset+size past the export"],
)
def test_a_handle_claiming_more_than_was_exported(
    hsa: HsaDouble, exported: tuple[IpcPeer, IpcHandle], fields: dict[str, int]
) -> None:
    """ROCr's attach maps the whole exported allocation whatever length it is asked for
    (so does the double): the importer's hsa_amd_pointer_info says the allocation has 8 KiB,
    and the handle is refused (EINVAL), its mapping detached; the genuine handle still opens."""
    _, handle = exported
    with pytest.raises(AMLValueError, match=re.escape("the exported allocation has 8.0 KiB")):
        aml_hsa.ipc_open(_claiming(handle, **fields))
    assert hsa.objects() == {}
    assert hsa.calls("hsa_amd_ipc_memory_detach") == hsa.calls("hsa_amd_ipc_memory_attach") == 1
    buf = aml_hsa.ipc_open(handle)
    out = ctypes.create_string_buffer(4)
    hsa.copy(ctypes.addressof(out), buf.ptr, 4)
    assert out.raw == b"peer"
    aml_hsa.ipc_close(buf)


@pytest.mark.host_double
@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("success, nothing filled", "type UNKNOWN"),
        ("struct of 4 bytes", "filled 4 bytes of the 56-byte"),
        ("struct of 24 bytes", "filled 24 bytes of the 56-byte"),
    ],
)
def test_an_impossible_pointer_info_is_a_failure(
    hsa: HsaDouble, exported: tuple[IpcPeer, IpcHandle], answer: str, why: str
) -> None:
    """hsa_amd_pointer_info "succeeds" for the memory ROCr just attached without saying its
    size (nothing filled: type UNKNOWN; or a struct that ends before sizeInBytes, a field
    of every version): AMLFailure, the mapping detached, nothing used."""
    _, handle = exported
    if answer.startswith("success"):
        hsa.inject("hsa_amd_pointer_info", C.HSA_STATUS_SUCCESS)
    else:
        hsa.ctl.pointer_info_size(int(answer.split()[2]))
    with pytest.raises(AMLFailure, match=f"hsa_amd_pointer_info reported success .*{why}"):
        aml_hsa.ipc_open(handle)
    assert hsa.objects() == {}


@pytest.mark.host_double
def test_an_older_pointer_info_struct_is_enough(hsa: HsaDouble, exported: tuple[IpcPeer, IpcHandle]) -> None:
    """A runtime whose struct ends with sizeInBytes (32 bytes) answers all the importer reads."""
    _, handle = exported
    hsa.ctl.pointer_info_size(C.POINTER_INFO_MIN_SIZE)
    aml_hsa.ipc_close(aml_hsa.ipc_open(handle))
    with pytest.raises(AMLValueError, match="exported allocation has"):
        aml_hsa.ipc_open(_claiming(handle, size=1 << 20))


@pytest.mark.host_double
def test_a_failed_pointer_info_is_its_error(hsa: HsaDouble, exported: tuple[IpcPeer, IpcHandle]) -> None:
    """The query's own failure goes through aml-hsa's table, its native cause the query; the
    mapping is detached."""
    _, handle = exported
    hsa.inject("hsa_amd_pointer_info", C.HSA_STATUS_ERROR_OUT_OF_RESOURCES)
    with pytest.raises(AMLMemoryError) as info:
        aml_hsa.ipc_open(handle)
    assert info.value.native is not None
    assert info.value.native.function == "hsa_amd_pointer_info"
    assert hsa.objects() == {}


def test_plugin_is_cheap() -> None:
    """Importing the plugin and the package and running the hook loads no native library,
    no runtime and no area code."""
    code = """
import sys
import aml_hsa.plugin as p
[d] = p.aml_backends()
import aml_hsa
heavy = ("aml_hsa.api", "aml_hsa.native", "aml_hsa.runtime", "aml_core.gpu.area")
loaded = [m for m in heavy if m in sys.modules]
assert not loaded, loaded
assert "libhsa-runtime64" not in open("/proc/self/maps").read(), "an HSA library was loaded"
print(d.name, d.priority, sorted(k.value for k in d.kinds))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["hsa", "90", "['device',", "'host']"]


# -- hostile input and impossible answers (issue 20) --------------------------------------


@pytest.mark.parametrize("device", ["x", 1.5, b"0", [0]])
def test_create_with_a_device_of_the_wrong_type_is_a_type_error(hsa: HsaDouble, device: object) -> None:
    with pytest.raises(AMLTypeError, match="device"):
        aml_hsa.create(device)  # type: ignore[arg-type]
    assert hsa.objects() == {}


@bad_copies
@pytest.mark.parametrize("pooled", [False, True], ids=["PoolArea", "Pool"])
def test_read_and_write_with_wrong_types_are_aml_errors(
    hsa: HsaDouble, call: Callable[[Any, Any], object], error: type[Exception], pooled: bool
) -> None:
    with aml_hsa.create(0) as area:
        target: Any = aml_core.pool(area) if pooled else area
        refused_before_any_copy(target, call, error, lambda: hsa.calls("hsa_memory_copy"))
        if pooled:
            target.close()
    assert hsa.objects() == {}


@pytest.mark.host_double  # emulates a machine with no GPU agent
def test_create_without_a_gpu_agent_is_not_supported(hsa: HsaDouble) -> None:
    # A missing device is ENOTSUP in every backend (HIP's hipErrorNoDevice); an index past
    # the GPUs there are stays EINVAL.
    hsa.emulate_devices(0, 0)
    with pytest.raises(AMLNotSupported, match="no GPU agent") as info:
        aml_hsa.create(0)
    assert info.value.code is ErrorCode.ENOTSUP
    with pytest.raises(AMLNotSupported):
        aml_core.area(kind=Kind.DEVICE, backend="hsa", device=0)
    with aml_hsa.host_area() as host:  # host memory needs no GPU
        host.munmap(host.mmap(64))
    assert hsa.objects() == {}


def test_create_past_the_gpu_agents_is_einval(hsa: HsaDouble) -> None:
    count = aml_hsa.get_runtime().device_count()  # 1 on the host double, the GPUs forwarded to
    with pytest.raises(AMLValueError, match=rf"device {count} is not in 0\.\.{count - 1}"):
        aml_hsa.create(count)


def _misaligned_pool(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The device pool claiming an alignment no address the double gives meets (2**60):
    every allocation from it "succeeds" at an impossible address."""
    import attrs

    rt = aml_hsa.get_runtime()
    pool = aml_hsa.device_pool(0)
    claimed = attrs.evolve(pool, alignment=1 << 60)
    monkeypatch.setitem(rt._pool_by_handle, pool.handle, claimed)
    return claimed


def test_an_impossible_allocation_is_given_back_and_is_failure(
    hsa: HsaDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = _misaligned_pool(monkeypatch)
    with pytest.raises(AMLFailure, match="impossible address"):
        aml_hsa.get_runtime().pool_allocate(pool, 4096)
    assert hsa.calls("hsa_amd_memory_pool_free") == 1
    assert hsa.objects() == {}


def test_an_impossible_allocation_whose_give_back_fails_is_still_failure(
    hsa: HsaDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The documented error is FAILURE (the impossible answer); the failed give-back is
    # its note and cause, not the error reported (it used to be the give-back's EINVAL).
    pool = _misaligned_pool(monkeypatch)
    hsa.inject("hsa_amd_memory_pool_free", C.HSA_STATUS_ERROR_INVALID_ARGUMENT)
    with pytest.raises(AMLFailure, match="impossible address") as info:
        aml_hsa.get_runtime().pool_allocate(pool, 4096)
    assert info.value.code is ErrorCode.FAILURE
    assert isinstance(info.value.__cause__, AMLValueError)
    (note,) = info.value.__notes__
    found = re.search(r"giving (0x[0-9a-f]+) back failed too, and it leaks", note)
    assert found, note
    # The note names the memory that leaks, so that it can be given back by hand.
    aml_hsa.get_runtime().pool_free(int(found[1], 16))
    assert hsa.objects() == {}


def test_mmap_past_the_pools_size_is_enomem(hsa: HsaDouble) -> None:
    # ROCr answers INVALID_ALLOCATION for more than the pool can allocate; HIP and Level
    # Zero give ENOMEM for the same request, and so does aml-hsa.
    with aml_hsa.create(0) as area:
        with pytest.raises(AMLMemoryError, match="more than pool") as info:
            area.mmap(area.pool.size + 1)
        assert info.value.code is ErrorCode.ENOMEM
        assert info.value.native is not None
        assert info.value.native.code == C.HSA_STATUS_ERROR_INVALID_ALLOCATION
        assert area.stats.live_mappings == 0
    assert hsa.objects() == {}


def test_device_memory_for_pools(hsa: HsaDouble) -> None:
    """MemoryCapacity: a device area tells its GPU's memory (the runtime's device info and
    free-memory query), a host-pool area none; a pool's limit as a fraction of it."""
    rt = aml_hsa.get_runtime()
    total = rt.device_info(0).total_memory
    assert total > 0
    with aml_core.area(kind=Kind.DEVICE, backend="hsa") as device:
        assert device.total_memory() == total
        assert device.free_memory() == rt.free_memory(0)
        with aml_core.pool(device, limit=0.5) as p:
            assert p.limit == total // 2
    with aml_core.area(kind=Kind.HOST, backend="hsa") as host:
        assert (host.total_memory(), host.free_memory()) == (None, None)
        with aml_core.pool(host) as p, pytest.raises(AMLNotSupported, match="in bytes"):
            p.set_limit(fraction=0.5)
