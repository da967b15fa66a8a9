"""Scoped PyTorch pools: a ``torch.cuda.MemPool`` whose allocator is an aml pool.

``torch_mem_pool(pool, backend=...)`` (``aml_cuda.torch_mem_pool(pool)``,
``aml_hip.torch_mem_pool(pool)``) makes a ``torch.cuda.MemPool`` whose allocator is one of
aml's compiled entry-point pairs (a *slot* of aml_core/_hooks.pyx) over ``pool``. PyTorch's
caching allocator keeps its own bookkeeping and asks the MemPool's allocator for whole
segments; aml's pool serves them (a cached block in C, anything else through the pool)::

    pool = aml_core.pool(aml_cuda.create(0), limit=8 << 30)
    mp = aml_cuda.torch_mem_pool(pool)          # at any time, also after PyTorch allocated
    with mp.use():                              # or torch.cuda.use_mem_pool(mp.mempool)
        kv = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")   # from the aml pool
    del kv
    mp.close()                                  # every segment back in the aml pool

Rules (aml errors, with their codes):

* it can be made at any time, several at once, over pools of several devices (one
  ``torch.cuda.MemPool`` per call, at most ``_hooks.SLOTS`` bound at once: past that
  :class:`~aml_core.errors.AMLBusyError`); PyTorch's own allocator stays for everything
  outside the scopes, and the process-wide hook (``use_with_torch``) stays for
  whole-program use (the two do not mix: with the hook installed this is
  :class:`~aml_core.errors.AMLNotSupported`, every allocation coming from aml already);
* a refusal (the pool's limit, ``on_oom`` declining, the device full, the pool closed)
  is NULL to PyTorch's caching allocator, which frees its cache, retries, and raises
  ``torch.OutOfMemoryError``; the aml error is kept in ``mp.errors``;
* ``close()`` gives every segment PyTorch does not use back to the aml pool: it drops the
  MemPool (whose destructor empties its cache through aml's free) and calls
  ``torch.cuda.empty_cache()`` for what PyTorch still kept (pytorch#145168: a MemPool
  alive, or in a ``use_mem_pool`` scope, is never emptied). Tensors still alive keep their
  segments; those come back when the tensors are freed and ``torch.cuda.empty_cache()``
  (or ``close()`` again) runs. ``close()`` while the MemPool is in a scope or referenced
  elsewhere is EBUSY and changes nothing;
* the pool must be a device or managed pool of the hook's backend, open (a closed pool is
  EINVAL), on the MemPool's device (another device is EINVAL);
* PyTorch 2.8 or newer (:data:`MIN_TORCH`): ``MemPool(allocator=…)`` and ``use_mem_pool``
  exist since 2.5 (pytorch#134685), but the MemPool's destructor empties its cache only
  since 2.8 (pytorch#151487), when ``MemPoolContext`` also left (pytorch#154746); an
  older one is AMLNotSupported naming the version;
* PyTorch's ``cudaMallocAsync`` backend (``PYTORCH_ALLOC_CONF=backend:cudaMallocAsync``,
  or ``PYTORCH_CUDA_ALLOC_CONF``) has no MemPools (pytorch#192464): AMLNotSupported saying
  so, before anything is made.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from .. import _hooks
from ..backend_list import label_of
from ..errors import AMLBusyError, AMLNotSupported, AMLTypeError, AMLValueError
from ..pool import Pool
from ..specs import Kind
from . import hooks

__all__ = ["MIN_TORCH", "TorchMemPool", "torch_mem_pool"]

#: The oldest PyTorch a scoped pool runs on (see the module doc).
MIN_TORCH = (2, 8)

_lock = threading.Lock()


class _Slot:
    """One bound slot: what PyTorch may still call through it. Kept (with the slot)
    until its MemPool is gone and PyTorch holds none of its segments."""

    __slots__ = ("allocator", "index", "mempool", "state")

    def __init__(self, index: int, state: _hooks.HookState, allocator: Any, mempool: Any) -> None:
        self.index = index
        self.state = state
        self.allocator = allocator  # PyTorch's MemPool keeps a raw pointer to it
        self.mempool = weakref.ref(mempool)


_bound: dict[int, _Slot] = {}


def _reclaim() -> None:
    """Unbind every slot whose MemPool is gone and whose segments are all back."""
    for index, slot in list(_bound.items()):
        if slot.mempool() is None and slot.state.live == 0:
            del _bound[index]
            _hooks.unbind_slot(index)


def _torch_version(torch: Any) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", str(getattr(torch, "__version__", "")))
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def _check_torch(torch: Any) -> None:
    version = _torch_version(torch)
    cuda: Any = getattr(torch, "cuda", None)
    if version < MIN_TORCH or not hasattr(cuda, "MemPool") or not hasattr(cuda, "use_mem_pool"):
        raise AMLNotSupported(
            f"a scoped aml pool needs PyTorch {MIN_TORCH[0]}.{MIN_TORCH[1]} or newer "
            f"(torch.cuda.MemPool with an allocator); this is PyTorch {torch.__version__}"
        )
    if not cuda.is_available():
        raise AMLNotSupported(
            f"PyTorch {torch.__version__} has no usable GPU (torch.cuda.is_available() is False: "
            "a CPU build, or no device): a MemPool needs one"
        )
    backend = cuda.memory.get_allocator_backend()
    if backend != "native":
        raise AMLNotSupported(
            f"PyTorch's {backend} allocator backend has no MemPools (pytorch#192464); "
            "a scoped aml pool needs the native caching allocator: unset "
            "backend:cudaMallocAsync in PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF"
        )
    if hooks._torch_hook is not None:
        raise AMLNotSupported(
            f"{hooks._torch_hook!r} is PyTorch's allocator for the whole process already "
            "(every allocation comes from aml); a MemPool needs PyTorch's caching allocator"
        )


class TorchMemPool:
    """A ``torch.cuda.MemPool`` over an aml pool (made by :func:`torch_mem_pool`):
    ``mempool`` is the MemPool (None once closed), ``pool`` the aml pool, ``device`` the
    GPU index, ``errors`` what aml refused, ``live`` the segments PyTorch holds."""

    def __init__(self, pool: Pool, device: int, backend: str, torch: Any) -> None:
        self.pool = pool
        self.device = device
        self.backend = backend
        self.errors: list[BaseException] = []
        self.closed = False
        self._torch = torch
        self._scopes = 0
        self.state = hooks._hook_state(self, pool)
        with _lock:
            _reclaim()
            index = _hooks.bind_slot(self.state, device)
            if index is None:
                raise AMLBusyError(
                    f"{_hooks.SLOTS} aml MemPools are bound already; close one (and free its tensors)"
                )
            try:
                malloc, free = _hooks.slot_entry_points(index)
                allocator = torch._C._cuda_customAllocator(malloc, free)
                with torch.cuda.device(device):  # a MemPool belongs to the current device
                    self.mempool: Any = torch.cuda.MemPool(allocator)
            except BaseException:
                _hooks.unbind_slot(index)
                raise
            self.slot = index
            _bound[index] = _Slot(index, self.state, allocator, self.mempool)

    @property
    def live(self) -> int:
        """Segments PyTorch holds from this MemPool's aml pool."""
        return self.state.live

    @contextlib.contextmanager
    def use(self) -> Iterator[TorchMemPool]:
        """Route this thread's allocations on the MemPool's device to it (PyTorch's
        ``torch.cuda.use_mem_pool``, with the device given); an exception leaving the
        block ends the routing as a normal exit does, and propagates."""
        if self.closed:
            raise AMLValueError(f"{self!r} is closed")
        with self._torch.cuda.use_mem_pool(self.mempool, device=self.device):
            self._scopes += 1
            try:
                yield self
            finally:
                self._scopes -= 1

    def close(self) -> None:
        """Give the aml pool every segment PyTorch does not use (see the module doc);
        again after tensors were freed, it gives back theirs. EBUSY while the MemPool is
        in a scope or held elsewhere."""
        torch = self._torch
        with _lock:
            if not self.closed:
                # ours and getrefcount's own: anything more is a scope or another holder
                if self._scopes or sys.getrefcount(self.mempool) > 2:
                    raise AMLBusyError(
                        f"{self!r} is in a use_mem_pool scope or referenced elsewhere; "
                        "leave the scope and drop the other references to mp.mempool first"
                    )
                self.mempool = None  # PyTorch's ~MemPool: releasePool, emptyCache(id)
                self.closed = True
            if self.state.live:
                torch.cuda.empty_cache()  # a freeable pool's segments (pytorch#145168)
            _reclaim()

    def __enter__(self) -> TorchMemPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        label = label_of(self.backend)
        return (
            f"<aml TorchMemPool ({label} device {self.device}) {state} over {self.pool!r}, {self.live} live>"
        )


