"""Two emulated hosts on one virtual network, with soft-RoCE on each: the cross-host tests of
``tests/hosts`` run between them.

The NUMA lab (:mod:`tests.support.numa_lab`) boots one guest; this boots two at once, with
the same means (virtme-ng + QEMU TCG over this machine's root filesystem, Debian's kernel),
each with a virtio NIC on one virtual Ethernet whose QEMU side is a pair of unix datagram
sockets on this machine (``-netdev dgram``, QEMU 7.2+): no address of this machine's network
is used, and the guests reach nothing but each other. In each guest, before the command:

* the NIC gets its address (``10.34.0.1/24`` on ``a``, ``10.34.0.2/24`` on ``b``), the
  hostname ``aml-host-a`` / ``aml-host-b`` and both names in ``/etc/hosts``;
* soft-RoCE: ``modprobe rdma_rxe; rdma link add rxe0 type rxe netdev <nic>``;
* ``AML_TWO_HOSTS=a`` (or ``b``), ``AML_TWO_HOSTS_SELF``/``AML_TWO_HOSTS_PEER`` (the two
  addresses) and ``AML_TWO_HOSTS_TOKEN`` (a random token the two share) are exported.

Host ``a`` runs the command (by default ``python -m pytest tests/hosts``); host ``b`` runs
the peer agent (:mod:`tests.hosts.agent`), which starts the programs ``a``'s tests ask for
(a UCX peer, an ``ibv_rc_pingpong`` server, Open MPI's daemon) and ends when ``a`` is done.

Usage (from a repository root with aml_core built in place; ``tox -e hosts`` does this)::

    python -m tests.support.two_hosts --lock /work/coord/qemu.lock
    python -m tests.support.two_hosts --lock /work/coord/qemu.lock -- sh -c 'ibv_devices'
    python -m tests.support.two_hosts --dry-run

Where QEMU, ``vng`` or a Debian kernel is missing, it says why and exits 0 (nothing ran).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import secrets
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support import numa_lab

__all__ = [
    "ADDRESSES",
    "ENV",
    "HOSTNAMES",
    "NESTED",
    "SKIP_REASON",
    "boot_pair",
    "guest_script",
    "main",
    "vng_command",
]

#: The environment variable naming the host a guest is (``a`` or ``b``; unset outside).
ENV = "AML_TWO_HOSTS"
#: Set in a pytest that a cross-host test starts on host a (on another UCX build, say):
#: that session leaves host b's agent running for the outer one (tests/hosts/conftest.py).
NESTED = "AML_TWO_HOSTS_NESTED"
#: Why a cross-host test skips outside the two guests.
SKIP_REASON = "runs between the two emulated hosts (tox -e hosts)"
#: Each host's address on the guests' own virtual network.
ADDRESSES = {"a": "10.34.0.1", "b": "10.34.0.2"}
HOSTNAMES = {"a": "aml-host-a", "b": "aml-host-b"}
#: Each guest's CPUs and memory (MiB): the two share this machine's cores.
CPUS, MEMORY_MIB = 1, 1536
#: The agent's TCP port on host b.
AGENT_PORT = 7340


def qemu_net_args(host: str, sockets: Path) -> list[str]:
    """A virtio NIC on a unix datagram socket pair: ``a`` sends to ``b``'s socket and
    ``b`` to ``a``'s (a two-port Ethernet cable, on this machine only)."""
    me, peer = sockets / f"{host}.sock", sockets / f"{'b' if host == 'a' else 'a'}.sock"
    mac = f"52:54:00:34:00:0{1 if host == 'a' else 2}"
    return [
        "-device",
        f"virtio-net-pci,netdev=aml0,mac={mac}",
        "-netdev",
        f"dgram,id=aml0,local.type=unix,local.path={me},remote.type=unix,remote.path={peer}",
    ]


def setup_lines(host: str) -> list[str]:
    """The guest's network and soft-RoCE, before its command (as root)."""
    me = ADDRESSES[host]
    hosts = "".join(f"{ADDRESSES[h]} {HOSTNAMES[h]}\\n" for h in ADDRESSES)
    return [
        "ip link set lo up",
        "nic=$(ls /sys/class/net | grep -v '^lo$' | head -n1)",
        f"ip addr add {me}/24 dev $nic",
        "ip link set $nic up",
        f"hostname {HOSTNAMES[host]}",
        f"printf '127.0.0.1 localhost\\n{hosts}' > /etc/hosts",
        "modprobe rdma_rxe",
        "rdma link add rxe0 type rxe netdev $nic",
        "export AML_TWO_HOSTS_NIC=$nic",
    ]


