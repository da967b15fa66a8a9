"""NUMA policies and page placement on Linux (mbind, get_mempolicy, move_pages).

The system calls are made by the small C module ``aml_core._os`` with the C library's
syscall numbers, so no architecture table and no libnuma are needed. Nodes outside the
set this process may use (``Mems_allowed``) are EDOM, as in AML.

Moving memory: :func:`move_pages` moves the pages a range has now to other nodes
(move_pages(2)) and reports what moved as a :class:`MoveReport`. Weighted interleave
(``Policy.WEIGHTED_INTERLEAVE``, Linux 6.9+) interleaves by the system's per-node
weights (:func:`interleave_weights`); a kernel without it is AMLNotSupported.
docs/numa.md is the user's guide to all of it.
"""

from __future__ import annotations

import enum
import errno
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Literal, overload

import attrs

from .. import _os, checks
from ..errors import (
    AMLDomainError,
    AMLMemoryError,
    AMLNotSupported,
    AMLTypeError,
    AMLValueError,
    ErrorCode,
    ErrorTable,
)
from ..topology import _id_list
from ..topology import _int as _sysfs_int
from ..topology import _read as _read_sysfs

__all__ = [
    "NOT_TOUCHED",
    "OS_ERRORS",
    "MoveReport",
    "Policy",
    "allowed_nodes",
    "as_nodes",
    "bind",
    "check_supported",
    "interleave_weights",
    "move_pages",
    "node_memory",
    "online_nodes",
    "page_nodes",
    "policy_of",
    "set_interleave_weights",
    "weighted_interleave_supported",
]


class Policy(enum.IntEnum):
    """NUMA memory policies (``MPOL_*`` values)."""

    DEFAULT = 0
    PREFERRED = 1
    BIND = 2
    INTERLEAVE = 3
    #: MPOL_WEIGHTED_INTERLEAVE (6; Linux 6.9+): interleave by the per-node weights of
    #: /sys/kernel/mm/mempolicy/weighted_interleave/ (:func:`interleave_weights`).
    WEIGHTED_INTERLEAVE = 6

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


#: MPOL_MF_STRICT: mbind fails with EIO when pages already there do not follow the policy
#: (with MPOL_MF_MOVE: when some could not be moved).
MPOL_MF_STRICT = 1
#: MPOL_MF_MOVE: move pages already there to follow the policy (AML's mbind flag; also
#: move_pages(2)'s flag: move the pages only this process maps).
MPOL_MF_MOVE = 2
#: Where the kernel keeps weighted interleave's per-node weights (Linux 6.9+).
WEIGHTED_INTERLEAVE_ROOT = "/sys/kernel/mm/mempolicy/weighted_interleave"
#: Where the node readers (online_nodes, node_memory, free_huge_pages) read sysfs.
NODE_ROOT = "/sys/devices/system/node"

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
    """A sysfs id list (``"0-3,8-11"``) as sorted ids, as aml_core.topology reads one: a
    missing or unreadable file, or one that is not such a list (Unicode digits such as
    ``"\u00b2"``, an id past 65535), is ``[]``, never an error."""
    return list(_id_list(_read_sysfs(path)) or ())


def online_nodes() -> list[int]:
    """The online NUMA nodes (``/sys/devices/system/node/online``)."""
    return _read_list(f"{NODE_ROOT}/online") or [0]


def node_memory(node: int) -> int:
    """Total memory of a node in bytes (0 if unknown)."""
    for line in (_read_sysfs(f"{NODE_ROOT}/node{node}/meminfo") or "").splitlines():
        if "MemTotal:" in line:
            kib = _sysfs_int(line.split()[-2])
            if kib is not None:
                return kib * 1024
    if node == 0:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return 0


def free_huge_pages(node: int, size: int) -> int:
    """Free huge pages of ``size`` bytes on a node (its ``free_hugepages``; 0 if unknown)."""
    path = f"{NODE_ROOT}/node{node}/hugepages/hugepages-{size >> 10}kB/free_hugepages"
    return _sysfs_int(_read_sysfs(path)) or 0


def check_huge_pages(nodes: tuple[int, ...], count: int, size: int) -> None:
    """ENOMEM unless ``nodes`` have ``count`` free huge pages of ``size`` bytes together.

    A hugetlb mapping bound (BIND) to nodes without them maps, since the kernel reserves
    huge pages for the whole machine, but its first touch is SIGBUS (no page on the set,
    and BIND never takes another node's): checked before the mapping is made."""
    free = sum(free_huge_pages(node, size) for node in nodes)
    if free < count:
        raise AMLMemoryError(
            f"BIND to nodes {list(nodes)} needs {count} huge pages of {size >> 10} KiB and they have "
            f"{free} free (reserve them per node: /sys/devices/system/node/node<N>/hugepages/"
            f"hugepages-{size >> 10}kB/nr_hugepages)"
        )


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


