"""Running the calling thread on a NUMA node's CPUs, so that "local" memory is that node's.

``with run_on_node(1): ...`` pins the calling thread to node 1's CPUs (the ones this
process may run on, ``sched_setaffinity``) and gives the thread its previous CPU set back
when the block ends, also when it raises. Inside, DEFAULT-policy memory the thread first
touches is placed on node 1 (Linux allocates on the node of the running CPU), and a
memspace "relative to the calling thread's node" means node 1.

Only the calling thread moves: the other threads of the process keep their CPUs. Blocks
nest (each restores what it found). Errors, all before the thread is moved: a node that
is not online, or whose CPUs are all outside this process's CPU set, is
:class:`~aml_core.errors.AMLDomainError`; a CPU-less node (memory only: HBM- or CXL-like
memory) is :class:`~aml_core.errors.AMLValueError`, with the nodes that have CPUs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from .. import checks
from ..errors import AMLDomainError, AMLValueError
from . import numa

__all__ = ["current_cpu", "current_node", "node_cpus", "nodes_with_cpus", "run_on_node"]

NODE_ROOT = "/sys/devices/system/node"


def node_cpus(node: int) -> frozenset[int]:
    """The CPUs of a NUMA node (its sysfs ``cpulist``; empty for a CPU-less node)."""
    return frozenset(numa._read_list(f"{NODE_ROOT}/node{node}/cpulist"))


def nodes_with_cpus() -> list[int]:
    """The online nodes that have CPUs (sysfs ``has_cpu``; every online node when sysfs
    does not say)."""
    listed = numa._read_list(f"{NODE_ROOT}/has_cpu")
    online = numa.online_nodes()
    return [n for n in online if n in listed] if listed else online


def current_cpu() -> int:
    """The CPU the calling thread ran on last (``/proc/thread-self/stat``, field 39)."""
    with open("/proc/thread-self/stat") as f:
        text = f.read()
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    return int(text[text.rindex(")") + 2 :].split()[36])


def current_node() -> int:
    """The NUMA node of the CPU the calling thread ran on last (0 when sysfs has no
    node directories)."""
    cpu = current_cpu()
    with contextlib.suppress(OSError):
        for name in os.listdir(f"/sys/devices/system/cpu/cpu{cpu}"):
            if name.startswith("node") and name[4:].isdigit():
                return int(name[4:])
    return 0


def _target_cpus(node_obj: object) -> frozenset[int]:
    node = checks.integer(node_obj, "a NUMA node")
    online = numa.online_nodes()
    if node not in online:
        raise AMLDomainError(f"NUMA node {node} is not online (online nodes: {online})")
    cpus = node_cpus(node)
    if not cpus:
        raise AMLValueError(
            f"NUMA node {node} has no CPUs (memory only); a thread can run on the nodes with "
            f"CPUs: {nodes_with_cpus()}"
        )
    return cpus


@contextlib.contextmanager
def run_on_node(node: int) -> Iterator[frozenset[int]]:
    """Run the calling thread on ``node``'s CPUs inside the block, and restore its CPU set
    afterwards; yields the CPUs it may run on there. See the module's doc for the errors."""
    cpus = _target_cpus(node)
    saved = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as exc:
        # EINVAL: none of the node's CPUs is in this process's cpuset.
        raise AMLDomainError(
            f"cannot run on NUMA node {node}'s CPUs {sorted(cpus)}: {exc.strerror} (outside this "
            "process's CPU set?)"
        ) from None
    try:
        yield frozenset(os.sched_getaffinity(0))
    finally:
        os.sched_setaffinity(0, saved)
