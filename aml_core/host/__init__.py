"""The built-in host backend: Linux mmap with NUMA policies, huge pages, alignment and
file mappings."""

from .area import HostArea, HostMmapOptions
from .numa import NOT_TOUCHED, Policy, allowed_nodes, online_nodes, page_nodes, policy_of

__all__ = [
    "HostArea",
    "HostMmapOptions",
    "NOT_TOUCHED",
    "Policy",
    "allowed_nodes",
    "online_nodes",
    "page_nodes",
    "policy_of",
]
