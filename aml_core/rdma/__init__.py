"""RDMA registration of aml memory: an aml buffer, or a whole pool, registered with a
verbs protection domain (docs/beyond-one-node.md, "RDMA registration").

::

    import pyverbs.device, pyverbs.pd
    from aml_core import rdma

    ctx = pyverbs.device.Context(name="rxe0")
    pd = pyverbs.pd.PD(ctx)
    with rdma.register(pd, buf) as reg:           # one buffer, one memory region
        reg.lkey, reg.rkey, reg.addr              # for work requests
    with rdma.register_pool(pd, pool) as reg:     # every slab once, keys per block
        with reg.key(block) as key:               # held: the block cannot be freed
            key.lkey, key.rkey, key.addr, key.offset

``rdma.domain(pd, ctx)`` names the PD's device in messages (pyverbs does not tell it).

The binding is pyverbs, rdma-core's own (Debian's ``python3-pyverbs``; the ``rdma``
extra names PyPI's ``pyverbs``). aml imports it only when given a pyverbs ``PD``; any
object with :class:`Domain`'s three members is a protection domain too.

One buffer
    :func:`register` registers host memory by address (``ibv_reg_mr``) and GPU memory
    as its dma-buf (``ibv_reg_dmabuf_mr`` over ``export_dmabuf``: docs/dmabuf.md; the fd
    is closed once registered, the region holds the dma-buf). The :class:`Registration`
    holds an export of the buffer: freeing it is AMLBusyError until the registration is
    closed, so no registration is ever over freed memory; a buffer whose area closes
    meanwhile is freed when the registration closes.

A pool
    :func:`register_pool` registers each slab of the pool once (each mapped chunk of an
    expandable pool), when a block of it first asks for its key, and deregisters it
    before the pool gives it back (:meth:`~aml_core.pool.Pool.trim`, the release
    threshold, the limit's trim-and-retry, the pool's or its area's close). A failed
    deregistration keeps the slab: cached, counted, registered, and the release's error.
    :meth:`PoolRegistration.key` gives a block's :class:`BlockKey`: its ``lkey``,
    ``rkey``, ``addr`` (the block's first byte in work requests) and ``offset`` in its
    slab. The key is held until released: meanwhile the block cannot be freed, so its
    slab is never wholly free and no trim releases it (the rule for "a trim while a
    registration is in use"). A block of an expandable pool that spans chunks has one
    :class:`KeyPiece` per chunk in ``key.pieces``, each under its own chunk's keys; its
    ``key.lkey``/``rkey``/``addr`` are AMLValueError, never the first chunk's alone.
    Device memory in an expandable pool is AMLNotSupported (its chunks are no buffers
    to export as dma-bufs).

Errors (each before any verbs call, nothing registered, nothing left held)
    AMLTypeError: not a Buffer, not a pool, not a protection domain, access not an int.
    AMLValueError: a freed buffer (its area's close frees it too), a zero-length range, a
    block of another area, a closed registration, a second :meth:`Registration.close` or
    :meth:`PoolRegistration.close`, a key of a multi-chunk block taken as one,
    REMOTE_WRITE without LOCAL_WRITE. AMLBusyError: freeing a registered buffer or a
    block whose key is held; closing a pool registration with keys held.
    AMLNotSupported: pyverbs missing; GPU memory whose area has no dma-buf export. A
    failing verbs call is translated through :data:`VERBS_ERRORS` (errno → AML, the call
    and errno as ``error.native``): ENOMEM, EINVAL/EFAULT (EINVAL), EPERM/EACCES (EPERM),
    EOPNOTSUPP (ENOTSUP).

Devices
    A registration belongs to its protection domain's device. Work requests must use a
    queue pair of the same protection domain: the NIC refuses another's keys (a local
    protection error in the completion). :func:`key` (``rdma.key(pd, block)``) finds the
    pool's registration with ``pd``, and :meth:`PoolRegistration.key_for` checks it:
    a protection domain the pool is not registered with (another device's) is
    AMLValueError naming the devices.
"""

from __future__ import annotations

from ._domain import (
    DEFAULT_ACCESS,
    VERBS_ERRORS,
    Access,
    Domain,
    NativeRegion,
    PyverbsDomain,
    as_domain,
    domain,
)
from ._pool import BlockKey, KeyPiece, PoolRegistration, key, register_pool
from ._region import Registration, register

__all__ = [
    "DEFAULT_ACCESS",
    "VERBS_ERRORS",
    "Access",
    "BlockKey",
    "Domain",
    "KeyPiece",
    "NativeRegion",
    "PoolRegistration",
    "PyverbsDomain",
    "Registration",
    "as_domain",
    "domain",
    "key",
    "register",
    "register_pool",
]
