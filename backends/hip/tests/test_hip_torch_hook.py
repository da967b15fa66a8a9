"""aml_hip.use_with_torch: the shared PyTorch hook (:mod:`aml_core.gpu.hooks`) bound to aml-hip.

The C entry points (ctypes callbacks) are called through their addresses, as PyTorch's
``CUDAPluggableAllocator`` calls them (the same class in PyTorch's ROCm build), against a
stand-in ``torch`` module over the HIP double's pools; and real PyTorch (its CUDA build, in a
child process: PyTorch takes one allocator per process) where the double forwards to CUDA on
an NVIDIA GPU (``AML_HIP_TEST_DOUBLE=forward``, ``run_forward.sh``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aml_hip
import pytest
from aml_hip import HipFlags
from hip_helpers import HipDouble

import aml_core
from aml_core.errors import AMLBusyError, AMLNotSupported, AMLValueError
from aml_core.testing.hook_fakes import faked, torch_entry_points

HERE = Path(__file__).resolve().parent


@pytest.fixture
def torch() -> Iterator[Any]:
    with faked("torch") as fake:
        yield fake


def test_the_c_entry_points_allocate_from_a_hip_pool(hip: HipDouble, torch: Any) -> None:
    with aml_hip.create(0, 0) as area, aml_core.pool(area) as pool:
        hook = aml_hip.use_with_torch(pool)
        assert "(hip)" in repr(hook)
        malloc, free = torch_entry_points(torch)
        ptr = malloc(4096, 0, None)
        assert ptr is not None
        assert hook.live == 1
        assert hip.calls("hipMalloc") == 1
        free(ptr, 4096, 0, None)
        assert hook.live == 0
        again = malloc(4096, 0, None)
        assert again == ptr  # the pool's block again
        assert hip.calls("hipMalloc") == 1
        free(again, 4096, 0, None)
        assert malloc(0, 0, None) is None
        assert hook.errors == []
    assert hip.calls("hipFree") == 1


def test_pytorch_streams_reach_the_hip_pool(hip: HipDouble, torch: Any) -> None:
    """A block PyTorch frees on a stream is reused at once on that stream; another stream
    gets it through an event (hipEventRecord on the first, hipStreamWaitEvent on the other)."""
    s1, s2 = aml_hip.stream(non_blocking=True), aml_hip.stream(non_blocking=True)
    with aml_hip.create(0, 0) as area:
        pool = aml_core.pool(area, small_slab=4096, small_max=4096)  # slabs of one block
        hook = aml_hip.use_with_torch(pool)
        malloc, free = torch_entry_points(torch)
        ptr = malloc(4096, 0, s1.handle)
        free(ptr, 4096, 0, s1.handle)
        assert malloc(4096, 0, s1.handle) == ptr  # same stream: no event
        assert hip.calls("hipEventRecord") == 0
        free(ptr, 4096, 0, s1.handle)
        assert malloc(4096, 0, s2.handle) == ptr  # handed to s2 through an event
        recorded = hip.last("hipEventRecord")
        assert recorded is not None
        assert recorded[1] == s1.handle
        assert hip.last("hipStreamWaitEvent") == (s2.handle, recorded[0], 0)
        free(ptr, 4096, 0, s2.handle)
        assert hook.errors == []
        pool.close()
    s2.close()
    s1.close()


def test_stream_ordered_allocation_through_a_hip_area(hip: HipDouble, torch: Any) -> None:
    """Over a plain area, PyTorch's stream makes hipMallocAsync / hipFreeAsync calls."""
    s = aml_hip.stream(non_blocking=True)
    with aml_hip.create(0, 0) as area:
        aml_hip.use_with_torch(area)
        malloc, free = torch_entry_points(torch)
        ptr = malloc(4096, 0, s.handle)
        assert hip.last("hipMallocAsync")[1:] == (4096, s.handle)  # type: ignore[index]
        free(ptr, 4096, 0, s.handle)
        assert hip.last("hipFreeAsync") == (ptr, s.handle)
        plain = malloc(4096, 0, None)  # no stream: hipMalloc
        assert hip.calls("hipMalloc") == 1
        free(plain, 4096, 0, None)
    s.close()


def test_failures_raise_in_pytorch_and_are_kept(hip: HipDouble, torch: Any) -> None:
    with aml_hip.create(0, 0) as area, aml_core.pool(area, limit=1 << 20) as pool:
        hook = aml_hip.use_with_torch(pool)
        malloc, free = torch_entry_points(torch)
        with pytest.raises(RuntimeError, match=r"^HIP out of memory"):
            malloc(2 << 20, 0, None)  # past the limit: thrown, PyTorch raises
        assert isinstance(hook.errors[-1], MemoryError)
        free(0x1000, 16, 0, None)  # not ours: reported, not raised into PyTorch
        assert isinstance(hook.errors[-1], AMLValueError)


