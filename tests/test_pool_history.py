"""A pool's history, snapshots and allocation log (aml_core/pool/_history.py over the
kernel's ring of events): what is recorded (blocks, slabs, streams, times, threads, Python
stacks), that nothing is recorded or slowed while off, the ring's bound, the snapshot's
segments and blocks, the pickle PyTorch's ``torch.cuda._memory_viz`` reads (checked
against the keys and invariants that module and its viewer use: torch is not installed
here; backends/cuda/tests/test_cuda_memory_viz.py runs the real one), and the CSV log with
RMM's logging adaptor's columns or a callback, the framework hooks included."""

from __future__ import annotations

import csv
import pickle
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import aml_core
from aml_core import Pool
from aml_core.errors import AMLValueError
from aml_core.gpu import hooks
from aml_core.pool._history import LOG_COLUMNS, LogRecord, Snapshot
from aml_core.testing.hook_fakes import FakeDeviceArea, faked, torch_entry_points
from tests.support.streams import S1, StreamedHost

KiB = 1 << 10
MiB = 1 << 20


@pytest.fixture
def pool(host: StreamedHost) -> Iterator[Pool]:
    p = aml_core.pool(host)
    yield p
    p.close()


def _actions(s: Snapshot) -> list[str]:
    return [e.action for e in s.history]


# -- the history ----------------------------------------------------------------------------


def test_nothing_is_recorded_unless_asked(pool: Pool) -> None:
    pool.munmap(pool.mmap(4096))
    assert pool.snapshot().history == ()
    assert pool._kernel.recorded == 0


def test_allocations_frees_and_slabs_are_recorded_in_order(pool: Pool) -> None:
    pool.record_history()
    a = pool.mmap(1000)  # a miss: a slab, then the block
    b = pool.mmap(3 * MiB)  # a large slab
    pool.munmap(a)  # the fast path: recorded in C
    c = pool.mmap(1000)  # a hit: the same block
    pool.munmap(b)
    pool.munmap(c)
    released = pool.trim()
    h = pool.snapshot().history
    assert [e.action for e in h] == [
        "segment_alloc",
        "alloc",
        "segment_alloc",
        "alloc",
        "free",
        "alloc",
        "free",
        "free",
        "segment_free",
        "segment_free",
    ]
    small, block_a, large, block_b = h[0], h[1], h[2], h[3]
    assert (block_a.address, block_a.size, block_a.requested) == (a.ptr, 1024, 1000)
    assert small.address <= a.ptr < small.address + small.size
    assert (block_b.address, block_b.requested) == (b.ptr, 3 * MiB)
    assert large.size >= 3 * MiB
    assert h[5].address == a.ptr  # the hit reused a's block
    assert sum(e.size for e in h if e.action == "segment_free") == released
    assert {e.thread for e in h} == {threading.get_ident()}
    times = [e.time_ns for e in h]
    assert times == sorted(times)
    assert times[0] > 1_600_000_000 * 10**9
    assert all(e.stream is None and e.frames == () for e in h)


def test_streams_are_recorded(pool: Pool) -> None:
    pool.record_history()
    a = pool.mmap(4096, stream=S1)
    pool.munmap(a, stream=S1)
    b = pool.mmap(4096, stream=S1)  # reused at once on S1
    pool.munmap(b)
    h = [e for e in pool.snapshot().history if not e.action.startswith("segment")]
    assert [(e.action, e.address, e.stream) for e in h] == [
        ("alloc", a.ptr, S1),
        ("free", a.ptr, S1),
        ("alloc", a.ptr, S1),
        ("free", a.ptr, S1),
    ]


def test_the_ring_keeps_the_newest_events(pool: Pool) -> None:
    pool.record_history(max_entries=4)
    bufs = [pool.mmap(4096) for _ in range(5)]  # a slab and 5 blocks
    s = pool.snapshot()
    assert [e.address for e in s.history] == [b.ptr for b in bufs[1:]]
    assert s.lost == 2
    pool.record_history(max_entries=8)  # a new size: an empty history
    assert pool.snapshot().history == ()
    pool.record_history(enabled=False)
    for b in bufs:
        pool.munmap(b)
    assert pool.snapshot().history == ()
    assert pool._kernel.recorded == 6  # nothing recorded while off


