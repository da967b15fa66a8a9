"""The built-in host backend: Linux mmap with NUMA policies, huge pages, alignment and
file mappings."""

from .area import HostArea, HostMmapOptions, HostMmapOptionsDict
from .numa import NOT_TOUCHED, Policy, allowed_nodes, online_nodes, page_nodes, policy_of

__all__ = [
    "HostArea",
    "HostMmapOptions",
    "HostMmapOptionsDict",
    "NOT_TOUCHED",
    "Policy",
    "allowed_nodes",
    "online_nodes",
    "page_nodes",
    "policy_of",
]
