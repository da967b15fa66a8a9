"""The NUMA lab: emulated multi-node machines that run the tests of ``tests/numa``.

Every machine here has one NUMA node, so multi-node placement cannot be tested on it
directly. The lab boots an emulated machine with `virtme-ng <https://github.com/arighi/virtme-ng>`_
(``vng``) and QEMU over this machine's own root filesystem (9p, read-only, with the repository
mapped read-write; this Python's installation and venv mounted again read-only and cached,
:func:`cached_trees`), on Debian's kernel (``linux-image-amd64`` in ``/boot``), and runs a
command inside it, by default ``python -m pytest tests/numa`` with ``AML_NUMA_LAB=<topology>``
set. The installed venv runs unchanged inside the guest. ``tox -e numa`` runs every
topology; ``tests/numa/conftest.py`` selects the tests of the running topology and turns a
skip into a failure there.

Topologies (:data:`TOPOLOGIES`; ``--list`` prints them):

* ``two-node``: 2 nodes with a CPU each, distance 21;
* ``tiered``: 4 nodes with HMAT: 2 with a CPU each, a CPU-less "fast" node (HBM-like: high
  bandwidth, low latency) attached to node 0 and a CPU-less "far" node (CXL-like: low
  bandwidth, high latency) attached to node 1, distances set;
* ``small-node``: 2 nodes with a CPU each and a tiny CPU-less third node (64 MiB): BIND's
  ENOMEM, PREFERRED's spill, INTERLEAVE over a full node.

Acceleration: QEMU's TCG (emulation) by default, as KVM guests hang at boot on this
project's machines; ``--accel kvm`` tries KVM. Where QEMU, ``vng`` or a Debian kernel is
missing, the lab says why and exits 0 (``tox -e numa`` then skips; nothing ran).

Usage (from a repository root with aml_core built in place)::

    python -m tests.support.numa_lab --list
    python -m tests.support.numa_lab                      # every topology, tests/numa
    python -m tests.support.numa_lab --topology two-node -- pytest tests/numa/test_placement.py -x
    python -m tests.support.numa_lab --topology tiered -- cat /sys/devices/system/node/node2/distance

On a shared machine, ``--lock /work/coord/qemu.lock`` (or ``flock FILE python -m ...``) runs
one guest at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

__all__ = [
    "ENV",
    "SKIP_REASON",
    "TOPOLOGIES",
    "HmatLink",
    "LabNode",
    "LabTopology",
    "cached_exports",
    "cached_mounts",
    "cached_trees",
    "current",
    "fetch_kernel",
    "find_kernel",
    "image_package",
    "kernel_cache",
    "kernel_for",
    "kernel_series",
    "guest_script",
    "main",
    "missing",
    "vng_command",
]

#: The environment variable naming the topology a guest runs (unset outside the lab).
ENV = "AML_NUMA_LAB"
#: Why a lab test skips outside the lab.
SKIP_REASON = "runs in the NUMA lab (tox -e numa)"
#: The repository's root (the guest's working directory).
ROOT = Path(__file__).resolve().parents[2]
#: Host environment variables passed into the guest (by prefix or name).
PASSED_PREFIXES = ("AML_", "OMPI_", "PYTHON", "HYPOTHESIS", "PYTEST")
#: The line the guest prints (then its kernel release) as its command starts: the host
#: times the boot up to it.
STARTED = "numa-lab: guest up, running the command on Linux"
#: How long a guest may take to come up (print STARTED): they boot in 30-65 s on the loaded
#: 2-core machine; one not up after this hung (seen once: QEMU idle, the console silent) and
#: is booted once more (:func:`main`).
BOOT_LIMIT = 300.0
#: :func:`boot`'s status for a guest that did not come up within its boot limit.
BOOT_HUNG = 75
#: The guest's PATH after this Python's bin.
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@attrs.frozen
class LabNode:
    """One NUMA node of an emulated machine: its memory (MiB), its CPUs (none: a CPU-less
    memory node) and, for a CPU-less node under HMAT, its initiator (the node whose CPUs
    it is attached to)."""

    node: int
    memory_mib: int
    cpus: tuple[int, ...] = ()
    initiator: int | None = None

    @property
    def has_cpu(self) -> bool:
        return bool(self.cpus)


@attrs.frozen
class HmatLink:
    """The HMAT access attributes QEMU is given from an initiator node to a target node:
    latency in nanoseconds, bandwidth in MB/s (Linux shows the best initiator's under
    ``/sys/devices/system/node/node<target>/access0/initiators/``)."""

    initiator: int
    target: int
    latency_ns: int
    bandwidth_mbps: int


@attrs.frozen
class LabTopology:
    """An emulated machine: its nodes, the distances between them (``{(a, b): d}`` for
    a < b; 10 on the diagonal), and the HMAT links (empty: no HMAT)."""

    name: str
    description: str
    nodes: tuple[LabNode, ...]
    distances: dict[tuple[int, int], int] = attrs.field(factory=dict)
    hmat: tuple[HmatLink, ...] = ()
    #: The Linux series the guest boots (``"6.12"``: Debian's ``linux-image-6.12-amd64``,
    #: unpacked under :func:`kernel_cache` by :func:`fetch_kernel`), None: the Debian kernel installed
    #: in /boot (Debian 12's ``linux-image-amd64``, 6.1).
    kernel: str | None = None
    #: Why this topology boots that kernel (shown by ``--list`` and in a test's failure).
    kernel_reason: str = ""

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(n.node for n in self.nodes)

    @property
    def cpu_nodes(self) -> tuple[int, ...]:
        """The nodes with CPUs."""
        return tuple(n.node for n in self.nodes if n.cpus)

    @property
    def cpuless_nodes(self) -> tuple[int, ...]:
        """The CPU-less (memory-only) nodes."""
        return tuple(n.node for n in self.nodes if not n.cpus)

    @property
    def cpus(self) -> int:
        return sum(len(n.cpus) for n in self.nodes)

    @property
    def memory_mib(self) -> int:
        return sum(n.memory_mib for n in self.nodes)

    def node(self, node: int) -> LabNode:
        for n in self.nodes:
            if n.node == node:
                return n
        raise KeyError(node)

    def distance(self, a: int, b: int) -> int:
        """The distance between two nodes, as ``/sys/devices/system/node/node<a>/distance``
        shows it (10 to itself; 20 where none was set, QEMU's default for remote nodes)."""
        if a == b:
            return 10
        return self.distances.get((min(a, b), max(a, b)), 20)

    def link(self, initiator: int, target: int) -> HmatLink | None:
        for link in self.hmat:
            if (link.initiator, link.target) == (initiator, target):
                return link
        return None

    def qemu_args(self) -> list[str]:
        """QEMU's memory backends, nodes, distances and HMAT (``-machine hmat=on``)."""
        args: list[str] = []
        for n in self.nodes:
            args += ["-object", f"memory-backend-ram,id=lab-m{n.node},size={n.memory_mib}M"]
            spec = f"node,nodeid={n.node},memdev=lab-m{n.node}"
            if n.cpus:
                spec += f",cpus={n.cpus[0]}" + (f"-{n.cpus[-1]}" if len(n.cpus) > 1 else "")
            if self.hmat:
                spec += f",initiator={n.node if n.cpus else n.initiator}"
            args += ["-numa", spec]
        for (a, b), d in sorted(self.distances.items()):
            args += ["-numa", f"dist,src={a},dst={b},val={d}"]
        if self.hmat:
            args = ["-machine", "hmat=on", *args]
            for link in self.hmat:
                base = f"hmat-lb,initiator={link.initiator},target={link.target},hierarchy=memory"
                args += ["-numa", f"{base},data-type=access-latency,latency={link.latency_ns}"]
                args += ["-numa", f"{base},data-type=access-bandwidth,bandwidth={link.bandwidth_mbps}M"]
        return args


def _links(table: dict[tuple[int, int], tuple[int, int]]) -> tuple[HmatLink, ...]:
    return tuple(HmatLink(i, t, lat, bw) for (i, t), (lat, bw) in sorted(table.items()))


#: The lab's machines, by name.
TOPOLOGIES: dict[str, LabTopology] = {
    t.name: t
    for t in (
        LabTopology(
            name="two-node",
            description="2 nodes with a CPU each (512 MiB each), distance 21",
            nodes=(LabNode(0, 512, (0,)), LabNode(1, 512, (1,))),
            distances={(0, 1): 21},
            kernel="6.12",
            kernel_reason=(
                "weighted interleave (MPOL_WEIGHTED_INTERLEAVE) is Linux 6.9+; the other "
                "topologies boot Debian 12's 6.1, where aml refuses it"
            ),
        ),
        LabTopology(
            name="tiered",
            description=(
                "4 nodes with HMAT: 0 and 1 with a CPU each (512 MiB), 2 a CPU-less fast node "
                "(HBM-like, 256 MiB, attached to node 0), 3 a CPU-less far node (CXL-like, "
                "256 MiB, attached to node 1)"
            ),
            nodes=(
                LabNode(0, 512, (0,)),
                LabNode(1, 512, (1,)),
                LabNode(2, 256, initiator=0),
                LabNode(3, 256, initiator=1),
            ),
            distances={(0, 1): 21, (0, 2): 14, (1, 2): 24, (0, 3): 28, (1, 3): 17, (2, 3): 30},
            # (initiator, target): (latency ns, bandwidth MB/s)
            hmat=_links(
                {
                    (0, 0): (10, 20480),
                    (0, 1): (20, 10240),
                    (0, 2): (8, 51200),
                    (0, 3): (100, 4096),
                    (1, 0): (20, 10240),
                    (1, 1): (10, 20480),
                    (1, 2): (16, 25600),
                    (1, 3): (80, 5120),
                }
            ),
        ),
        LabTopology(
            name="small-node",
            description=(
                "2 nodes with a CPU each (512 MiB each, distance 21) and a tiny CPU-less node 2 "
                "(64 MiB, distances 17 and 28): too small for the tests' buffers"
            ),
            nodes=(LabNode(0, 512, (0,)), LabNode(1, 512, (1,)), LabNode(2, 64)),
            distances={(0, 1): 21, (0, 2): 17, (1, 2): 28},
        ),
    )
}


def current() -> LabTopology | None:
    """The topology this process runs in (``AML_NUMA_LAB``), None outside the lab.
    An unknown name is an error (a misspelt topology must not pass as "outside the lab")."""
    name = os.environ.get(ENV)
    if not name:
        return None
    try:
        return TOPOLOGIES[name]
    except KeyError:
        raise ValueError(f"{ENV}={name!r} names no lab topology; known: {', '.join(TOPOLOGIES)}") from None


# -- the host side: booting a guest ---------------------------------------------------------


#: The environment variable naming where the extra guest kernels are unpacked.
KERNELS_ENV = "AML_NUMA_LAB_KERNELS"
#: The root whose /boot and /lib/modules hold the installed kernels (a test's fake root).
SYSTEM_ROOT = Path("/")


def kernel_cache() -> Path:
    """Where the extra guest kernels are unpacked (``$AML_NUMA_LAB_KERNELS``, default
    ``~/.cache/aml-numa-lab/kernels``): one directory per Debian package, made by
    :func:`fetch_kernel` with ``dpkg -x`` (``<dir>/boot/vmlinuz-<release>`` beside
    ``<dir>/lib/modules/<release>``, where virtme-ng finds the modules). Never installed,
    so the host's /boot and boot loader are left as they are."""
    return Path(os.environ.get(KERNELS_ENV) or Path.home() / ".cache" / "aml-numa-lab" / "kernels")


def _kernel_version(path: Path) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", path.name)]


def _kernels() -> list[tuple[Path, bool]]:
    """Every bootable Debian kernel: ``(image, installed)``, those of /boot (with their
    modules in /lib/modules) and those unpacked under :func:`kernel_cache`."""
    found: list[tuple[Path, bool]] = []
    for root, installed in ((SYSTEM_ROOT, True), *((d, False) for d in sorted(kernel_cache().glob("*/")))):
        for image in sorted(root.glob("boot/vmlinuz-*-amd64")):
            release = image.name.removeprefix("vmlinuz-")
            if (root / "lib" / "modules" / release).is_dir():
                found.append((image, installed))
    return found


def kernel_series(image: Path) -> str:
    """``"6.12"`` of ``vmlinuz-6.12.117+deb12-amd64``."""
    return ".".join(image.name.removeprefix("vmlinuz-").split(".")[:2])


def find_kernel(series: str | None = None) -> Path | None:
    """The guest kernel: of ``series`` (``"6.12"``) the newest found in /boot or under
    :func:`kernel_cache`; without a series the newest Debian kernel installed in /boot
    (``vmlinuz-*-amd64`` with its modules in /lib/modules, as linux-image-amd64 puts them).
    None when there is none."""
    found = [
        image
        for image, installed in _kernels()
        if (installed if series is None else kernel_series(image) == series)
    ]
    return max(found, key=_kernel_version) if found else None


def kernel_for(topology: LabTopology) -> tuple[Path | None, str | None]:
    """The kernel ``topology`` boots, and a note when it is not the one it names (its
    series is not unpacked here: the default kernel is booted instead, and the tests that
    need the series fail saying so)."""
    if topology.kernel is None:
        return find_kernel(), None
    image = find_kernel(topology.kernel)
    if image is not None:
        return image, None
    fallback = find_kernel()
    return fallback, (
        f"no Linux {topology.kernel} kernel in /boot or {kernel_cache()} (--fetch-kernels, which tox -e "
        f"numa passes, unpacks Debian's linux-image-{topology.kernel}-amd64 there); booting {fallback} "
        f"instead, so the checks that need {topology.kernel} ({topology.kernel_reason}) fail"
    )


def image_package(depends: str, series: str) -> str | None:
    """The image package ``apt-cache depends linux-image-<series>-amd64`` names
    (``linux-image-6.12.117+deb12-amd64``), None when it names none."""
    pattern = re.compile(rf"^linux-image-{re.escape(series)}\.\d+\S*-amd64$")
    for line in depends.splitlines():
        kind, _, name = line.strip().partition(" ")
        if kind in ("Depends:", "|Depends:") and pattern.match(name.strip()):
            return name.strip()
    return None


def fetch_kernel(series: str) -> Path | None:
    """Download Debian's ``linux-image-<series>-amd64`` (its image package, through the
    meta package, from this machine's apt sources: Debian 12's security suite has 6.12)
    with ``apt-get download`` and unpack it under :func:`kernel_cache` with ``dpkg -x``,
    its modules indexed by ``depmod``. Nothing is installed: /boot and the boot loader
    are left as they are. Root with apt only; returns the image, or None after saying why."""
    meta = f"linux-image-{series}-amd64"
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("apt-get", "apt-cache", "dpkg")):
        print(f"numa-lab: cannot fetch {meta}: needs root and apt-get/dpkg (Debian)", flush=True)
        return None

    def resolve() -> str | None:
        out = subprocess.run(["apt-cache", "depends", meta], capture_output=True, text=True, check=False)
        return image_package(out.stdout, series) if out.returncode == 0 else None

    package = resolve()
    if package is None:
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        package = resolve()
    if package is None:
        print(f"numa-lab: cannot fetch {meta}: apt knows no such package here", flush=True)
        return None
    cache = kernel_cache()
    cache.mkdir(parents=True, exist_ok=True)
    print(
        f"numa-lab: fetching {package} into {cache} (apt-get download + dpkg -x, not installed)", flush=True
    )
    # unpacked beside the cache, then moved in whole: an interrupted fetch leaves no half kernel
    with tempfile.TemporaryDirectory(dir=cache, prefix=".fetch-") as tmp:
        got = subprocess.run(["apt-get", "download", "-qq", package], cwd=tmp, check=False)
        debs = sorted(Path(tmp).glob("*.deb"))
        if got.returncode != 0 or not debs:
            print(f"numa-lab: apt-get download {package} failed ({got.returncode})", flush=True)
            return None
        root = Path(tmp) / "root"
        subprocess.run(["dpkg", "-x", str(debs[0]), str(root)], check=True)
        if shutil.which("depmod"):
            subprocess.run(["depmod", "-b", str(root), package.removeprefix("linux-image-")], check=True)
        shutil.rmtree(cache / package, ignore_errors=True)
        root.rename(cache / package)
    return find_kernel(series)


