"""Tests that fail when the code is wrong (issue 32, item 8): each closes a hole a test
audit found by breaking the code on purpose.

* the NUMA policy is read back at the first, a middle and the last page of a buffer (an
  ``mbind`` of the first page alone passed the tests, which read ``buf.ptr`` only);
* the host errno → AML table, literally, every entry (only EAGAIN was tested: EACCES
  mapped to EINVAL passed);
* every tampered field of a host IPC handle through the real ``aml_core.ipc_open`` (the
  core tests altered valid-typed contents and called ``revalidate()`` directly: an
  importer that skipped the revalidation passed).
"""

from __future__ import annotations

import contextlib
import copy
import errno
import mmap
import os
from typing import Any

import pytest

import aml_core
from aml_core.errors import ErrorCode
from aml_core.host import HostArea, Policy, allowed_nodes, numa
from aml_core.ipc import IpcHandle

PAGE = mmap.PAGESIZE
NODES = sorted(allowed_nodes())


@pytest.mark.parametrize(
    ("policy", "nodes"),
    [
        (Policy.BIND, NODES[:1]),
        (Policy.PREFERRED, NODES[:1]),
        (Policy.INTERLEAVE, NODES),
        (Policy.BIND, NODES),
    ],
)
@pytest.mark.parametrize("pages", [3, 17, 512])
@pytest.mark.parametrize(
    "populate",
    [False, True],
    ids=["fresh", "populated"],  # a fresh mapping's mbind, and a populated one's (with its move)
)
def test_the_policy_holds_at_the_first_a_middle_and_the_last_page(
    policy: Policy, nodes: list[int], pages: int, populate: bool
) -> None:
    with HostArea(policy, nodes) as area:
        buf = area.mmap(pages * PAGE, {"flags": mmap.MAP_POPULATE} if populate else None)
        for page in (0, pages // 2, pages - 1):
            mode, got = numa.policy_of(buf.ptr + page * PAGE)
            assert (mode, list(got)) == (policy, nodes), f"page {page} of {pages}"
        area.munmap(buf)


def test_a_pooled_buffer_of_a_bound_area_holds_the_policy_over_its_slab() -> None:
    with HostArea(Policy.BIND, NODES[:1]) as area, aml_core.pool(area) as pool:
        buf = pool.mmap(3 << 20)  # a slab of its own, several huge-page sizes long
        for offset in (0, buf.size // 2, buf.size - 1):
            assert numa.policy_of(buf.ptr + offset) == (Policy.BIND, tuple(NODES[:1])), offset
        pool.munmap(buf)


#: The host backend's errno → AML table, written out by hand from docs/reliability.md
#: and docs/backend-authoring.md (not read from aml_core.host.numa.OS_ERRORS).
HOST_ERRNO = {
    errno.ENOMEM: ErrorCode.ENOMEM,
    errno.EINVAL: ErrorCode.EINVAL,
    errno.EBADF: ErrorCode.EINVAL,
    errno.EOVERFLOW: ErrorCode.EDOM,
    errno.EFAULT: ErrorCode.EINVAL,
    errno.EPERM: ErrorCode.EPERM,
    errno.EACCES: ErrorCode.EPERM,
    errno.EBUSY: ErrorCode.EBUSY,
    errno.EAGAIN: ErrorCode.ENOMEM,  # MAP_LOCKED past RLIMIT_MEMLOCK
    errno.ENODEV: ErrorCode.ENOTSUP,
    errno.ENOSYS: ErrorCode.ENOTSUP,
    errno.EOPNOTSUPP: ErrorCode.ENOTSUP,
    errno.EXDEV: ErrorCode.EDOM,
}


@pytest.mark.parametrize("code", [*HOST_ERRNO, errno.EIO, errno.ENOSPC, errno.EINTR, 0, 9999])
def test_the_host_errno_table_literally(code: int) -> None:
    err = numa.os_error(OSError(code, os.strerror(code), "mbind"))
    assert err.code is HOST_ERRNO.get(code, ErrorCode.FAILURE)
    assert err.native is not None
    assert (err.native.function, err.native.code) == ("mbind", code)


def test_the_host_table_has_no_entry_the_literal_table_lacks() -> None:
    assert dict(numa.OS_ERRORS.mapping) == HOST_ERRNO


# -- every tampered field through the real ipc_open ---------------------------------------------
_EDGE = (1 << 63) - 1


def _handle() -> IpcHandle:
    """A host handle as if another process exported it (its pid is not ours: the
    importer's every check runs, then it looks for the exporter)."""
    with HostArea(ipc=True) as area:
        handle = area.ipc_export(area.mmap(4096)).handle
    return copy.copy(IpcHandle(**{**_fields(handle), "pid": os.getppid()}))


def _fields(handle: IpcHandle) -> dict[str, Any]:
    return {f: getattr(handle, f) for f in ("backend", "device", "size", "data", "pid", "offset")}


#: field, tampered value, the error class and code the importer must answer, before any
#: open (an importer that skips revalidation looks for the exporter and answers EINVAL
#: "no aml exporter answers", or maps: these codes and messages catch it).
TAMPERED: list[tuple[str, object, str, ErrorCode, str]] = [
    ("size", 0, "AMLValueError", ErrorCode.EINVAL, "size"),
    ("size", -1, "AMLValueError", ErrorCode.EINVAL, "size"),
    ("size", "big", "AMLTypeError", ErrorCode.EINVAL, "size"),
    ("size", 1.5, "AMLTypeError", ErrorCode.EINVAL, "size"),
    ("size", _EDGE + 1, "AMLDomainError", ErrorCode.EDOM, "size"),
    ("size", 2**64, "AMLDomainError", ErrorCode.EDOM, "size"),
    ("offset", -1, "AMLValueError", ErrorCode.EINVAL, "offset"),
    ("offset", "0", "AMLTypeError", ErrorCode.EINVAL, "offset"),
    ("offset", 2**64, "AMLDomainError", ErrorCode.EDOM, "offset"),
    ("device", -5, "AMLValueError", ErrorCode.EINVAL, "device"),
    ("device", "x", "AMLTypeError", ErrorCode.EINVAL, "device"),
    ("device", 2**40, "AMLValueError", ErrorCode.EINVAL, "device"),
    ("data", b"", "AMLValueError", ErrorCode.EINVAL, "data"),
    ("data", None, "AMLTypeError", ErrorCode.EINVAL, "data"),
    ("data", "text", "AMLTypeError", ErrorCode.EINVAL, "data"),
    ("data", b"x" * 1025, "AMLValueError", ErrorCode.EINVAL, "data"),
    ("pid", 0, "AMLValueError", ErrorCode.EINVAL, "pid"),
    ("pid", -1, "AMLValueError", ErrorCode.EINVAL, "pid"),
    ("pid", "1", "AMLTypeError", ErrorCode.EINVAL, "pid"),
    ("backend", "", "AMLNotSupported", ErrorCode.ENOTSUP, "unknown backend"),
    ("backend", 5, "AMLTypeError", ErrorCode.EINVAL, "exported by aml"),
    ("pid", "self", "AMLValueError", ErrorCode.EINVAL, "process that exported it"),
]


@pytest.mark.parametrize(("field", "value", "cls", "code", "says"), TAMPERED)
def test_every_tampered_field_is_refused_by_ipc_open(
    field: str, value: object, cls: str, code: ErrorCode, says: str
) -> None:
    handle = _handle()
    if value == "self":
        value = os.getpid()
    object.__setattr__(handle, field, value)  # what unpickling a tampered handle gives
    with pytest.raises(aml_core.AMLError):  # the first open makes the import area: not counted
        aml_core.ipc_open(_handle())
    before = _memfds()
    with pytest.raises(aml_core.AMLError) as info:
        aml_core.ipc_open(handle)
    assert type(info.value).__name__ == cls, info.value
    assert info.value.code is code
    assert says in str(info.value), info.value
    assert _memfds() <= before  # nothing left open: no memfd received and kept


def _memfds() -> int:
    """This process's memfds: what a refused open of a host handle could leave open (a
    descriptor received and kept). Not every descriptor: pytest's capture opens files of
    its own, and exporter threads of earlier tests accept and close sockets on their own
    schedule (the sockets' own leak tests are tests/test_host_ipc_abuse.py's)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile (the listing's own one)
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:")
    return n