def weighted_interleave_supported() -> bool:
    """Whether this kernel has ``MPOL_WEIGHTED_INTERLEAVE`` (Linux 6.9+: it publishes
    the weights under :data:`WEIGHTED_INTERLEAVE_ROOT`)."""
    return os.path.isdir(WEIGHTED_INTERLEAVE_ROOT)


def check_supported(policy: Policy) -> None:
    """AMLNotSupported for a policy this kernel does not have (WEIGHTED_INTERLEAVE before
    Linux 6.9), before any mapping is made."""
    if policy is Policy.WEIGHTED_INTERLEAVE and not weighted_interleave_supported():
        raise AMLNotSupported(
            "weighted interleave (MPOL_WEIGHTED_INTERLEAVE) needs Linux 6.9 or later; this "
            f"kernel ({os.uname().release}) has no {WEIGHTED_INTERLEAVE_ROOT}"
        )


def interleave_weights() -> dict[int, int]:
    """Weighted interleave's weight of each node, ``{node: weight}`` (the kernel's
    ``weighted_interleave/nodeN`` files; 1 to 255). AMLNotSupported on a kernel without
    weighted interleave."""
    check_supported(Policy.WEIGHTED_INTERLEAVE)
    out: dict[int, int] = {}
    try:
        names = os.listdir(WEIGHTED_INTERLEAVE_ROOT)
    except OSError as exc:
        raise os_error(OSError(exc.errno, exc.strerror, "listdir")) from None
    for name in names:
        node = _sysfs_int(name[4:]) if name.startswith("node") else None
        weight = _sysfs_int(_read_sysfs(f"{WEIGHTED_INTERLEAVE_ROOT}/{name}")) if node is not None else None
        if node is not None and weight is not None and name == f"node{node}":
            out[node] = weight
    return dict(sorted(out.items()))


def set_interleave_weights(weights: Mapping[int, int]) -> None:
    """Set weighted interleave's weights, ``{node: weight}`` with weights 1 to 255: a
    system-wide setting (root only; the kernel's files are mode 0644), used by every
    weighted-interleave mapping's future pages. Nodes are checked against the allowed set
    (EDOM), weights against 1..255 (EINVAL), all before the first write. AMLNotSupported
    on a kernel without weighted interleave; AMLPermissionError without the right to
    write the files."""
    if not isinstance(weights, Mapping):
        raise AMLTypeError(f"weights must be a mapping {{node: weight}}, not {type(weights).__name__}")
    check_supported(Policy.WEIGHTED_INTERLEAVE)
    checked: list[tuple[int, int]] = []
    for node_obj, weight_obj in weights.items():
        (node,) = as_nodes(checks.integer(node_obj, "a NUMA node"))
        weight = checks.integer(weight_obj, "an interleave weight")
        if not 1 <= weight <= 255:
            raise AMLValueError(f"interleave weights are 1 to 255, got {weight} for node {node}")
        checked.append((node, weight))
    for node, weight in checked:
        path = f"{WEIGHTED_INTERLEAVE_ROOT}/node{node}"
        try:
            with open(path, "w") as f:
                f.write(f"{weight}\n")
        except OSError as exc:
            raise os_error(OSError(exc.errno, exc.strerror, "write"), f"cannot write {path}") from None


def bind(address: int, length: int, policy: Policy, nodes: tuple[int, ...], *, move: bool = True) -> None:
    """Apply a policy to a page-aligned range (``mbind``). ``move`` (the default, AML's
    flag): MPOL_MF_MOVE, so pages the range has already follow the policy too; under BIND
    also MPOL_MF_STRICT, so a page that cannot be moved onto the set (a full node) is an
    error (AMLMemoryError) instead of a silent spill. ``move=False`` for a range with no
    pages yet (a fresh mapping): the move would only cost time (its LRU drain on every
    CPU: 105 µs against 11.7 µs for an unbound mmap+munmap of 1 MiB)."""
    check_supported(policy)
    flags = 0
    if move and nodes:
        flags = MPOL_MF_MOVE | (MPOL_MF_STRICT if policy is Policy.BIND else 0)
    try:
        _os.mbind(address, length, int(policy), list(nodes), flags)
    except OSError as exc:
        if exc.errno == errno.EIO and flags & MPOL_MF_STRICT:
            raise OS_ERRORS.error(
                "mbind",
                errno.ENOMEM,
                f"mbind(BIND, nodes={list(nodes)}): pages of the range could not be moved onto "
                "those nodes (full?); BIND does not spill",
            ) from None
        if exc.errno == errno.EINVAL and policy is Policy.WEIGHTED_INTERLEAVE:
            raise AMLNotSupported(f"this kernel refused MPOL_WEIGHTED_INTERLEAVE: {exc.strerror}") from None
        raise os_error(exc, f"mbind({policy.name}, nodes={list(nodes)}) failed") from None


