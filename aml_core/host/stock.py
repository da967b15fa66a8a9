"""A bound host area's stock: one mapping bound once, carved into its small mappings.

Binding is one more system call per mapping (``mbind(2)``): in the lab's emulated guests
``mmap`` + ``mbind`` + ``munmap`` of 1 MiB took 1.55-1.68 times ``mmap`` + ``munmap``
for the bare calls, so a bound area's ``mmap`` + ``munmap`` could not come within 1.2
times an unbound one's (issue 29) while each mapping was bound on its own. A bound area
(a policy other than DEFAULT, private anonymous memory, default options, no alignment
above a page) instead maps a stock of :data:`STOCK_SIZE` bytes, binds it once with the
area's policy and nodes (without MPOL_MF_MOVE: it has no pages), and hands out its
mappings of at most :data:`CARVE_MAX` bytes as page-rounded pieces of it, in address
order. What a piece is, page by page, is what a fresh bound mapping is:

* its policy is the stock's, which is the area's: the kernel keeps it per VMA, and the
  pieces split off the stock's VMA keep it (``get_mempolicy`` reads it back);
* its pages are made at first touch under that policy: BIND places them only on the set
  (a full set waits for reclaim, then the OOM killer, never a spill), PREFERRED spills,
  INTERLEAVE deals them by page number (the VMA offset of an anonymous mapping is its
  address), as for a mapping of its own;
* ``munmap`` is munmap(2) of the piece's range, so its pages go back to the OS and a use
  after free faults;
* it has no pages before its first touch (nothing in the stock is touched before it is
  handed out), so it reads as zeros.

The stock is advised ``MADV_NOHUGEPAGE``: a transparent huge page would span neighbouring
pieces (one first touch would commit 2 MiB of two buffers, and interleave them 2 MiB at a
time), where a fresh mapping of at most :data:`CARVE_MAX` bytes cannot hold one. What a
stock costs: :data:`STOCK_SIZE` bytes of address space and of commit charge (as a private
writable mapping of that size does), none of memory until pieces are touched. A stock that
cannot be made (its mmap or mbind fails: strict overcommit, a refused policy)
makes no piece: the area maps that buffer on its own, whose errors are the area's (a
kernel without transparent huge pages refuses the advice: the stock is used without it). The
area's rebind and close release the stock's remainder; live pieces stay mapped until
they are freed.
"""

from __future__ import annotations

import contextlib
import mmap as _mmap
import threading

from .. import _os

__all__ = ["CARVE_MAX", "STOCK_SIZE", "Stock"]

#: The bytes of one stock.
STOCK_SIZE = 32 << 20
#: The largest mapping carved from a stock (1/32 of it). Larger mappings are made and
#: bound one by one: their first touch (256 page faults and more) outweighs one mbind.
CARVE_MAX = 1 << 20
_PAGE = _os.PAGE_SIZE
_PROT_RW = _mmap.PROT_READ | _mmap.PROT_WRITE
_FLAGS = _mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS
_MADV_NOHUGEPAGE = getattr(_mmap, "MADV_NOHUGEPAGE", 15)


class Stock:
    """The stock of one placement (``mode``, ``nodes``: mbind's arguments): :meth:`carve`
    hands out pieces, :meth:`release` unmaps what is left and ends it. Thread-safe."""

    __slots__ = ("__weakref__", "_end", "_lock", "_mode", "_next", "_nodes", "_released")

    def __init__(self, mode: int, nodes: list[int]) -> None:
        self._mode = mode
        self._nodes = list(nodes)
        self._lock = threading.Lock()
        self._next = 0  # the first byte not handed out
        self._end = 0  # the stock's end (0: none mapped)
        self._released = False

    def carve(self, size: int) -> int | None:
        """The address of a fresh piece of ``size`` bytes (at most :data:`CARVE_MAX`),
        or None where no stock can be had (released, or it cannot be made)."""
        length = -(-size // _PAGE) * _PAGE
        with self._lock:
            if self._end - self._next < length and not self._refill():
                return None
            ptr = self._next
            self._next = ptr + length
            return ptr

    def _refill(self) -> bool:
        """Unmap the remainder and map, bind and advise a new stock (under the lock)."""
        if self._released:
            return False
        self._unmap_rest()
        try:
            ptr = _os.mmap(STOCK_SIZE, _PROT_RW, _FLAGS, -1, 0, 0)
        except OSError:
            return False
        try:
            _os.mbind(ptr, STOCK_SIZE, self._mode, self._nodes, 0)
        except OSError:
            _os.munmap(ptr, STOCK_SIZE)  # the area's own mapping says what the refusal is
            return False
        # (EINVAL: a kernel without transparent huge pages, none to span pieces)
        with contextlib.suppress(OSError):
            _os.madvise(ptr, STOCK_SIZE, _MADV_NOHUGEPAGE)
        self._next, self._end = ptr, ptr + STOCK_SIZE
        return True

    def _unmap_rest(self) -> None:
        if self._end > self._next:
            with contextlib.suppress(OSError):  # a range of our own: munmap cannot refuse it
                _os.munmap(self._next, self._end - self._next)
        self._next = self._end = 0

    def release(self) -> None:
        """Unmap the part not handed out; later carves answer None. Idempotent."""
        with self._lock:
            self._released = True
            self._unmap_rest()

    @property
    def remaining(self) -> int:
        """Bytes of the current stock not handed out yet."""
        return self._end - self._next

    def __del__(self) -> None:
        # An area dropped without close(): its placement, and so this stock, goes with it.
        with contextlib.suppress(Exception):
            self.release()
