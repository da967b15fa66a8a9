"""A pool's history and snapshot on the HIP double (aml_core/pool/_history.py over the
kernel's ring): a device pool's events carry its streams and the snapshot its device
index; an expandable pool's chunks are PyTorch's ``segment_map`` / ``segment_unmap``
events, its mapped segment tiled by its blocks; a log of the same pool."""

from __future__ import annotations

import pickle
from pathlib import Path

import aml_hip
from hip_helpers import HipDouble

import aml_core
from aml_core.pool import LogRecord

MiB = 1 << 20


def test_a_device_pools_events_carry_their_streams(hip: HipDouble) -> None:
    with aml_hip.stream(non_blocking=True) as s, aml_hip.create(0, 0) as device, aml_core.pool(device) as p:
        p.record_history()
        a = p.mmap(4096, stream=s)
        p.munmap(a)  # on the stream it was allocated on
        b = p.mmap(4096, stream=s)  # reused at once on s, in C
        p.munmap(b, stream=s)
        blocks = [e for e in p.snapshot().history if not e.action.startswith("segment")]
        assert [(e.action, e.address, e.stream) for e in blocks] == [
            ("alloc", a.ptr, s.handle),
            ("free", a.ptr, s.handle),
            ("alloc", a.ptr, s.handle),
            ("free", a.ptr, s.handle),
        ]
        data = p.snapshot().to_torch()
        assert {seg["device"] for seg in data["segments"]} == {0}
        assert [e["stream"] for e in data["device_traces"][0] if e["action"] == "alloc"] == [s.handle] * 2


def test_an_expandable_pools_chunks_are_map_and_unmap_events(hip: HipDouble, tmp_path: Path) -> None:
    vm = aml_hip.virtual_memory(0)
    got: list[LogRecord] = []
    try:
        with aml_core.pool(vm, expandable=True, capacity=64 * MiB) as p:
            p.record_history()
            p.log_to(got.append, segments=True)
            a = p.mmap(MiB)
            b = p.mmap(5 * MiB)  # the segment grows in place
            p.munmap(b)
            snap = p.snapshot()
            (seg,) = snap.segments
            assert snap.expandable
            assert (seg.address, seg.size) == (a.ptr, p.pool_stats.bytes_reserved)
            assert [(blk.state, blk.size) for blk in seg.blocks] == [("used", MiB), ("cached", 5 * MiB)]
            released = p.trim()
            h = p.snapshot().history
            maps = [(e.address, e.size) for e in h if e.action == "segment_map"]
            unmaps = [(e.address, e.size) for e in h if e.action == "segment_unmap"]
            assert [m[0] for m in maps] == [a.ptr, a.ptr + maps[0][1]]
            assert sum(size for _addr, size in unmaps) == released > 0
            path = tmp_path / "snapshot.pickle"
            p.snapshot().dump(path)
            data = pickle.loads(path.read_bytes())
            assert data["segments"][0]["is_expandable"]
            mapped = sum(e["size"] for e in data["device_traces"][0] if e["action"] == "segment_map")
            unmapped = sum(e["size"] for e in data["device_traces"][0] if e["action"] == "segment_unmap")
            assert mapped - unmapped == data["segments"][0]["total_size"]
            p.munmap(a)
        assert [r.action for r in got if r.action.startswith("segment")] == [
            "segment_map",
            "segment_map",
            "segment_unmap",
            "segment_unmap",
        ]
    finally:
        vm.close()
