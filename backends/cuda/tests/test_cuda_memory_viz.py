"""A pool's snapshot opened by PyTorch's own tools (issue 22): a PyTorch training loop
allocating through ``use_with_torch`` with the pool's history on, its snapshot dumped,
then ``torch.cuda._memory_viz`` reading it (``stats`` checks that the blocks tile the
segments, ``trace`` walks the history, ``trace_plot`` and ``segment_plot`` write the
viewer's HTML) and PyTorch's own snapshot of the same loop, for the keys it writes.
Marked ``gpu`` (in child processes: PyTorch takes one allocator per process); skipped
without torch."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

_LOOP = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(5):
    x = torch.randn(256, 1024, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
"""

_AML_CHILD = (
    """
import sys, aml_core, aml_cuda
pool = aml_core.pool(aml_cuda.create(0))
hook = aml_cuda.use_with_torch(pool)
pool.record_history(stacks="python")
"""
    + _LOOP
    + """
snap = pool.snapshot()
snap.dump(sys.argv[1])
assert hook.errors == [], hook.errors
print("ok", len(snap.history), len(snap.segments), flush=True)
"""
)

_TORCH_CHILD = (
    """
import sys, pickle, torch
torch.cuda.memory._record_memory_history(max_entries=100000)
"""
    + _LOOP
    + """
with open(sys.argv[1], "wb") as f:
    pickle.dump(torch.cuda.memory._snapshot(), f)
print("ok", flush=True)
"""
)

_VIZ_CHILD = """
import json, pickle, sys
from torch.cuda import _memory_viz as viz
with open(sys.argv[1], "rb") as f:
    data = pickle.load(f)
out = {
    "stats": viz.segsum(data),
    "trace": viz.trace(data),
    "trace_plot": len(viz.trace_plot(data)),
    "segment_plot": len(viz.segment_plot(data)),
}
print(json.dumps(out))
"""


def _run(code: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _keys(data: dict[str, object]) -> dict[str, list[str]]:
    segs = data["segments"]
    assert isinstance(segs, list)
    traces = [e for t in data["device_traces"] for e in t]  # type: ignore[attr-defined]
    return {
        "top": sorted(data),
        "segment": sorted({k for s in segs for k in s}),
        "block": sorted({k for s in segs for b in s["blocks"] for k in b}),
        "trace": sorted({k for e in traces for k in e}),
        "actions": sorted({e["action"] for e in traces}),
    }


@pytest.mark.gpu
def test_pytorchs_memory_viz_reads_a_pools_snapshot(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    ours = tmp_path / "aml_snapshot.pickle"
    assert _run(_AML_CHILD, str(ours)).startswith("ok")
    theirs = tmp_path / "torch_snapshot.pickle"
    assert _run(_TORCH_CHILD, str(theirs)).startswith("ok")
    viz = json.loads(_run(_VIZ_CHILD, str(ours)))
    assert "total_reserved" in viz["stats"]
    assert "total_allocated" in viz["stats"]
    assert "entries" in viz["trace"]
    assert viz["trace_plot"] > 1000
    assert viz["segment_plot"] > 1000
    # the command line too, as a user runs it
    html = tmp_path / "trace.html"
    done = subprocess.run(
        [sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", str(ours), "-o", str(html)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "add_local_files" in html.read_text()
    # every key the viewer and _memory_viz read, where PyTorch's own snapshot has it too
    mine, torch_keys = _keys(pickle.loads(ours.read_bytes())), _keys(pickle.loads(theirs.read_bytes()))
    print("aml:", mine, "\ntorch:", torch_keys)
    needed = {
        "top": {"segments", "device_traces"},
        "segment": {"device", "address", "total_size", "stream", "blocks", "allocated_size"},
        "block": {"size", "state", "requested_size", "frames"},
        "trace": {"action", "addr", "size", "stream", "frames"},
    }
    for part, keys in needed.items():
        assert keys <= set(mine[part]), (part, keys - set(mine[part]))
        assert keys <= set(torch_keys[part]), (
            part,
            "PyTorch's snapshot changed",
            keys - set(torch_keys[part]),
        )
    assert set(mine["actions"]) <= {
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
    }
    assert {"alloc", "free_completed", "segment_alloc"} <= set(mine["actions"])
