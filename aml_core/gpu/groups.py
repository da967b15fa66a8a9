"""The capability groups' names and what each brings: the one place where groups become
capabilities. Kept apart from :mod:`aml_core.gpu.runtime` (the groups' operations) so
that plugin modules, imported by every ``aml_core.backends()`` call, derive what they
declare without loading the operations."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

from ..specs import Capability

__all__ = ["Group", "capabilities"]


class Group(enum.Enum):
    """A capability group: a set of native operations provided wholly or not at all."""

    ALLOCATION = "allocation"
    MANAGED = "managed"
    STREAMS = "streams"
    IPC = "ipc"
    VIRTUAL_MEMORY = "virtual_memory"
    STREAM_ORDERED = "stream_ordered"
    PEER = "peer"


_GROUP_CAPABILITIES: Mapping[Group, Capability] = {
    Group.ALLOCATION: Capability.PINNED | Capability.MAPPED | Capability.BUFFER_PROTOCOL,
    Group.MANAGED: Capability.MANAGED,
    Group.STREAMS: Capability.NONE,
    Group.IPC: Capability.IPC,
    Group.VIRTUAL_MEMORY: Capability.VIRTUAL_MEMORY,
    Group.STREAM_ORDERED: Capability.NONE,
    Group.PEER: Capability.NONE,
}


def capabilities(groups: Iterable[Group], interfaces: Capability) -> Capability:
    """What a backend providing ``groups`` reports, with the exchange ``interfaces`` its
    device memory speaks (DLPack, CUDA Array Interface). The one place where groups
    become capabilities."""
    caps = interfaces
    for group in groups:
        caps |= _GROUP_CAPABILITIES[group]
    return caps