def _vng() -> str | None:
    beside = Path(sys.executable).parent / "vng"
    return str(beside) if beside.exists() else shutil.which("vng")


def missing() -> str | None:
    """Why no guest can boot here (None: one can)."""
    if not sys.platform.startswith("linux"):
        return f"the NUMA lab needs Linux, not {sys.platform}"
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 is not installed (Debian: apt-get install qemu-system-x86)"
    if _vng() is None:
        return "vng is not installed (pip install virtme-ng)"
    if shutil.which("busybox") is None:
        return "busybox is not installed (Debian: apt-get install busybox-static)"
    kernel = find_kernel()
    if kernel is None:
        return "no Debian kernel in /boot with its modules (Debian: apt-get install linux-image-amd64)"
    if not os.access(kernel, os.R_OK):
        return f"{kernel} is not readable by this user (run as root)"
    return None


#: The 9p mount options of :func:`cached_trees` in the guest: read-only, cached
#: (``cache=loose``: pages, dentries and attributes stay in the guest's memory), the
#: message size virtme-ng gives its own mounts.
CACHED_MOUNT_OPTIONS = "ro,trans=virtio,version=9p2000.L,cache=loose,msize=524288"


def cached_trees() -> list[Path]:
    """The trees the guest mounts again read-only with 9p ``cache=loose`` over where
    virtme-ng mapped them uncached: this Python's installation (``sys.base_prefix``: the
    interpreter and the standard library) and its environment (``sys.prefix``: pytest,
    NumPy, hypothesis, Open MPI), shortest first, "/" and duplicates left out. virtme-ng
    exports the root and ``--rwdir`` uncached (``cache=none``), so every interpreter the
    tests start (pytest, each child, each MPI rank, ``aml info``'s probes) walks, stats and
    reads each module over the emulated virtio transport again; nothing in a guest writes
    to these trees, so the guest may keep what it has read (``import pytest`` 29 s
    uncached, 8 s cached, in one small-node boot: evidence/2026-12-02-qemu-numa-lab-time).
    The repository is left as it is: the tests write under it, and caching it did not
    help."""
    found: list[Path] = []
    for path in sorted(
        {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}, key=lambda p: len(p.parts)
    ):
        if path != Path("/") and path not in found and "," not in str(path):
            found.append(path)
    return found