def guest_script(
    host: str, command: Sequence[str], cwd: Path, token: str, cached: Sequence[Path] = ()
) -> str:
    """What a guest runs: the setup, the cached read-only mounts of ``cached`` (the NUMA
    lab's :func:`~tests.support.numa_lab.cached_mounts`), this process's
    AML_/OMPI_/UCX_/PYTHON*/PYTEST* variables, PATH with this Python's bin first, the host's
    variables, then the command in ``cwd``."""
    prefixes = (*numa_lab.PASSED_PREFIXES, "UCX_", "PRTE_", "PMIX_")
    env = {k: v for k, v in os.environ.items() if k.startswith(prefixes)}
    env.pop("PYTHONHOME", None)
    env.pop(numa_lab.ENV, None)
    env[ENV] = host
    env["AML_TWO_HOSTS_SELF"] = ADDRESSES[host]
    env["AML_TWO_HOSTS_PEER"] = ADDRESSES["b" if host == "a" else "a"]
    env["AML_TWO_HOSTS_TOKEN"] = token
    env["PATH"] = f"{Path(sys.executable).parent}:{numa_lab.GUEST_PATH}"
    lines = setup_lines(host) + numa_lab.cached_mounts(cached)
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines.append(f"cd {shlex.quote(str(cwd))}")
    lines.append(shlex.join(command))
    return "; ".join(lines)


def vng_command(
    host: str,
    command: Sequence[str],
    sockets: Path,
    token: str,
    *,
    accel: str = "tcg",
    cwd: Path | None = None,
    script_dir: Path | None = None,
) -> list[str]:
    """The ``vng`` command line that boots host ``host`` and runs ``command`` in it. With
    ``script_dir`` (a directory under /tmp, which the guest sees through its overlay) the
    guest's script is written to ``<script_dir>/host-<host>.sh`` and the guest runs that
    file: virtme-ng passes ``--exec`` on the kernel's command line (base64), which x86 cuts
    at 2048 bytes (``COMMAND_LINE_SIZE``), and a cut one loses ``init=`` after it: the guest
    never starts its init and sits idle (the tests' script, its exports and the cached
    mounts came to 2275 and 2675 bytes). Without it (``--dry-run``), inline."""
    kernel = numa_lab.find_kernel()
    vng = numa_lab._vng()
    if kernel is None or vng is None:
        raise RuntimeError(numa_lab.missing() or "no kernel or vng")
    where = (cwd or Path.cwd()).resolve()
    args = [vng, "--run", str(kernel), "--cpus", str(CPUS), "--memory", f"{MEMORY_MIB}M"]
    # as the NUMA lab boots: 9p only (no failed virtiofsd starts), and the interpreter and
    # its environment mounted again cached (numa_lab.cached_trees says why)
    args += ["--disable-microvm", "--disable-monitor", numa_lab.FORCE_9P, "--cwd", str(where)]
    if accel == "tcg":
        args.append("--disable-kvm")
    for path in numa_lab._mapped_dirs(where):
        args.append(f"--rwdir={path}={path}")
    cached = numa_lab.cached_trees()
    qemu = [*qemu_net_args(host, sockets), *numa_lab.cached_exports(cached)]
    args.append(f"--qemu-opts={shlex.join(qemu)}")
    script = guest_script(host, command, where, token, cached)
    if script_dir is not None:
        path = script_dir / f"host-{host}.sh"
        path.write_text(script + "\n")
        script = f"sh {shlex.quote(str(path))}"
    args.append(f"--exec={script}")
    return args


def _pump(proc: subprocess.Popen[bytes], tag: str, log: Path | None) -> None:
    out = open(log, "w") if log is not None else None  # noqa: SIM115 - closed below
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            sys.stdout.write(f"[{tag}] {line}")
            sys.stdout.flush()
            if out is not None:
                out.write(line)
    finally:
        if out is not None:
            out.close()