def torch_mem_pool(pool: Pool, *, device: int | None = None, backend: str) -> TorchMemPool:
    """A ``torch.cuda.MemPool`` over ``pool`` (a device or managed pool of the backend
    named ``backend``) on ``device`` (None: the pool's device, else PyTorch's current
    one). See the module doc for the rules."""
    if not isinstance(pool, Pool):
        raise AMLTypeError(
            f"a scoped PyTorch pool takes an aml pool (aml_core.pool(area)), not {type(pool).__name__}"
        )
    hooks._check_area(pool, "pool", backend, "torch_mem_pool")
    if pool.kind is not Kind.DEVICE and pool.kind is not Kind.MANAGED:
        raise AMLValueError(f"PyTorch tensors live in device or managed memory, not {pool.kind.value} memory")
    if device is not None and (not isinstance(device, int) or isinstance(device, bool) or device < 0):
        raise AMLValueError(f"a device index is an int >= 0, not {device!r}")
    torch: Any = hooks._import("torch", "PyTorch")
    _check_torch(torch)
    bound = pool.device if pool.device is not None and pool.device >= 0 else None
    if device is None:
        device = bound if bound is not None else int(torch.cuda.current_device())
    elif bound is not None and bound != device:
        raise AMLValueError(f"a MemPool of device {device} over a pool of device {bound}")
    return TorchMemPool(pool, device, backend, torch)
