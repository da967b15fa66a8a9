# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, binding=True, embedsignature.format=clinic
"""The fast-path interface of an area (docs/kernel.md).

``AreaBase`` (aml_core/_buffer.pyx) owns the live table and buffer lifetime; an area
may install one :class:`FastPath` (``AreaBase._set_native``, ``AreaBase._set_pool``)
that serves ``mmap(size)`` without options and frees what it handed out, in C. The
area calls it at four points, and only there:

``take(area, n_obj, n, has_stream, stream)``
    mmap(n) without options, ``n_obj`` a checked size (a positive int) and ``n`` the
    same in C (a checked size fits: checks.MAX_SIZE), in host order or
    (``has_stream``) in the order of ``stream``, a handle the area converted once: a
    buffer made by ``area._make`` (not tracked yet: the area tracks it and records its
    stream), or None when the area's Python ``_allocate`` must run. It raises only what
    the native call or the buffer's construction raised, with nothing of its own state
    changed or leaked.
``give(area, buf, has_stream, stream)``
    munmap or a finalizer, ``buf`` detached (untracked, counted unmapped), freed in
    host order or in ``stream``'s (the buffer's own stream unless munmap named
    another): True if its memory went back in C, False when the area's ``_free`` must
    run. A native free that fails tracks the buffer again (``area._restore``) and
    raises, as a failing ``_free`` does.
``can_give(area, buf)``
    a finalizer asks whether ``give`` would free ``buf`` in C now without running
    Python code or waiting (then it runs at once, even while someone is inside the
    area; otherwise the free is deferred: see _buffer.pyx). Never raises.
``installed(area)``
    the area installed this path.

Each of these runs under the GIL, without releasing it between its reads and its
writes of shared state (a native call may release it: nothing is read across it), and
runs no Python code in between: that is what makes them atomic (docs/reliability.md,
"Threads and the GIL"). Implementations: ``NativeAllocator``'s ``NativePath``
(aml_core/_allocator.pyx) and ``PoolKernel`` (aml_core/_kernel.pyx, whose mutex
makes its own operations atomic).
"""

cimport cython


@cython.auto_pickle(False)
cdef class FastPath:
    """FastPath()
--

    The interface an area's compiled fast path implements (see the module doc). This
    base serves nothing: every request takes the area's Python path."""

    cdef BufferBase take(self, AreaBase area, object n_obj, Py_ssize_t n, bint has_stream, unsigned long long stream):
        return None

    cdef bint give(self, AreaBase area, BufferBase buf, bint has_stream, unsigned long long stream) except -1:
        return False

    cdef bint can_give(self, AreaBase area, BufferBase buf) noexcept:
        return False

    cdef int installed(self, AreaBase area) except -1:
        return 0