def test_python_stacks_name_the_callers_line_and_leave_aml_out(pool: Pool) -> None:
    pool.record_history(stacks="python")
    kernel = pool._kernel
    fast = kernel.fast_mmaps
    buf = pool.mmap(4096)
    pool.munmap(buf)
    again = pool.mmap(4096)  # would be a hit in C: with stacks it takes the Python path
    assert kernel.fast_mmaps == fast
    h = pool.snapshot().history
    assert [e.action for e in h] == ["segment_alloc", "alloc", "free", "alloc"]
    for e in h:
        filename, _line, name = e.frames[0]
        assert (filename, name) == (__file__, "test_python_stacks_name_the_callers_line_and_leave_aml_out")
        assert not any("/aml_core/" in f for f, _l, _n in e.frames)
    assert h[1].frames[0][1] < h[2].frames[0][1] < h[3].frames[0][1]
    used = [b for s in pool.snapshot().segments for b in s.blocks if b.state == "used"]
    assert [b.frames for b in used] == [h[3].frames]  # a live block shows its allocation's stack
    pool.record_history(max_frames=1, stacks="python")
    pool.munmap(again)
    assert len(pool.snapshot().history[-1].frames) == 1
    pool.record_history()  # no stacks: the C paths again
    pool.munmap(pool.mmap(4096))
    assert kernel.fast_mmaps == fast + 1
    assert pool.snapshot().history[-1].frames == ()


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"stacks": "c"}, "stacks"),
        ({"max_entries": 0}, "max_entries"),
        ({"max_frames": -1}, "max_frames"),
    ],
)
def test_bad_arguments_are_refused(pool: Pool, kwargs: dict[str, Any], word: str) -> None:
    with pytest.raises(AMLValueError, match=word):
        pool.record_history(**kwargs)


# -- the snapshot ---------------------------------------------------------------------------


def test_a_snapshot_shows_every_slab_tiled_by_its_blocks(pool: Pool) -> None:
    a = pool.mmap(1000)
    b = pool.mmap(5000)
    big = pool.mmap(3 * MiB)
    pool.munmap(a)  # on its size's stack: cached, not merged
    s = pool.snapshot()
    assert sum(seg.size for seg in s.segments) == pool.pool_stats.bytes_reserved
    for seg in s.segments:
        end = seg.address
        for blk in seg.blocks:
            assert blk.address == end
            end += blk.size
        assert end == seg.address + seg.size
    states = {blk.address: (blk.state, blk.requested) for seg in s.segments for blk in seg.blocks}
    assert states[a.ptr] == ("cached", 0)
    assert states[b.ptr] == ("used", 5000)
    assert states[big.ptr] == ("used", 3 * MiB)
    assert [seg.small for seg in s.segments] == [True, False]
    assert s.device == pool.device
    assert not s.expandable
    pool.trim()  # a's stack merged: the small slab keeps b and one free block after it
    small = pool.snapshot().segments[0]
    assert [blk.state for blk in small.blocks] == ["free", "used", "free"]
    pool.munmap(b)
    pool.munmap(big)


def _replay(trace: list[dict[str, Any]]) -> tuple[dict[int, int], dict[int, int]]:
    """What PyTorch's viewer rebuilds from a trace: the segments and the live blocks."""
    segments: dict[int, int] = {}
    live: dict[int, int] = {}
    for e in trace:
        action, addr, size = e["action"], e["addr"], e["size"]
        if action == "segment_alloc":
            segments[addr] = size
        elif action == "segment_free":
            assert segments.pop(addr) == size
        elif action == "alloc":
            assert addr not in live
            live[addr] = size
        elif action == "free_requested":
            assert live[addr] == size
        elif action == "free_completed":
            assert live.pop(addr) == size
        else:
            raise AssertionError(f"an action the viewer does not draw: {action}")
    return segments, live