def cached_exports(trees: Sequence[Path]) -> list[str]:
    """QEMU's 9p exports of ``trees`` (read-only), tagged ``labro0``, ``labro1``, ...
    for :func:`guest_script`'s mounts."""
    args: list[str] = []
    for i, path in enumerate(trees):
        fsdev = f"local,id=labro{i},path={path},security_model=none,readonly=on,multidevs=remap"
        args += ["-fsdev", fsdev, "-device", f"virtio-9p-pci,fsdev=labro{i},mount_tag=labro{i}"]
    return args


def cached_mounts(trees: Sequence[Path]) -> list[str]:
    """The guest's shell lines that mount :func:`cached_exports`' tags over ``trees``
    (read-only, :data:`CACHED_MOUNT_OPTIONS`); a mount that fails says so and leaves the
    uncached tree."""
    lines: list[str] = []
    for i, path in enumerate(trees):
        where = shlex.quote(str(path))
        lines.append(
            f"mount -t 9p -o {CACHED_MOUNT_OPTIONS} labro{i} {where}"
            f" || echo guest: {where} left uncached, its cached mount failed"
        )
    return lines


#: virtme-ng's option that boots on 9p only. Without it, virtme-ng first tries this
#: machine's virtiofsd for each export (qemu's C daemon, which it starts with options of
#: the Rust one: ~3 s of failed starts per export, then 9p anyway).
FORCE_9P = "--force-9p"


