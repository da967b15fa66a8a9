# The limit and out of memory: the reservation's counter, the limit, the on_oom callback, the ENOMEM message.
# Included by aml_core/_kernel.pyx (one extension module: see docs/kernel.md, "Layout").

cdef class _Limit(_Streams):
    """The limit, the on_oom callback and the one ENOMEM message."""

    # -- the limit and out of memory -------------------------------------------------------
    def set_limit(self, limit):
        """The most bytes the pool may hold from the area (None: no limit), changed under
        the mutex (checked by the caller). Nothing is released now: growth past it is
        refused (after the cache is released) until the pool is under it again."""
        self.lock_gil()
        self._limited = limit is not None
        self._limit = limit if limit is not None else 0
        self.unlock()

    @property
    def limit(self):
        return self._limit if self._limited else None

    cdef void _count_reserved(self, size_t n) noexcept nogil:
        self.native_allocs += 1
        self.reserved += n
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved

    cdef int _call_on_oom(self, size_t n, object error) except -1:
        """Ask the pool's ``on_oom`` callback (the GIL and the mutex held): 0 to retry;
        ``error`` (the pool's ENOMEM) when it declines, closes the pool or raises (then
        chained from the callback's exception, with a note)."""
        from .pool import _callbacks
        from .pool._values import pool_stats_of

        callback = self.on_oom
        self._in_oom = True
        try:
            retry = bool(callback(n, pool_stats_of(self.stats())))
        except Exception as exc:
            # An interrupted callback (aml_core.pool._callbacks): its interrupt, not the
            # ENOMEM; no block is taken yet, so the pool is whole (a miss in C too).
            _callbacks.deliver()
            error.add_note(f"the pool's on_oom callback raised {type(exc).__name__}: {exc}")
            raise error from exc
        finally:
            self._in_oom = False
        if retry and self._shut:
            error.add_note("the pool's on_oom callback closed the pool")
            retry = False
        if not retry:
            raise error
        return 0

    cdef object _oom_error(self, str reason, size_t n, object cause=None, object failed=None):
        """The pool's ENOMEM (the one message builder): ``reason``, the bytes asked, what
        the pool holds, the free memory of its device where the area can tell; the native
        cause of ``cause`` (the area's own ENOMEM), a note for ``failed`` (a release of the
        cache that failed)."""
        free = None
        if self.free_memory is not None:
            try:
                free = self.free_memory()
            except Exception:  # not known: the message goes without it
                free = None
        text = (
            f"{reason}: {_fs(n)} more asked; the pool has {_fs(self.reserved)} reserved, "
            f"{_fs(self.requested)} in use"
        )
        if type(free) is int and free >= 0:
            text += f"; {_fs(free)} free on the device"
        error = AMLMemoryError(text, native=getattr(cause, "native", None))
        if failed is not None:
            error.add_note(f"releasing the pool's cached memory failed: {failed}")
        return error


def _area_said(what, nomem):
    """The reason of an ENOMEM from the area: ``what`` and the area's own message (its
    native cause goes with the pool's error, as ``native``)."""
    detail = str(nomem)
    native = getattr(nomem, "native", None)
    if native is not None:
        detail = detail.removesuffix(f" [{native}]")
    return f"{what} ({detail})"


def _fs(n):
    """A size in an error message: readable, with the exact count."""
    from .specs import format_size

    return format_size(n, exact=True)