def test_the_dump_is_pytorchs_snapshot_format(pool: Pool, tmp_path: Path) -> None:
    pool.record_history(stacks="python")
    keep = [pool.mmap(n) for n in (1000, 70_000, 3 * MiB, 512)]
    pool.munmap(keep.pop(1))
    pool.munmap(keep.pop(), stream=S1)
    path = tmp_path / "snapshot.pickle"
    pool.snapshot().dump(path)
    data = pickle.loads(path.read_bytes())
    assert set(data) == {"segments", "device_traces"}
    dev = pool.device or 0
    # the keys torch.cuda._memory_viz (segments, memory, segsum, trace) and its viewer
    # (MemoryViz.js: annotate_snapshot, MemoryView, process_alloc_data) read
    reserved = allocated = free_total = 0
    for seg in data["segments"]:
        assert seg["device"] == dev
        for key in ("address", "total_size", "stream", "allocated_size", "active_size", "requested_size"):
            assert type(seg[key]) is int
        assert seg["segment_type"] in ("small", "large")
        assert isinstance(seg["frames"], list)
        addr = seg["address"]
        for b in seg["blocks"]:
            assert b["address"] == addr  # the viewer places blocks by adding their sizes
            addr += b["size"]
            assert b["state"] in ("active_allocated", "inactive")
            assert type(b["requested_size"]) is int
            assert b["requested_size"] <= b["size"]
            for f in b["frames"]:
                assert (type(f["filename"]), type(f["line"]), type(f["name"])) == (str, int, str)
            if b["state"] == "active_allocated":
                allocated += b["requested_size"]
                free_total += b["size"] - b["requested_size"]
            else:
                free_total += b["size"]
        assert addr == seg["address"] + seg["total_size"]  # segsum asserts the tiling
        assert seg["allocated_size"] == sum(
            b["size"] for b in seg["blocks"] if b["state"] == "active_allocated"
        )
        reserved += seg["total_size"]
    assert allocated + free_total == reserved == pool.pool_stats.bytes_reserved
    assert allocated == pool.pool_stats.bytes_in_use
    traces = data["device_traces"]
    assert len(traces) == dev + 1
    assert all(t == [] for t in traces[:dev])
    trace = traces[dev]
    for e in trace:
        assert set(e) == {"action", "addr", "size", "stream", "time_us", "frames"}
        assert all(type(e[k]) is int for k in ("addr", "size", "stream", "time_us"))
        assert e["frames"][0]["filename"] == __file__
        assert "test_the_dump_is_pytorchs_snapshot_format" in [f["name"] for f in e["frames"][:2]]
    assert [e["stream"] for e in trace if e["action"] == "free_completed"] == [0, S1]
    # the history began with the pool: replaying it gives the snapshot's state
    segments, live = _replay(trace)
    assert segments == {s["address"]: s["total_size"] for s in data["segments"]}
    assert live == {
        b["address"]: b["size"]
        for s in data["segments"]
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    }
    for b in keep:
        pool.munmap(b)


# -- the log --------------------------------------------------------------------------------


