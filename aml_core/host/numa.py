"""NUMA policies and page placement on Linux (mbind, get_mempolicy, move_pages).

The system calls are made by the small C module ``aml_core._os`` with the C library's
syscall numbers, so no architecture table and no libnuma are needed. Nodes outside the
set this process may use (``Mems_allowed``) are EDOM, as in AML.
"""

from __future__ import annotations

import enum
import errno
import os
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache
from typing import Literal, overload

from .. import _os, checks
from ..errors import AMLDomainError, AMLTypeError, AMLValueError, ErrorCode, ErrorTable

__all__ = [
    "NOT_TOUCHED",
    "OS_ERRORS",
    "Policy",
    "allowed_nodes",
    "as_nodes",
    "bind",
    "node_memory",
    "online_nodes",
    "page_nodes",
    "policy_of",
]


class Policy(enum.IntEnum):
    """NUMA memory policies (``MPOL_*`` values)."""

    DEFAULT = 0
    PREFERRED = 1
    BIND = 2
    INTERLEAVE = 3

    @classmethod
    def parse(cls, value: Policy | str | int) -> Policy:
        if isinstance(value, Policy):
            return value
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                pass
        elif isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                pass
        else:
            raise AMLTypeError(f"policy must be a Policy, a name or an int, not {type(value).__name__}")
        allowed = ", ".join(p.name.lower() for p in cls)
        raise AMLValueError(f"unknown NUMA policy {value!r}; allowed: {allowed}")


#: MPOL_MF_MOVE: move pages already there to follow the policy (AML's mbind flag).
MPOL_MF_MOVE = 2

#: errno → AML code for the host backend's system calls.
OS_ERRORS = ErrorTable(
    backend="host",
    mapping={
        errno.ENOMEM: ErrorCode.ENOMEM,
        errno.EINVAL: ErrorCode.EINVAL,
        errno.EBADF: ErrorCode.EINVAL,
        errno.EOVERFLOW: ErrorCode.EDOM,
        errno.EFAULT: ErrorCode.EINVAL,
        errno.EPERM: ErrorCode.EPERM,
        errno.EACCES: ErrorCode.EPERM,
        errno.EBUSY: ErrorCode.EBUSY,
        # mmap: MAP_LOCKED past RLIMIT_MEMLOCK (or locked memory exhausted). AML: ENOMEM.
        errno.EAGAIN: ErrorCode.ENOMEM,
        errno.ENODEV: ErrorCode.ENOTSUP,
        errno.ENOSYS: ErrorCode.ENOTSUP,
        errno.EOPNOTSUPP: ErrorCode.ENOTSUP,
        errno.EXDEV: ErrorCode.EDOM,
    },
    name=lambda code: errno.errorcode.get(code, f"errno {code}"),
)


def os_error(exc: OSError, message: str | None = None) -> Exception:
    """The AML exception for an OSError raised by ``aml_core._os``."""
    function = exc.filename if isinstance(exc.filename, str) else "syscall"
    return OS_ERRORS.error(function, exc.errno or 0, message)


@lru_cache(maxsize=1)
def allowed_nodes() -> frozenset[int]:
    """The NUMA nodes this process may allocate on (``Mems_allowed``)."""
    try:
        return frozenset(_os.mems_allowed())
    except OSError:
        return frozenset({0})


def _read_list(path: str) -> list[int]:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return []
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def online_nodes() -> list[int]:
    """The online NUMA nodes (``/sys/devices/system/node/online``)."""
    return _read_list("/sys/devices/system/node/online") or [0]


def node_memory(node: int) -> int:
    """Total memory of a node in bytes (0 if unknown)."""
    path = f"/sys/devices/system/node/node{node}/meminfo"
    try:
        with open(path) as f:
            for line in f:
                if "MemTotal:" in line:
                    return int(line.split()[-2]) * 1024
    except (OSError, ValueError):
        pass
    if node == 0:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return 0


def as_nodes(nodes: Iterable[int] | int | None) -> tuple[int, ...]:
    """Validate a node set: ints, each in the allowed set (else EDOM)."""
    if nodes is None:
        return ()
    if isinstance(nodes, bool):
        raise AMLTypeError("nodes must be node numbers, not bool")
    if isinstance(nodes, (str, bytes)):
        raise AMLTypeError(f"nodes must be node numbers, not {type(nodes).__name__}")
    if hasattr(type(nodes), "__index__"):  # one node (an int, a NumPy integer)
        items: list[object] = [nodes]
    else:
        try:
            items = list(nodes)  # type: ignore[arg-type]
        except Exception as exc:
            raise AMLTypeError(
                f"nodes must be an int or an iterable of ints, not {type(nodes).__name__}"
            ) from exc
    out: set[int] = set()
    allowed = allowed_nodes()
    for item in items:
        node = checks.integer(item, "a NUMA node")
        if node not in allowed:
            raise AMLDomainError(
                f"NUMA node {node} is outside the nodes this process may use ({sorted(allowed)})"
            )
        out.add(node)
    return tuple(sorted(out))


def bind(address: int, length: int, policy: Policy, nodes: tuple[int, ...]) -> None:
    """Apply a policy to a page-aligned range (``mbind`` with MPOL_MF_MOVE)."""
    try:
        _os.mbind(address, length, int(policy), list(nodes), MPOL_MF_MOVE if nodes else 0)
    except OSError as exc:
        raise os_error(exc, f"mbind({policy.name}, nodes={list(nodes)}) failed") from None


def policy_of(address: int) -> tuple[Policy, tuple[int, ...]]:
    """The policy and node set of the page at ``address`` (``get_mempolicy``)."""
    try:
        mode, nodes = _os.get_mempolicy(address)
    except OSError as exc:
        raise os_error(exc) from None
    # The kernel may report mode flags (MPOL_F_STATIC_NODES...) in the high bits.
    return Policy(mode & 0xFF), tuple(nodes)


#: What :func:`page_nodes` says of a page not yet touched (no physical page behind it):
#: ``-ENOENT``, as move_pages(2) reports it. Other negative values are other errnos.
NOT_TOUCHED = -errno.ENOENT
#: Pages per move_pages query (aml_core._os refuses more than 2**24 at once).
_PAGE_QUERY = 1 << 20


@overload
def page_nodes(address: int, length: int, *, summary: Literal[False] = False) -> list[int]: ...
@overload
def page_nodes(address: int, length: int, *, summary: Literal[True]) -> dict[int, int]: ...
def page_nodes(address: int, length: int, *, summary: bool = False) -> list[int] | dict[int, int]:
    """The node of each page of a range (:data:`NOT_TOUCHED` for pages not yet touched,
    another negative errno for a page move_pages cannot read). With ``summary=True``,
    the number of pages per node instead, as numastat counts them: ``{node: pages}``,
    nodes in ascending order (negative keys first: untouched or unreadable pages)."""
    # move_pages answers at most _PAGE_QUERY pages at once (E2BIG past it): query in chunks.
    # A summary counts each chunk as it comes, so a 128 GiB range (2**25 pages) never holds
    # one Python int per page.
    step = _PAGE_QUERY * _os.PAGE_SIZE
    nodes: list[int] = []
    counts: Counter[int] = Counter()
    try:
        for start in range(0, length, step):
            chunk = _os.page_nodes(address + start, min(step, length - start))
            if summary:
                counts.update(chunk)
            else:
                nodes.extend(chunk)
    except OSError as exc:
        raise os_error(exc) from None
    if not summary:
        return nodes
    return dict(sorted(counts.items()))