def test_installed_once_and_never_removed(hip: HipDouble, torch: Any) -> None:
    with aml_hip.create(0, 0) as area:
        hook = aml_hip.use_with_torch(area)
        with pytest.raises(AMLBusyError, match="installed already"):
            aml_hip.use_with_torch(area)
        with pytest.raises(AMLNotSupported, match="HIP allocator"):
            hook.uninstall()


def test_after_pytorch_allocated(hip: HipDouble, torch: Any) -> None:
    torch.state["initialized"] = True
    with aml_hip.create(0, 0) as area, pytest.raises(AMLBusyError, match="allocated HIP memory already"):
        aml_hip.use_with_torch(area)


def test_bad_areas(hip: HipDouble, torch: Any) -> None:
    with (
        aml_hip.create(0, HipFlags.ALLOC_HOST) as host,
        pytest.raises(AMLValueError, match="device or managed"),
    ):
        aml_hip.use_with_torch(host)
    closed = aml_hip.create(0, 0)
    closed.close()
    with pytest.raises(AMLValueError, match="closed"):
        aml_hip.use_with_torch(closed)
    assert torch.state["current"] is None


_TORCH_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
import aml_core, aml_hip, torch
from hip_children import _control
ctl = _control()
pool = aml_core.pool(aml_hip.create(0))
hook = aml_hip.use_with_torch(pool)
x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
assert float(x.sum()) == float((1 << 20) * ((1 << 20) - 1) / 2)
y = (x * 2).cpu()
assert float(y[-1]) == float(2 * ((1 << 20) - 1))
assert hook.live >= 1 and pool.pool_stats.bytes_in_use >= 4 << 20, (hook.live, pool.pool_stats)
assert ctl.calls("hipMalloc") >= 1, "the memory did not come through aml-hip"
del x
torch.cuda.synchronize()
print("ok", hook.live, pool.pool_stats.native_allocations, ctl.calls("hipMalloc"), hook.errors)
"""


@pytest.mark.gpu
def test_real_pytorch_on_a_hip_pool(hip: HipDouble) -> None:
    """PyTorch's tensors in a pool over an aml_hip area, on the double forwarding to CUDA
    (PyTorch's default stream is the NULL stream, which the double accepts)."""
    if hip.mode != "forward":
        pytest.skip("needs the HIP double forwarding to CUDA on an NVIDIA GPU (run_forward.sh)")
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, "-c", _TORCH_CHILD, str(HERE)],
        capture_output=True,
        text=True,
        timeout=300,
        env=hip.env(),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok"), proc.stdout
    assert proc.stdout.rstrip().endswith("[]"), proc.stdout  # no error kept by the hook


def test_without_pytorch_installed_the_hook_is_not_supported(
    hip: HipDouble, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sys.modules["torch"] = None: ``import torch`` fails as it does where PyTorch is not installed.
    monkeypatch.setitem(sys.modules, "torch", None)
    from aml_core.gpu import hooks

    with aml_hip.create(0, 0) as area:
        with pytest.raises(AMLNotSupported, match=r"needs PyTorch \(the 'torch' package\)") as info:
            aml_hip.use_with_torch(area)
        assert isinstance(info.value.__cause__, ModuleNotFoundError)
        assert hooks._torch_hook is None


@pytest.mark.parametrize("first", ["alloc", "free"])
@pytest.mark.parametrize("managed", [False, True], ids=["device", "managed"])
def test_pytorchs_first_stream_use_from_c(hip: HipDouble, torch: Any, first: str, managed: bool) -> None:
    """Issue 32, root cause 1, on the double with PyTorch's C entry points: the first
    request on a stream hits the cache in C (``alloc``), or a block allocated in host
    order is freed on a stream first (``free``), before Python ever gave the pool a
    stream. trim, growth and close then reclaim that stream (an event recorded and
    queried: no AttributeError), and the slab goes back: nothing live after the area's
    close."""
    s1 = aml_hip.stream(non_blocking=True)
    area = aml_hip.create(0, HipFlags.ALLOC_UNIFIED if managed else 0)
    pool = aml_core.pool(area, small_slab=4096, small_max=4096)
    hook = aml_hip.use_with_torch(pool)
    malloc, free = torch_entry_points(torch)
    ptr = malloc(4096, 0, None)
    if first == "alloc":
        free(ptr, 4096, 0, None)
        assert malloc(4096, 0, s1.handle) == ptr  # a hit, in C
    free(ptr, 4096, 0, s1.handle)  # onto s1's list, in C
    assert pool._kernel.stream_cached() == {(s1.handle, 4096): [ptr]}
    big = malloc(8192, 0, None)  # growth: s1 reclaimed first
    assert hip.last("hipEventRecord")[1:] == (s1.handle,)
    free(big, 8192, 0, None)
    reserved = pool.pool_stats.bytes_reserved
    assert pool.trim() == reserved  # the streams reclaimed, every slab back to the area
    free(malloc(4096, 0, s1.handle), 4096, 0, s1.handle)  # one left on s1 for close
    pool.close()
    assert hook.errors == []
    area.close()
    s1.close()
    assert not any(hip.live().values())
