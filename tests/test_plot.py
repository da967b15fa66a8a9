"""``python -m aml_core.plot``: a snapshot drawn as an image (matplotlib, which aml-core
does not depend on: without it, a clear error naming it), and the timeline it draws
(reserved and live bytes after each event of the trace)."""

from __future__ import annotations

import pickle
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
    assert plot.main([str(snap), "-o", str(tmp_path / "out.png")]) == 1
    assert not (tmp_path / "out.png").exists()
    with pytest.raises(aml_core.AMLNotSupported, match="pip install matplotlib"):
        plot.draw({"segments": [], "device_traces": []}, tmp_path / "out.png")


# -- untrusted input (issue 32, root cause 11) ----------------------------------------------
class _Shell:
    """What a crafted snapshot holds: unpickling it would run a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        import os

        return (os.system, (f"touch {self.marker}",))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aml_core.plot", *args], capture_output=True, text=True, check=False
    )


def test_a_crafted_snapshot_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pickle"
    evil.write_bytes(pickle.dumps({"segments": [], "device_traces": [], "x": _Shell(marker)}))
    done = _run(str(evil), "-o", str(tmp_path / "out.png"))
    assert not marker.exists(), "the snapshot's pickle ran a command"
    assert done.returncode == 1
    assert done.stderr.startswith("aml: error: "), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "posix.system" in done.stderr or "os.system" in done.stderr
    assert not (tmp_path / "out.png").exists()


def _torch_snapshot() -> dict[str, object]:
    """A snapshot as torch.cuda.memory._snapshot() returns it (PyTorch 2.x): only plain
    types (the C++ side builds dicts, lists, str, int, float, bool, None)."""
    frame = {"filename": "train.py", "line": 12, "name": "step"}
    return {
        "segments": [
            {
                "device": 0,
                "address": 139_800_000_000_000,
                "total_size": 2 * MiB,
                "stream": 0,
                "segment_type": "large",
                "segment_pool_id": (0, 0),
                "allocated_size": 1024,
                "active_size": 1024,
                "requested_size": 1000,
                "is_expandable": False,
                "frames": [frame],
                "blocks": [
                    {
                        "address": 139_800_000_000_000,
                        "size": 1024,
                        "requested_size": 1000,
                        "state": "active_allocated",
                        "frames": [frame],
                    },
                    {
                        "address": 139_800_000_001_024,
                        "size": 2 * MiB - 1024,
                        "requested_size": 0,
                        "state": "inactive",
                        "frames": [],
                    },
                ],
            }
        ],
        "device_traces": [
            [
                {
                    "action": "segment_alloc",
                    "addr": 139_800_000_000_000,
                    "size": 2 * MiB,
                    "stream": 0,
                    "time_us": 1_700_000_000_000_000,
                    "frames": [frame],
                },
                {
                    "action": "alloc",
                    "addr": 139_800_000_000_000,
                    "size": 1024,
                    "stream": 0,
                    "time_us": 1_700_000_000_000_010,
                    "frames": [frame],
                    "compile_context": None,
                },
                {
                    "action": "oom",
                    "addr": 0,
                    "size": 1 << 40,
                    "stream": 0,
                    "device_free": 5.0e9,
                    "time_us": 1_700_000_000_000_020,
                    "frames": [],
                },
            ]
        ],
        "allocator_settings": {
            "PYTORCH_CUDA_ALLOC_CONF": None,
            "max_split_size": -1,
            "garbage_collection_threshold": 0.0,
            "expandable_segments": False,
            "pinned_num_register_threads": 1,
            "release_lock_on_cudamalloc": False,
            "pinned_use_cuda_host_register": False,
            "roundup_power2_divisions": {},
        },
        "external_annotations": [],
    }


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_pytorchs_own_snapshots_still_load(tmp_path: Path, protocol: int) -> None:
    from aml_core import snapshot_file

    data = _torch_snapshot()
    data["tags"] = {"a", "b"}  # a set: older protocols name builtins.set
    path = tmp_path / "torch.pickle"
    path.write_bytes(pickle.dumps(data, protocol=protocol))
    assert snapshot_file.load(path) == data
    old = tmp_path / "old.pickle"  # PyTorch before 1.13: the segments list alone
    old.write_bytes(pickle.dumps(data["segments"], protocol=protocol))
    assert snapshot_file.load(old)["segments"] == data["segments"]


def test_pytorchs_snapshot_is_drawn(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "torch.pickle"
    path.write_bytes(pickle.dumps(_torch_snapshot()))
    done = _run(str(path), "-o", str(tmp_path / "t.png"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


MALFORMED: list[tuple[str, bytes | None]] = [
    ("missing", None),
    ("empty", b""),
    ("truncated", pickle.dumps({"segments": [], "device_traces": []})[:-3]),
    ("not a pickle", b"hello, world"),
    ("a non-dict", pickle.dumps(42)),
    ("a str", pickle.dumps("segments")),
    ("segments not a list", pickle.dumps({"segments": 5})),
    ("a segment without address", pickle.dumps({"segments": [{"total_size": 1, "blocks": []}]})),
    ("a block without size", pickle.dumps({"segments": [{"address": 0, "total_size": 1, "blocks": [{}]}]})),
    ("a bool as size", pickle.dumps({"segments": [{"address": 0, "total_size": True, "blocks": []}]})),
    ("an event without action", pickle.dumps({"device_traces": [[{"size": 1}]]})),
    ("a trace not a list", pickle.dumps({"device_traces": [5]})),
    ("a global", pickle.dumps({"segments": [], "f": print})),
    ("a class", pickle.dumps({"segments": [], "c": Path("/")})),
    ("a persistent id", b"\x80\x02Pabc\n."),
]


@pytest.mark.parametrize(("name", "content"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_input_is_one_error_line_and_status_1(
    tmp_path: Path, name: str, content: bytes | None
) -> None:
    path = tmp_path / "in.pickle"
    if content is not None:
        path.write_bytes(content)
    done = _run(str(path), "-o", str(tmp_path / "out.png"))
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("aml: error: "), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out.png").exists()


def test_a_bad_output_path_is_one_error_line(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    done = _run(str(_snapshot(tmp_path)), "-o", str(tmp_path / "no" / "such" / "dir.png"))
    assert done.returncode == 1
    assert done.stderr.startswith("aml: error: ")
    assert done.stderr.count("\n") == 1


def test_a_negative_device_is_one_error_line(tmp_path: Path) -> None:
    done = _run(str(_snapshot(tmp_path)), "-o", str(tmp_path / "x.png"), "--device", "-1")
    assert done.returncode == 1
    assert done.stderr.startswith("aml: error: ")