#: The kernel's policies that :class:`Policy` has no member for (aml never sets them;
#: another library may): MPOL_LOCAL and MPOL_PREFERRED_MANY (docs/native-abi.md).
_UNNAMED_POLICIES = {4: "MPOL_LOCAL", 5: "MPOL_PREFERRED_MANY"}


def policy_of(address: int) -> tuple[Policy, tuple[int, ...]]:
    """The policy and node set of the page at ``address`` (``get_mempolicy``). A policy
    that :class:`Policy` does not name (MPOL_LOCAL or MPOL_PREFERRED_MANY, set by another
    library, or a mode of a newer kernel) is AMLNotSupported, which names it and its
    nodes."""
    try:
        mode, nodes = _os.get_mempolicy(address)
    except OSError as exc:
        raise os_error(exc) from None
    # The kernel may report mode flags (MPOL_F_STATIC_NODES...) in the high bits.
    try:
        policy = Policy(mode & 0xFF)
    except ValueError:
        name = _UNNAMED_POLICIES.get(mode & 0xFF, "a mode this version of aml does not know")
        raise AMLNotSupported(
            f"the page at 0x{address:x} has the NUMA policy {name} ({mode & 0xFF}, nodes "
            f"{list(nodes)}), set outside aml: aml's Policy has no name for it"
        ) from None
    return policy, tuple(nodes)


#: What :func:`page_nodes` says of a page not yet touched (no physical page behind it):
#: ``-ENOENT``, as move_pages(2) reports it. Other negative values are other errnos.
NOT_TOUCHED = -errno.ENOENT
#: What Linux 6.1 says of an untouched anonymous page with no page table yet (``-EFAULT``:
#: follow_page's FOLL_DUMP answer; newer kernels say -ENOENT): reported as NOT_TOUCHED.
_NO_PAGE_TABLE = -errno.EFAULT
#: Pages per move_pages query (aml_core._os refuses more than 2**24 at once).
_PAGE_QUERY = 1 << 20


@overload
def page_nodes(address: int, length: int, *, summary: Literal[False] = False) -> list[int]: ...
@overload
def page_nodes(address: int, length: int, *, summary: Literal[True]) -> dict[int, int]: ...
def page_nodes(address: int, length: int, *, summary: bool = False) -> list[int] | dict[int, int]:
    """The node of each page of a range (:data:`NOT_TOUCHED` for pages not yet touched,
    also where Linux 6.1 answers -EFAULT for them, another negative errno for a page
    move_pages cannot read). With ``summary=True``,
    the number of pages per node instead, as numastat counts them: ``{node: pages}``,
    nodes in ascending order (negative keys first: untouched or unreadable pages).
    Where automatic NUMA balancing is on, Linux 6.1 answers a resident page its scanner
    has just made PROT_NONE as untouched too, until it is next accessed (docs/numa.md,
    "page_nodes and automatic NUMA balancing")."""
    # move_pages answers at most _PAGE_QUERY pages at once (E2BIG past it): query in chunks.
    # A summary counts each chunk as it comes, so a 128 GiB range (2**25 pages) never holds
    # one Python int per page.
    step = _PAGE_QUERY * _os.PAGE_SIZE
    nodes: list[int] = []
    counts: Counter[int] = Counter()
    try:
        for start in range(0, length, step):
            chunk = _os.page_nodes(address + start, min(step, length - start))
            if _NO_PAGE_TABLE in chunk:
                chunk = [NOT_TOUCHED if s == _NO_PAGE_TABLE else s for s in chunk]
            if summary:
                counts.update(chunk)
            else:
                nodes.extend(chunk)
    except OSError as exc:
        raise os_error(exc) from None
    if not summary:
        return nodes
    return dict(sorted(counts.items()))


