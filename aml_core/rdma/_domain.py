"""The verbs calls aml makes, behind one small interface: a protection domain that
registers an address range (``ibv_reg_mr``) or a dma-buf (``ibv_reg_dmabuf_mr``) and a
memory region that deregisters (``ibv_dereg_mr``). pyverbs (rdma-core's own Python
binding) provides them; :func:`as_domain` wraps a ``pyverbs.pd.PD``. Any object with the
same three methods is a domain too (a test double, another binding).

Errors: every call of a domain or a region goes through :func:`verbs_call`, which
translates a failure once, through :data:`VERBS_ERRORS` (errno → AML), with the call's
name and errno as the native cause."""

from __future__ import annotations

import enum
import errno
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..errors import AMLError, AMLNotSupported, AMLTypeError, AMLValueError, ErrorCode, ErrorTable

T = TypeVar("T")

__all__ = [
    "VERBS_ERRORS",
    "Access",
    "Domain",
    "NativeRegion",
    "PyverbsDomain",
    "as_domain",
    "domain",
    "verbs_call",
]


class Access(enum.IntFlag):
    """``enum ibv_access_flags`` (infiniband/verbs.h, rdma-core 44; docs/native-abi.md)."""

    LOCAL_WRITE = 1
    REMOTE_WRITE = 1 << 1
    REMOTE_READ = 1 << 2
    REMOTE_ATOMIC = 1 << 3


#: What a registration asks for unless told: the NIC writes it locally (receives, RDMA
#: read results) and peers read and write it.
DEFAULT_ACCESS = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ

#: errno of a failed verbs call → AML code (ibv_reg_mr(3): EINVAL, ENOMEM, EFAULT for a
#: range that is not mapped, EACCES/EPERM for access the pages do not allow, EOPNOTSUPP
#: for a provider without dma-buf).
VERBS_ERRORS = ErrorTable(
    backend="verbs",
    mapping={
        errno.ENOMEM: ErrorCode.ENOMEM,
        errno.EAGAIN: ErrorCode.ENOMEM,
        errno.EINVAL: ErrorCode.EINVAL,
        errno.EFAULT: ErrorCode.EINVAL,
        errno.EBADF: ErrorCode.EINVAL,
        errno.ENODEV: ErrorCode.EINVAL,
        errno.EPERM: ErrorCode.EPERM,
        errno.EACCES: ErrorCode.EPERM,
        errno.EBUSY: ErrorCode.EBUSY,
        errno.EOPNOTSUPP: ErrorCode.ENOTSUP,
        errno.ENOSYS: ErrorCode.ENOTSUP,
    },
    name=lambda code: errno.errorcode.get(code, f"errno {code}"),
)


@runtime_checkable
class NativeRegion(Protocol):
    """A registered memory region: its keys, the address its first byte has in work
    requests (``iova``: the virtual address for ``ibv_reg_mr``; for a dma-buf, what the
    registration said), and ``close()`` (``ibv_dereg_mr``; a second close does nothing)."""

    @property
    def lkey(self) -> int: ...

    @property
    def rkey(self) -> int: ...

    @property
    def iova(self) -> int: ...

    def close(self) -> None: ...


@runtime_checkable
class Domain(Protocol):
    """A protection domain as aml uses it (see the module doc)."""

    @property
    def device(self) -> str:
        """The RDMA device's name (``rxe0``, ``mlx5_0``)."""

    @property
    def pd(self) -> object:
        """The binding's own protection domain object (pyverbs' PD)."""

    def reg_mr(self, addr: int, length: int, access: int) -> NativeRegion: ...

    def reg_dmabuf_mr(self, offset: int, length: int, fd: int, access: int) -> NativeRegion: ...


class _PyverbsRegion:
    """A pyverbs MR seen as a :class:`NativeRegion`."""

    __slots__ = ("_mr", "iova")

    def __init__(self, mr: Any, iova: int) -> None:
        self._mr = mr
        self.iova = iova

    @property
    def lkey(self) -> int:
        return int(self._mr.lkey)

    @property
    def rkey(self) -> int:
        return int(self._mr.rkey)

    def close(self) -> None:
        self._mr.close()  # ibv_dereg_mr; pyverbs makes a second close a no-op


def verbs_call(function: str, what: str, call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, a domain's or a region's, with its failure as an AML error: an
    AMLError as it is; an exception carrying an errno in ``error_code`` (pyverbs'
    PyverbsRDMAError) through :data:`VERBS_ERRORS`; any other (pyverbs refusing before
    the call: a closed PD) AMLValueError."""
    try:
        return call(*args)
    except AMLError:
        raise
    except Exception as exc:
        code = getattr(exc, "error_code", None)
        if isinstance(code, int) and code > 0:
            raise VERBS_ERRORS.error(function, code, f"{what}: {exc}") from exc
        raise AMLValueError(f"{what}: {exc}") from exc


class PyverbsDomain:
    """A ``pyverbs.pd.PD`` as a :class:`Domain` (:func:`as_domain` makes one)."""

    __slots__ = ("_device", "_pd")

    def __init__(self, pd: Any, context: Any = None) -> None:
        self._pd = pd
        # pyverbs keeps a PD's context private: the device is named by the context given
        name = getattr(context if context is not None else getattr(pd, "ctx", None), "name", None)
        if isinstance(name, bytes):
            name = name.decode()
        self._device = str(name) if name else "an unnamed pyverbs device"

    @property
    def device(self) -> str:
        return self._device

    @property
    def pd(self) -> object:
        return self._pd

    def reg_mr(self, addr: int, length: int, access: int) -> NativeRegion:
        from pyverbs.mr import MR  # type: ignore[import-not-found,import-untyped,unused-ignore]

        return _PyverbsRegion(MR(self._pd, length, access, address=addr), addr)

    def reg_dmabuf_mr(self, offset: int, length: int, fd: int, access: int) -> NativeRegion:
        from pyverbs.mr import DmaBufMR  # type: ignore[import-not-found,import-untyped,unused-ignore]

        # pyverbs registers with iova = offset (rdma-core 44, pyverbs/mr.pyx: DmaBufMR).
        return _PyverbsRegion(DmaBufMR(self._pd, length, access, dmabuf=fd, offset=offset), offset)

    def __repr__(self) -> str:
        return f"<aml verbs domain of {self._device}>"


def domain(pd: object, context: object = None) -> Domain:
    """A pyverbs ``PD`` as a :class:`Domain` whose device is named by ``context`` (the
    pyverbs ``Context`` the PD was made on: pyverbs does not tell a PD's device), for
    messages that name devices; without ``context``, :func:`as_domain`."""
    found = as_domain(pd)
    if context is None or not isinstance(found, PyverbsDomain):
        return found
    return PyverbsDomain(pd, context)


def as_domain(pd: object) -> Domain:
    """``pd`` as a :class:`Domain`: a pyverbs ``PD`` (wrapped) or an object that is one
    already. AMLTypeError for anything else; AMLNotSupported names the missing binding
    when pyverbs is not installed and ``pd`` is none of these."""
    if isinstance(pd, Domain):
        return pd
    try:
        from pyverbs.pd import PD  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError as exc:
        raise AMLNotSupported(
            f"{type(pd).__name__} is no protection domain aml knows, and pyverbs (rdma-core's Python "
            "binding: Debian's python3-pyverbs, or `pip install aml-core[rdma]`) is not installed"
        ) from exc
    if isinstance(pd, PD):
        return PyverbsDomain(pd)
    raise AMLTypeError(f"a protection domain is a pyverbs PD (or an aml Domain), not {type(pd).__name__}")