def test_a_csv_log_has_rmms_columns(pool: Pool, tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    pool.log_to(path)
    a = pool.mmap(1000)
    pool.munmap(a)
    b = pool.mmap(1000, stream=S1)  # would be a hit in C: the log takes the Python path
    pool.munmap(b)
    pool.log_to(None)
    pool.munmap(pool.mmap(1000))  # not logged
    rows = list(csv.reader(path.read_text().splitlines()))
    assert tuple(rows[0]) == LOG_COLUMNS == ("Thread", "Time", "Action", "Pointer", "Size", "Stream")
    body = [(r[2], int(r[3], 16), int(r[4]), int(r[5], 16)) for r in rows[1:]]
    assert body == [
        ("allocate", a.ptr, 1000, 0),
        ("free", a.ptr, 1000, 0),
        ("allocate", a.ptr, 1000, S1),
        ("free", a.ptr, 1000, S1),
    ]
    assert {int(r[0]) for r in rows[1:]} == {threading.get_ident()}
    times = [float(r[1]) for r in rows[1:]]
    assert times == sorted(times)
    assert times[0] > 1.6e9


def test_a_callback_gets_each_event_and_its_errors_are_warnings(pool: Pool) -> None:
    got: list[LogRecord] = []
    pool.log_to(got.append, segments=True)
    buf = pool.mmap(4096)
    assert [r.action for r in got] == ["segment_alloc", "allocate"]  # written right after the call
    assert got[1].pointer == buf.ptr
    assert got[1].size == 4096

    def broken(record: LogRecord) -> None:
        raise RuntimeError("disk full")

    pool.log_to(broken)
    with pytest.warns(RuntimeWarning, match="disk full"):
        pool.munmap(buf)  # freed all the same
    assert pool.stats.live_mappings == 0
    pool.log_to(None)


def test_close_writes_the_last_events_and_closes_the_file(host: StreamedHost, tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    p = aml_core.pool(host)
    p.log_to(path, segments=True)
    p.mmap(4096)  # freed by close
    p.close()
    actions = [r[2] for r in csv.reader(path.read_text().splitlines())][1:]
    assert actions == ["segment_alloc", "allocate", "free", "segment_free"]
    assert p._log is None


def test_log_to_refuses_what_it_cannot_write_to(pool: Pool) -> None:
    with pytest.raises(AMLValueError, match="path, a callable or None"):
        pool.log_to(42)  # type: ignore[arg-type]


# -- the framework hooks --------------------------------------------------------------------


@pytest.fixture
def torch() -> Iterator[Any]:
    with faked("torch") as fake:
        yield fake


def test_hook_hits_are_recorded_in_c_and_logged_through_python(torch: Any) -> None:
    with FakeDeviceArea() as area, aml_core.pool(area) as pool:
        hook = hooks.use_with_torch(pool, backend="cuda")
        state = hook.states[None]
        malloc, free = torch_entry_points(torch)
        pool.record_history()
        free(malloc(4096, 0, None), 4096, 0, None)  # a miss, then a hit of the C free
        ptr = malloc(4096, 0, None)  # a hit in C
        assert (state.fast_allocs, state.fast_frees) == (1, 1)
        assert [e.action for e in pool.snapshot().history] == ["segment_alloc", "alloc", "free", "alloc"]
        assert all(e.frames == () for e in pool.snapshot().history)  # a C hit has no stack
        got: list[LogRecord] = []
        pool.log_to(got.append)
        free(ptr, 4096, 0, None)  # with a log, the hook's C paths decline: Python logs it
        assert state.fast_frees == 1
        assert [(r.action, r.pointer) for r in got] == [("free", ptr)]
        pool.log_to(None)
        assert hook.errors == []


# -- threads --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["record", "log"])
def test_threads_lose_no_event(pool: Pool, mode: str) -> None:
    got: list[LogRecord] = []
    pool.record_history(max_entries=50_000)
    if mode == "log":
        pool.log_to(got.append)
    idents: set[int] = set()
    start = threading.Barrier(4)

    def work(size: int) -> None:
        idents.add(threading.get_ident())
        start.wait()
        for _ in range(300):
            pool.munmap(pool.mmap(size))

    threads = [threading.Thread(target=work, args=(n,)) for n in (512, 4096, 20_000, 70_000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    h = pool.snapshot().history
    blocks = [e for e in h if e.action in ("alloc", "free")]
    assert len(blocks) == 4 * 300 * 2
    assert {e.thread for e in blocks} == idents
    for ident in idents:  # each thread's own events alternate, as it made them
        mine = [e.action for e in blocks if e.thread == ident]
        assert mine == ["alloc", "free"] * 300
    if mode == "log":
        assert [(r.action, r.pointer, r.thread) for r in got] == [
            ({"alloc": "allocate", "free": "free"}[e.action], e.address, e.thread) for e in blocks
        ]
        pool.log_to(None)
