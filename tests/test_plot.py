"""``python -m aml_core.plot``: a snapshot drawn as an image (matplotlib, which aml-core
does not depend on: without it, a clear error naming it), and the timeline it draws
(reserved and live bytes after each event of the trace)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import aml_core
from aml_core import plot

MiB = 1 << 20


def _snapshot(tmp_path: Path) -> Path:
    with aml_core.pool(aml_core.area("host")) as pool:
        pool.record_history()
        bufs = [pool.mmap(n) for n in (1000, 3 * MiB, 512)]
        pool.munmap(bufs.pop(1))
        path = tmp_path / "snapshot.pickle"
        pool.snapshot().dump(path)
        for b in bufs:
            pool.munmap(b)
    return path


def test_the_timeline_counts_segments_and_live_blocks() -> None:
    trace = [
        {"action": "segment_alloc", "addr": 0, "size": 2 * MiB, "time_us": 10},
        {"action": "alloc", "addr": 0, "size": 1024, "time_us": 11},
        {"action": "free_requested", "addr": 0, "size": 1024, "time_us": 12},
        {"action": "free_completed", "addr": 0, "size": 1024, "time_us": 12},
        {"action": "segment_free", "addr": 0, "size": 2 * MiB, "time_us": 1_000_010},
    ]
    xs, reserved, allocated = plot.timeline(trace)
    assert xs == [0.0, 1e-6, 2e-6, 2e-6, 1.0]
    assert reserved == [2 * MiB, 2 * MiB, 2 * MiB, 2 * MiB, 0]
    assert allocated == [0, 1024, 1024, 0, 0]
    untimed = [{k: v for k, v in e.items() if k != "time_us"} for e in trace]
    assert plot.timeline(untimed)[0] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_a_snapshot_is_drawn_as_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    snap = _snapshot(tmp_path)
    out = tmp_path / "out.png"
    done = subprocess.run(
        [sys.executable, "-m", "aml_core.plot", str(snap), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000


def test_without_matplotlib_the_error_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snap = _snapshot(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    with pytest.raises(SystemExit, match="pip install matplotlib"):
        plot.main([str(snap), "-o", str(tmp_path / "out.png")])
    assert not (tmp_path / "out.png").exists()