#: move_pages' per-page status past every errno: a value the kernel should never write.
_STATUS_OTHER = -4096
#: How many times a move retries the pages the kernel answered -EBUSY and a query then
#: finds off their target (transient: a page under I/O, locked or in a per-CPU list).
#: Most -EBUSY answers are not that: move_pages(2) queues a transparent huge page at its
#: first subpage and answers the next one -EBUSY (the call itself has isolated the huge
#: page), then moves the whole huge page, so a query finds that page on its target
#: (one per huge page: 31 of 16,384 pages of a 64 MiB buffer in the lab; no retry needed).
MOVE_RETRIES = 3


def _node_counts(mapping: Mapping[int, int]) -> dict[int, int]:
    return dict(sorted(mapping.items()))


def _error_counts(mapping: Mapping[str, int]) -> dict[str, int]:
    return dict(sorted(mapping.items()))


@attrs.frozen
class MoveReport:
    """What a move did (:func:`move_pages`, ``HostArea.move``), page by page.

    ``pages``: the pages of the range; ``moved``: those now on a target node (moved, or
    there already); ``untouched``: those with no page of their own yet (never written:
    not touched, or only read, which maps the kernel's shared zero page), so nothing to
    move: the range's policy places them when first written; ``failed``: those
    left where they were, by errno name in ``errors`` (``EBUSY``: still in use after
    :data:`MOVE_RETRIES` retries, ``ENOMEM``: the
    target node is full, ``EACCES``: mapped by another process too, ``not moved``: left
    on a node outside the targets...);
    ``nodes``: ``{node: pages}`` where the moved pages are now. ``pages == moved +
    untouched + failed``."""

    pages: int
    moved: int
    untouched: int
    failed: int
    nodes: Mapping[int, int] = attrs.field(converter=_node_counts)
    errors: Mapping[str, int] = attrs.field(converter=_error_counts)

    @property
    def complete(self) -> bool:
        """True when no page failed to move."""
        return self.failed == 0


def move_pages(address: int, length: int, nodes: Iterable[int] | int) -> MoveReport:
    """Move the pages a page-aligned range has now to ``nodes`` (move_pages(2) with
    MPOL_MF_MOVE): all to the node for one node, page i to ``nodes[i % len(nodes)]`` for
    several (interleaved). The address and contents stay as they are, so NumPy arrays and
    memoryviews over the range keep working. The range's policy is not changed (``mbind``
    does that: pages touched later are placed by it). Nodes outside the allowed set are
    EDOM, an empty set EINVAL, both before the call. One move_pages(2) call moves the
    range; the pages it answers EBUSY (or leaves unanswered) are then looked up with one
    query, which moves nothing: those on their target moved (the subpages of a
    transparent huge page after its first are answered EBUSY and move with it), the others
    are moved again, :data:`MOVE_RETRIES` times at most."""
    targets = as_nodes(nodes)
    if not targets:
        raise AMLValueError("move_pages needs at least one target node")
    step = _PAGE_QUERY * _os.PAGE_SIZE
    counts: Counter[int] = Counter()
    try:
        for start in range(0, length, step):
            _, chunk = _os.move_pages(
                address + start, min(step, length - start), list(targets), MPOL_MF_MOVE, MOVE_RETRIES
            )
            counts.update(chunk)
    except OSError as exc:
        raise os_error(exc, f"move_pages(nodes={list(targets)}) failed") from None
    pages = sum(counts.values())
    placed = {n: c for n, c in counts.items() if n >= 0}
    # -ENOENT: no page; -EFAULT: only read so far, the kernel's shared zero page, or on
    # Linux 6.1 no page table yet (the range is mapped: the callers check it is a live
    # buffer). Neither has a page to move.
    untouched = counts.get(NOT_TOUCHED, 0) + counts.get(-errno.EFAULT, 0)
    errors: dict[str, int] = {}
    for status, count in counts.items():
        if status < 0 and status not in (NOT_TOUCHED, -errno.EFAULT):
            name = "unknown" if status == _STATUS_OTHER else errno.errorcode.get(-status, f"errno {-status}")
            errors[name] = errors.get(name, 0) + count
    # A page the kernel left on a node outside the targets (it could not move it and
    # said so with its node) counts as failed too.
    stray = {n: c for n, c in placed.items() if n not in targets}
    for n, c in stray.items():
        errors["not moved"] = errors.get("not moved", 0) + c
        del placed[n]
    moved = sum(placed.values())
    return MoveReport(
        pages=pages,
        moved=moved,
        untouched=untouched,
        failed=pages - moved - untouched,
        nodes=placed,
        errors=errors,
    )
