"""The built-in host backend: Linux mmap with NUMA policies, huge pages, alignment and
file mappings; moving pages between nodes and running a thread on a node (docs/numa.md)."""

from .affinity import current_node, node_cpus, nodes_with_cpus, run_on_node
from .area import HostArea, HostMmapOptions, HostMmapOptionsDict
from .numa import (
    NOT_TOUCHED,
    MoveReport,
    Policy,
    allowed_nodes,
    interleave_weights,
    move_pages,
    online_nodes,
    page_nodes,
    policy_of,
    set_interleave_weights,
    weighted_interleave_supported,
)

__all__ = [
    "HostArea",
    "HostMmapOptions",
    "HostMmapOptionsDict",
    "MoveReport",
    "NOT_TOUCHED",
    "Policy",
    "allowed_nodes",
    "current_node",
    "interleave_weights",
    "move_pages",
    "node_cpus",
    "nodes_with_cpus",
    "online_nodes",
    "page_nodes",
    "policy_of",
    "run_on_node",
    "set_interleave_weights",
    "weighted_interleave_supported",
]