def boot_pair(
    command: Sequence[str],
    *,
    peer_command: Sequence[str] | None = None,
    accel: str = "tcg",
    timeout: float = 1500,
    log_dir: Path | None = None,
) -> int:
    """Boot both hosts at once: ``a`` runs ``command``, ``b`` ``peer_command`` (default the
    agent). The exit status is ``a``'s (124 past ``timeout`` seconds, both killed); ``b`` is
    killed when ``a`` has exited and ``b`` has not within a minute."""
    peer_command = list(peer_command or [sys.executable, "-m", "tests.hosts.agent"])
    token = secrets.token_hex(16)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    with tempfile.TemporaryDirectory(prefix="aml-two-hosts-") as tmp:
        sockets = Path(tmp)
        procs: dict[str, subprocess.Popen[bytes]] = {}
        pumps: list[threading.Thread] = []
        start = time.monotonic()
        print(f"two-hosts: booting a ({ADDRESSES['a']}) and b ({ADDRESSES['b']}); {accel}", flush=True)
        try:
            for host, cmd in (("b", peer_command), ("a", list(command))):
                argv = vng_command(host, cmd, sockets, token, accel=accel, script_dir=sockets)
                procs[host] = subprocess.Popen(
                    argv,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,  # a timeout ends vng, virtme-run and QEMU together
                )
                log = log_dir / f"host-{host}.log" if log_dir is not None else None
                pumps.append(threading.Thread(target=_pump, args=(procs[host], host, log), daemon=True))
                pumps[-1].start()
            try:
                rc = procs["a"].wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                print(f"two-hosts: killed after {timeout:.0f} s (--timeout)", flush=True)
                rc = 124
            try:
                procs["b"].wait(timeout=60)
            except subprocess.TimeoutExpired:
                print("two-hosts: b still ran a minute after a: killed", flush=True)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            for pump in pumps:
                pump.join(timeout=10)
    b = procs["b"].returncode if "b" in procs else None
    print(f"two-hosts: a exit {rc}, b exit {b}, after {time.monotonic() - start:.0f} s", flush=True)
    return rc


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.two_hosts",
        description=(
            "Boot two emulated hosts at once on one virtual network (virtme-ng + QEMU, -netdev "
            "dgram over unix sockets on this machine), soft-RoCE (rxe0) on each, and run a command "
            "on host a while host b runs the peer agent. Without a command: python -m pytest "
            "-p no:cacheprovider tests/hosts. Exits with a's status; 0 with the reason when no "
            "guest can boot here."
        ),
    )
    parser.add_argument(
        "--accel",
        choices=("tcg", "kvm"),
        default=os.environ.get("AML_NUMA_LAB_ACCEL", "tcg"),
        help="QEMU acceleration (default tcg, or $AML_NUMA_LAB_ACCEL)",
    )
    parser.add_argument("--timeout", type=float, default=1500, help="seconds for the pair (default 1500)")
    parser.add_argument("--lock", type=Path, help="hold an flock on this file while the guests run")
    parser.add_argument("--log-dir", type=Path, help="write each guest's output to <dir>/host-<a|b>.log")
    parser.add_argument("--peer", help="a shell command for host b instead of the agent")
    parser.add_argument("--dry-run", action="store_true", help="print the vng command lines and exit")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run on host a")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/hosts"]
    peer = ["sh", "-c", args.peer] if args.peer else None
    why = numa_lab.missing()
    if why is not None:
        print(f"two-hosts: SKIPPED, no guest can boot here: {why}")
        return 0
    if args.dry_run:
        sockets = Path(tempfile.gettempdir()) / "aml-two-hosts-XXXX"
        for host, cmd in (("a", command), ("b", peer or [sys.executable, "-m", "tests.hosts.agent"])):
            print(shlex.join(vng_command(host, cmd, sockets, "TOKEN", accel=args.accel)))
        return 0
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    numa_lab.precompile(Path.cwd())
    lock = open(args.lock, "a") if args.lock is not None else None  # noqa: SIM115
    try:
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        return boot_pair(
            command, peer_command=peer, accel=args.accel, timeout=args.timeout, log_dir=args.log_dir
        )
    finally:
        if lock is not None:
            lock.close()


if __name__ == "__main__":
    sys.exit(main())