def guest_script(
    topology: LabTopology, command: Sequence[str], cwd: Path, cached: Sequence[Path] = ()
) -> str:
    """The shell script the guest runs: this process's AML_/OMPI_/PYTHON*/HYPOTHESIS*
    variables, PATH with this Python's bin first, ``AML_NUMA_LAB``, the cached read-only
    mounts of ``cached`` (:func:`cached_exports`' tags; a mount that fails says so and
    leaves the uncached tree), then the command in ``cwd``."""
    env = {k: v for k, v in os.environ.items() if k.startswith(PASSED_PREFIXES)}
    env.pop("PYTHONHOME", None)
    env[ENV] = topology.name
    env["PATH"] = f"{Path(sys.executable).parent}:{GUEST_PATH}"
    lines = [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines += cached_mounts(cached)
    lines.append(f"echo {shlex.quote(STARTED)} $(uname -r), guest uptime $(cut -d' ' -f1 /proc/uptime) s")
    lines.append(f"cd {shlex.quote(str(cwd))}")
    lines.append(shlex.join(command))
    return "; ".join(lines)


def _mapped_dirs(cwd: Path) -> list[Path]:
    """The directories mapped read-write into the guest: the working directory and this
    Python's environment (a tox venv may live outside it), each unless it is under another,
    so that a clone under /tmp (which the guest mounts afresh) is the host's."""
    dirs: list[Path] = []
    for path in sorted({cwd.resolve(), Path(sys.prefix).resolve()}, key=lambda p: len(p.parts)):
        if path != Path("/") and not any(path.is_relative_to(d) for d in dirs):
            dirs.append(path)
    return dirs


def vng_command(
    topology: LabTopology,
    command: Sequence[str],
    *,
    accel: str = "tcg",
    cwd: Path | None = None,
    verbose: bool = False,
    kernel: Path | None = None,
) -> list[str]:
    """The ``vng`` command line that boots ``topology`` (on ``kernel``, default
    :func:`kernel_for`'s) and runs ``command`` in it."""
    if kernel is None:
        kernel, _ = kernel_for(topology)
    vng = _vng()
    if kernel is None or vng is None:
        raise RuntimeError(missing() or "no kernel or vng")
    where = (cwd or Path.cwd()).resolve()
    args = [vng, "--run", str(kernel), "--cpus", str(topology.cpus), "--memory", f"{topology.memory_mib}M"]
    # FORCE_9P: virtio-fs would also need the nodes' memory shared
    args += ["--disable-microvm", "--disable-monitor", FORCE_9P, "--cwd", str(where)]
    if accel == "tcg":
        args.append("--disable-kvm")
    if verbose:
        args.append("--verbose")
    for path in _mapped_dirs(where):
        args.append(f"--rwdir={path}={path}")
    cached = cached_trees()
    # "=": the values start with "-" and would read as options
    args.append(f"--qemu-opts={shlex.join([*topology.qemu_args(), *cached_exports(cached)])}")
    args.append(f"--exec={guest_script(topology, command, where, cached)}")
    return args


def boot(
    topology: LabTopology,
    command: Sequence[str],
    *,
    accel: str = "tcg",
    timeout: float = 900,
    log: Path | None = None,
    verbose: bool = False,
    kernel: Path | None = None,
    boot_timeout: float = BOOT_LIMIT,
) -> int:
    """Boot ``topology``, run ``command`` in it and return its exit status (124 when it
    ran past ``timeout`` seconds; :data:`BOOT_HUNG` when the guest did not come up, that
    is print :data:`STARTED`, within ``boot_timeout``). Output goes to this process's
    stdout, and to ``log``."""
    note = None
    if kernel is None:
        kernel, note = kernel_for(topology)
    argv = vng_command(topology, command, accel=accel, verbose=verbose, kernel=kernel)
    return _run_guest(
        topology.name,
        argv,
        timeout=timeout,
        boot_timeout=boot_timeout,
        log=log,
        note=note,
        what=f"{topology.description}; {kernel}; {accel}",
    )


def _run_guest(
    name: str,
    argv: Sequence[str],
    *,
    timeout: float,
    boot_timeout: float,
    log: Path | None,
    note: str | None,
    what: str,
) -> int:
    """Run one guest's ``argv`` (vng) under the two watchdogs :func:`boot` describes."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    if note is not None:
        print(f"numa-lab: {name}: {note}", flush=True)
    print(f"numa-lab: booting {name} ({what})", flush=True)
    start = time.monotonic()
    up: float | None = None
    # its own session: a timeout ends vng, virtme-run and QEMU together
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    expired = threading.Event()
    came_up = threading.Event()
    hung = threading.Event()

    def _expire() -> None:
        expired.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    def _boot_expire() -> None:
        if not came_up.is_set():
            hung.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

    timer = threading.Timer(timeout, _expire)
    timer.start()
    boot_timer = threading.Timer(boot_timeout, _boot_expire)
    boot_timer.start()
    out = open(log, "w") if log is not None else None  # noqa: SIM115 - closed below
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            if up is None and line.startswith(STARTED):
                up = time.monotonic() - start
                came_up.set()
            sys.stdout.write(line)
            sys.stdout.flush()
            if out is not None:
                out.write(line)
        rc = proc.wait()
    finally:
        timer.cancel()
        boot_timer.cancel()
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if out is not None:
            out.close()
    if hung.is_set():
        print(f"numa-lab: {name}: did not come up within {boot_timeout:.0f} s (a hung boot)", flush=True)
        rc = BOOT_HUNG
    elif expired.is_set():
        print(f"numa-lab: {name}: killed after {timeout:.0f} s (--timeout)", flush=True)
        rc = 124
    total = time.monotonic() - start
    split = "" if up is None else f" (boot {up:.0f} s, command {total - up:.0f} s)"
    print(f"numa-lab: {name}: exit {rc} after {total:.0f} s{split}", flush=True)
    return rc


#: The repository's packages compiled on the host before a boot (:func:`precompile`).
COMPILED_DIRS = ("aml_core", "tests", "benchmarks")


def precompile(where: Path) -> None:
    """Compile the repository's Python to bytecode on the host, before booting: the guest's
    interpreters (pytest, each child, each MPI rank) then load it instead of compiling
    every module under emulation, each time where ``PYTHONDONTWRITEBYTECODE`` (tox's
    setenv) stops them writing it. Seconds here, and compileall skips what is current."""
    import compileall

    for sub in COMPILED_DIRS:
        if (where / sub).is_dir():
            compileall.compile_dir(where / sub, quiet=2)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.numa_lab",
        description=(
            "Boot emulated NUMA machines (virtme-ng + QEMU over this root filesystem, Debian's "
            "kernel) and run a command inside each, with AML_NUMA_LAB=<topology> set. Without a "
            "command: python -m pytest -p no:cacheprovider tests/numa. Exits with the first "
            "failing guest's status; 0 with the reason when no guest can boot here."
        ),
        epilog="topologies: "
        + "; ".join(f"{t.name}: {t.description}" for t in TOPOLOGIES.values())
        + ". Example: python -m tests.support.numa_lab --topology two-node -- pytest tests/numa -x",
    )
    parser.add_argument(
        "--topology",
        "-t",
        action="append",
        choices=sorted(TOPOLOGIES),
        help="a topology to boot (repeatable; default: every one)",
    )
    parser.add_argument(
        "--accel",
        choices=("tcg", "kvm"),
        default=os.environ.get("AML_NUMA_LAB_ACCEL", "tcg"),
        help="QEMU acceleration (default tcg, or $AML_NUMA_LAB_ACCEL; KVM guests hang at boot here)",
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds per guest (default 900)")
    parser.add_argument(
        "--boot-timeout",
        type=float,
        default=BOOT_LIMIT,
        help=f"seconds a guest may take to come up; a hung one boots again, once (default {BOOT_LIMIT:g})",
    )
    parser.add_argument(
        "--lock",
        type=Path,
        default=os.environ.get("AML_NUMA_LAB_LOCK") or None,
        help="hold an flock on this file while a guest runs (default $AML_NUMA_LAB_LOCK, none when unset)",
    )
    parser.add_argument(
        "--fetch-kernels",
        action="store_true",
        help="first download and unpack (dpkg -x, never installed) the Debian kernels the chosen topologies "
        "name and this machine lacks (root with apt; tox -e numa does)",
    )
    parser.add_argument(
        "--kernel",
        type=Path,
        help="boot every topology on this kernel image (default: each topology's, see --list)",
    )
    parser.add_argument("--log-dir", type=Path, help="write each guest's output to <dir>/<topology>.log")
    parser.add_argument("--verbose", "-v", action="store_true", help="show the guest kernel's console")
    parser.add_argument("--list", action="store_true", help="print the topologies and exit")
    parser.add_argument("--dry-run", action="store_true", help="print the vng command lines and exit")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run in the guest")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.list:
        for t in TOPOLOGIES.values():
            print(f"{t.name}: {t.description}")
            image, note = kernel_for(t)
            series = f"Linux {t.kernel} ({t.kernel_reason})" if t.kernel else "the Debian kernel in /boot"
            print(f"    kernel: {series}: {image}" + (f"; {note}" if note else ""))
            print(f"    qemu: {shlex.join(t.qemu_args())}")
        return 0
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/numa"]
    names = args.topology or list(TOPOLOGIES)
    why = missing()
    if why is not None:
        print(f"numa-lab: SKIPPED, no guest can boot here: {why}")
        return 0
    if args.dry_run:
        for name in names:
            topology = TOPOLOGIES[name]
            argv = vng_command(topology, command, accel=args.accel, verbose=args.verbose, kernel=args.kernel)
            print(shlex.join(argv))
        return 0
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    if args.fetch_kernels and args.kernel is None:
        for series in sorted({t.kernel for n in names if (t := TOPOLOGIES[n]).kernel is not None}):
            if find_kernel(series) is None:
                fetch_kernel(series)
    precompile(Path.cwd())
    results: dict[str, int] = {}
    for name in names:
        log = args.log_dir / f"{name}.log" if args.log_dir is not None else None
        lock = open(args.lock, "a") if args.lock is not None else None  # noqa: SIM115
        try:
            if lock is not None:
                fcntl.flock(lock, fcntl.LOCK_EX)
            for attempt in (1, 2):
                results[name] = boot(
                    TOPOLOGIES[name],
                    command,
                    accel=args.accel,
                    timeout=args.timeout,
                    log=log,
                    verbose=args.verbose,
                    kernel=args.kernel,
                    boot_timeout=args.boot_timeout,
                )
                if results[name] != BOOT_HUNG or attempt == 2:
                    break
                print(f"numa-lab: {name}: booting it once more", flush=True)
        finally:
            if lock is not None:
                lock.close()
    summary = ", ".join(f"{n} {'ok' if rc == 0 else f'FAILED ({rc})'}" for n, rc in results.items())
    print(f"numa-lab: {summary}")
    return next((rc for rc in results.values() if rc), 0)


if __name__ == "__main__":
    sys.exit(main())
