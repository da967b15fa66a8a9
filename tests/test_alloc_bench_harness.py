"""benchmarks/alloc_bench.py's harness rule (benchmarks/call_shape.py), on the CPU with fake
libraries: every allocator is called through the library's own callables where it offers
them, a peer that pays benchmark frames is compared only with an aml control that pays the
same, PyTorch's allocator is measured through its allocator entry beside ``torch.empty``,
and the timing loops, repeats and paired comparisons run end to end."""

from __future__ import annotations

import functools
import itertools
import sys
import types
from typing import Any

import pytest

from tests.support.benchmark_scripts import load_benchmark

alloc_bench = load_benchmark("alloc_bench")
call_shape = load_benchmark("call_shape")

_ids = itertools.count(1 << 20)


# -- fake libraries (code outside benchmarks/: the "library's own" callables) ----------------------


class _Buf:
    def __init__(self, n: int) -> None:
        self.size = n

    def close(self, stream: Any = None) -> None:
        pass


class _Stream:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def sync(self) -> None:
        pass

    def use(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Area:
    """aml's area contract as the benchmark calls it: ``mmap(n, options, *, stream=)``,
    ``munmap(buf, *, stream=)``."""

    def mmap(self, n: int, options: Any = None, *, stream: Any = None) -> _Buf:
        return _Buf(n)

    def munmap(self, buf: _Buf, *, stream: Any = None) -> None:
        pass

    def close(self) -> None:
        pass


class _Stats:
    bytes_reserved = 1 << 20
    peak_bytes_reserved = 2 << 20


class _Pool(_Area):
    def __init__(self, area: _Area, **kwargs: Any) -> None:
        self.area = area
        self.pool_stats = _Stats()

    def reset_peak(self) -> None:
        pass

    def trim(self) -> None:
        pass


class _CupyPool:
    def malloc(self, n: int) -> _Buf:
        return _Buf(n)

    def total_bytes(self) -> int:
        return 1 << 20

    def free_all_blocks(self) -> None:
        pass


class _Device:
    def __init__(self, i: int = 0) -> None:
        self.memory_resource = types.SimpleNamespace(allocate=lambda n, stream=None: _Buf(n))

    def set_current(self) -> None:
        pass

    def use(self) -> None:
        pass

    def create_stream(self) -> _Stream:
        return _Stream()


def _ok(*args: Any) -> tuple[int]:
    return (0,)


def _ok_value(*args: Any) -> tuple[int, int]:
    return (0, next(_ids))


def caching_allocator_alloc(size: int, device: Any = None, stream: Any = None) -> int:
    return next(_ids)


def caching_allocator_delete(ptr: int) -> None:
    pass


def _empty(n: int, dtype: Any = None, device: Any = None) -> bytearray:
    return bytearray(1)


@pytest.fixture
def fake_libraries(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    mods: dict[str, types.ModuleType] = {}

    def module(name: str, **attrs: Any) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        mods[name] = mod
        monkeypatch.setitem(sys.modules, name, mod)
        return mod

    module("aml_cuda", create=lambda dev, *a: _Area(), stream=_Stream, virtual_memory=lambda dev: _Area())
    module("aml_core", pool=_Pool)
    runtime = module(
        "cuda.bindings.runtime",
        cudaFree=_ok,
        cudaMalloc=_ok_value,
        cudaMallocAsync=_ok_value,
        cudaFreeAsync=_ok,
        cudaStreamCreateWithFlags=_ok_value,
        cudaStreamNonBlocking=1,
        cudaDeviceGetDefaultMemPool=_ok_value,
        cudaMemPoolAttr=types.SimpleNamespace(
            cudaMemPoolAttrReservedMemHigh=1, cudaMemPoolAttrReservedMemCurrent=2
        ),
        cudaMemPoolGetAttribute=lambda pool, attr: (0, 1 << 20),
        cudaMemPoolSetAttribute=_ok,
        cudaMemPoolTrimTo=_ok,
        cudaStreamSynchronize=_ok,
        cudaStreamDestroy=_ok,
    )
    driver = module("cuda.bindings.driver", cuuint64_t=int)
    bindings = module("cuda.bindings", runtime=runtime, driver=driver, __version__="fake")
    core = module("cuda.core", Device=_Device, __version__="fake")
    module("cuda", bindings=bindings, core=core)
    cuda_ns = types.SimpleNamespace(
        MemoryPool=_CupyPool, Device=_Device, Stream=type("Stream", (_Stream,), {"null": _Stream()})
    )
    module("cupy", cuda=cuda_ns, __version__="fake")
    mr = types.SimpleNamespace(
        PoolMemoryResource=lambda upstream, initial_pool_size=0: types.SimpleNamespace(
            allocate=lambda n: next(_ids), deallocate=lambda p, n: None
        ),
        CudaMemoryResource=lambda: None,
    )
    module("rmm", mr=mr, __version__="fake")
    torch_cuda = types.SimpleNamespace(
        init=lambda: None,
        caching_allocator_alloc=caching_allocator_alloc,
        caching_allocator_delete=caching_allocator_delete,
        memory_reserved=lambda dev=0: 1 << 20,
        max_memory_reserved=lambda dev=0: 2 << 20,
        reset_peak_memory_stats=lambda dev=0: None,
        empty_cache=lambda: None,
    )
    module("torch", cuda=torch_cuda, empty=_empty, uint8="uint8", device=lambda *a: a, __version__="fake")
    return types.SimpleNamespace(**mods)


# -- the rule's counting ------------------------------------------------------------------------------


def test_library_callables_cost_no_frame_and_the_benchmarks_own_cost_one() -> None:
    shape_of = call_shape.benchmark_frames
    assert shape_of(id) == 0  # a builtin
    assert shape_of({}.get) == 0  # a method of a compiled class
    assert shape_of(functools.partial(int, base=16)) == 0
    assert shape_of(caching_allocator_alloc) == 0  # a library's own Python function
    assert shape_of(functools.partial(caching_allocator_alloc, device=0)) == 0
    assert shape_of(alloc_bench.human) == 1  # a function of benchmarks/
    assert shape_of(alloc_bench.RawMmap().alloc) == 1  # a benchmark peer's own method
    assert shape_of(call_shape.framed(id, 2)) == 2
    assert shape_of(call_shape.framed(alloc_bench.human, 1)) == 2
    assert call_shape.framed(id, 0) is id
    assert call_shape.framed(abs, 3)(-4) == 4  # the control still calls through


def test_a_ratio_between_two_shapes_is_refused() -> None:
    shapes = {"aml": (0, 0), "peer": (1, 1), "same": (0, 0)}
    assert call_shape.check_pairs([("aml", "same"), ("aml", "absent")], shapes) == [("aml", "same")]
    with pytest.raises(call_shape.ShapeMismatch, match="'aml' is called through"):
        call_shape.check_pairs([("aml", "peer")], shapes)


class _Fake(alloc_bench.Peer):
    def __init__(self, name: str, alloc: Any, free: Any) -> None:
        self.name = name
        self.alloc = alloc  # type: ignore[method-assign]
        self.free = free  # type: ignore[method-assign]


def test_controls_pay_the_peers_frames_and_aml_paying_more_is_refused() -> None:
    aml = _Fake("aml pool", _Area().mmap, _Area().munmap)
    raw = alloc_bench.RawMmap()
    raw.name = "CuPy MemoryPool"
    peers, comparisons = alloc_bench.with_controls([aml, raw])
    control = peers[-1]
    assert control.name == "aml pool (+1/+1 frames)"
    assert control.shape() == raw.shape() == (1, 1)
    assert call_shape.shape(*control.calls()) == (1, 1)
    assert comparisons == [{"mine": control.name, "theirs": raw.name, "target_at_most": 0.8}]
    slow = _Fake("aml pool", raw.alloc, raw.free)
    cheap = _Fake("CuPy MemoryPool", id, id)
    with pytest.raises(call_shape.ShapeMismatch, match="no control"):
        alloc_bench.with_controls([slow, cheap])


def test_aml_against_itself_frames_the_cheaper_aml_side() -> None:
    """The alternating pool pays one frame per alloc (its plain/stream choice): the plain
    pool it is compared with pays the same through a control; never a foreign peer."""
    plain = _Fake(alloc_bench.POOL, _Area().mmap, _Area().munmap)
    alternate = _Fake(alloc_bench.POOL_ALTERNATE, alloc_bench.human, _Area().munmap)
    peers, comparisons = alloc_bench.with_controls([plain, alternate])
    control = peers[-1]
    assert control.name == "aml pool (+1/+0 frames)"
    assert control.shape() == alternate.shape() == (1, 0)
    assert comparisons == [
        {"mine": alloc_bench.POOL_ALTERNATE, "theirs": control.name, "target_at_most": 1.2}
    ]
    dear = _Fake(alloc_bench.POOL, alloc_bench.human, _Area().munmap)
    cupy = _Fake(alloc_bench.CUPY, id, id)
    with pytest.raises(call_shape.ShapeMismatch, match="no control"):
        alloc_bench.with_controls([dear, cupy])


# -- the GPU peers, on fakes --------------------------------------------------------------------------


def test_every_gpu_peer_is_called_through_the_same_shape_as_its_counterpart(
    fake_libraries: types.SimpleNamespace,
) -> None:
    skipped: dict[str, str] = {}
    peers = alloc_bench.gpu_peers(skipped, {})
    assert skipped == {}
    by = {p.name: p for p in peers}
    shapes = {p.name: p.shape() for p in peers}
    # bound library callables: no benchmark frame
    for name in (
        "aml area",
        "aml area, stream-ordered",
        alloc_bench.POOL,
        alloc_bench.POOL_STREAM,
        "aml expandable pool",
        alloc_bench.CUPY,
        alloc_bench.CUPY_STREAM,
        alloc_bench.TORCH_ALLOC,
        alloc_bench.TORCH_EMPTY,
        "cuda.core DeviceMemoryResource",
    ):
        assert shapes[name] == (0, 0), (name, shapes[name])
    # the error checks of cuda-bindings and RMM's size: one frame each, said so
    for name in ("cudaMalloc", "cudaMallocAsync", "RMM pool"):
        assert shapes[name] == (1, 1), (name, shapes[name])
        assert "one benchmark frame" in by[name].pays
    # PyTorch's allocator entry, beside torch.empty, each labelled
    alloc, free = by[alloc_bench.TORCH_ALLOC].calls()
    assert isinstance(alloc, functools.partial)
    assert alloc.func is caching_allocator_alloc
    assert free is caching_allocator_delete
    assert "caching_allocator_alloc" in alloc_bench.TORCH_ALLOC
    assert "tensor" in alloc_bench.TORCH_EMPTY
    # every comparison between one shape, through a control where the peer pays frames
    peers, comparisons = alloc_bench.with_controls(peers)
    shapes = {p.name: p.shape() for p in peers}
    assert comparisons, "no comparison resolved"
    for c in comparisons:
        assert shapes[c["mine"]] == shapes[c["theirs"]], c
    pairs = {(c["mine"], c["theirs"]) for c in comparisons}
    assert ("aml area (+1/+1 frames)", "cudaMalloc") in pairs
    assert ("aml pool, on a stream (+1/+1 frames)", "cudaMallocAsync") in pairs
    assert ("aml pool (+1/+1 frames)", "RMM pool") in pairs
    assert (alloc_bench.POOL_STREAM, alloc_bench.CUPY_STREAM) in pairs
    assert (alloc_bench.POOL, alloc_bench.TORCH_ALLOC) in pairs
    # every peer states what it pays
    assert all(p.pays for p in peers), [p.name for p in peers if not p.pays]


def test_a_thread_of_the_pool_on_a_stream_calls_with_its_own_stream(
    fake_libraries: types.SimpleNamespace,
) -> None:
    import threading

    peers = {p.name: p for p in alloc_bench.gpu_peers({}, {})}
    pool = peers[alloc_bench.POOL_STREAM]
    main_alloc, _ = pool.calls()
    seen: list[Any] = []

    def work() -> None:
        pool.thread_init()
        alloc, free = pool.calls()
        assert call_shape.shape(alloc, free) == (0, 0)
        seen.append(alloc.keywords["stream"])

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen
    assert seen[0] is not main_alloc.keywords["stream"]


def test_the_whole_gpu_run_on_fakes_pairs_rounds_and_repeats(
    fake_libraries: types.SimpleNamespace, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    monkeypatch.setattr(alloc_bench, "gpu_meta", lambda meta: meta.update(gpu="fake"))
    monkeypatch.setattr(alloc_bench, "SIZES", (256, 1 << 20))
    alloc_bench.main(["--out", str(tmp_path), "--quick", "--repeats", "3"])
    r = json.loads((tmp_path / "alloc_bench.json").read_text())
    assert r["repeats"] == 3
    for row in r["threads"]["rows"] + r["trace"]["rows"]:
        assert len(row["repeats"]) == 3, row["peer"]
        assert [x["repeat"] for x in row["repeats"]] == [0, 1, 2]
    for row in r["alloc_free"]:
        assert len(row["samples"]) == row["rounds"] == len(row["rounds_at"])
    cupy = [c for c in r["comparisons"] if c["theirs"] == alloc_bench.CUPY_STREAM]
    tests = {c["test"] for c in cupy}
    assert {"alloc+free", "trace", "threads"} <= tests
    for c in r["comparisons"]:
        st = c["stats"]
        assert st["pairs"] == len(st["ratios"])
        low, high = st["median_95"]
        assert low <= st["median"] <= high
        if c["target_at_most"] is not None:
            assert c["verdict"] == ("met" if high <= c["target_at_most"] else "not shown")
    md = (tmp_path / "alloc_bench.md").read_text()
    assert "## How each peer is called" in md
    assert "| cudaMalloc | 1, 1 |" in md
    assert "median of paired ratios" in md


def test_one_test_for_some_peers_alone(
    fake_libraries: types.SimpleNamespace, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--tests threads --peer A --peer B``: another run of the threads test for two
    peers, compared as in the whole run; the other measurements and peers are not run."""
    import json

    monkeypatch.setattr(alloc_bench, "gpu_meta", lambda meta: meta.update(gpu="fake"))
    argv = ["--out", str(tmp_path), "--quick", "--repeats", "3", "--tests", "threads"]
    alloc_bench.main([*argv, "--peer", alloc_bench.POOL_STREAM, "--peer", alloc_bench.CUPY_STREAM])
    r = json.loads((tmp_path / "alloc_bench.json").read_text())
    assert r["tests"] == ["threads"]
    assert r["alloc_free"] == []
    assert r["trace"]["rows"] == []
    assert [row["peer"] for row in r["threads"]["rows"]] == [alloc_bench.POOL_STREAM, alloc_bench.CUPY_STREAM]
    assert all(len(row["repeats"]) == 3 for row in r["threads"]["rows"])
    (c,) = r["comparisons"]
    assert (c["test"], c["mine"], c["theirs"], c["target_at_most"]) == (
        "threads",
        alloc_bench.POOL_STREAM,
        alloc_bench.CUPY_STREAM,
        1.0,
    )
    assert "Tests run: threads only" in (tmp_path / "alloc_bench.md").read_text()
    with pytest.raises(SystemExit):
        alloc_bench.main([*argv, "--peer", "no such allocator"])
    with pytest.raises(SystemExit):
        alloc_bench.main(["--out", str(tmp_path), "--tests", "threads,nap"])
