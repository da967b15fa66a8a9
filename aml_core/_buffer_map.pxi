# Part of aml_core/_buffer.pyx (included by it: one extension module); docs/kernel.md
# says which file holds which policy.
# AreaBase: the public methods (mmap, munmap) over the chain of its bases, munmap's
# target (_lookup) and the one stream conversion (_stream_of).

@cython.no_gc_clear  # finalizers that run after a collection may still use the table
@cython.auto_pickle(False)
cdef class AreaBase(_Maker):
    """AreaBase(*args, **kwargs)
--

    The compiled part of aml_core.area.Area: its live mappings, counters and closed
    flag, mmap, munmap, the checks of munmap's target (_lookup) and _new_buffer.

    Every change to the live mappings happens inside one of the bookkeeping methods
    (_add, _detach, _restore, _resized, _drain, _untrack_viewed, _reclaim), each of
    which runs under the GIL without releasing it, so each change is atomic; the
    subclass's _allocate and _free run outside them. The live table does not keep buffers
    alive: a live buffer that becomes unreachable is freed by its finalizer (see the
    module doc).

    Its methods live in a chain of bases, one file each (docs/kernel.md): _LiveTable
    (_buffer_table.pxi), _Lifetime (_buffer_lifetime.pxi), _Maker (_buffer_make.pxi)."""

    cpdef BufferBase _lookup(self, target, size):
        """The live buffer of this area that ``target`` (a Buffer or its base pointer)
        names, checking ``size`` if given; AMLValueError/AMLTypeError saying what is wrong
        otherwise. Reads only: munmap calls it, then detaches the buffer atomically."""
        cdef BufferBase buf
        if type(target) is Buffer or isinstance(target, BufferBase):  # the common class first: no MRO walk
            buf = <BufferBase>target  # checked just now: no second type test
            if not (buf.flags & F_BOUND):  # made by hand, never mapped (its repr would raise)
                raise AMLValueError(f"this {type(target).__name__} was never mapped by an area")
            if buf._area is not self:
                raise AMLValueError(f"{target!r} was not mapped by this area")
            if buf.flags & F_RELEASED:
                raise AMLValueError(f"{target!r} was already unmapped")
            if not (buf.flags & F_TRACKED):
                raise AMLValueError(f"{target!r} is not live in this area")
        elif isinstance(target, int) and not isinstance(target, bool):
            found = self._at(target)
            if found is None:
                self._not_mapped(target)
            buf = found
        else:
            raise AMLTypeError(f"munmap takes a Buffer or an int pointer, not {type(target).__name__}")
        if size is not None and not (type(size) is int and size == buf.size and buf.size > 0):
            try:
                n = _check_size(size)
            except AMLDomainError:  # larger than any mapping: a mismatch, not a domain error
                raise AMLValueError(f"munmap size {size} does not match the mapping's size {buf.size}") from None
            if n != buf.size:
                raise AMLValueError(f"munmap size {n} does not match the mapping's size {buf.size}")
        return buf

    cdef bint _own_lookup(self) noexcept:
        """Whether the area's class runs AreaBase's own _lookup (no Python subclass
        overrides it): then munmap calls its body directly, without Cython's cpdef
        dispatch. Checked once per attribute-cache version of the class (any change to
        the class or a base gives it a new one, so a _lookup set later is seen)."""
        cdef unsigned int tag = aml_type_tag(type(self))
        if tag != 0 and tag == self._tp_lookup_tag:
            return True
        if _PyType_Lookup(Py_TYPE(self), LOOKUP) != <PyObject *>_AREA_LOOKUP:
            self._tp_lookup_tag = 0
            return False
        self._tp_lookup_tag = aml_type_tag(type(self))  # the lookup gave it a version
        return True

    def _not_mapped(self, target):
        for live in self._snapshot():
            base = live.ptr
            if base < target < base + live.size:
                raise AMLValueError(
                    f"0x{target:x} is inside the mapping at 0x{base:x} (offset "
                    f"{target - base}); munmap takes the mapping's base pointer"
                )
        raise AMLValueError(
            f"0x{target:x} was not mapped by this area (a foreign pointer, or already unmapped)"
        )

    def mmap(self, size, options=None, *, stream=None):
        """Allocate ``size`` bytes; aml_core.area.Area.mmap documents the options and
        errors (each area's ``mmap`` documents its own: :func:`_mmap_function`)."""
        return self._map(size, options, stream)

    def _take_streams(self, bint ordered=True):
        """Say whether this area orders work on streams: then ``mmap(..., stream=s)``
        and ``munmap(..., stream=s)`` pass the handle (converted once) to the fast path
        and to ``_allocate(size, options, stream=handle)`` / ``_free(buffer,
        stream=handle)``; otherwise a stream is refused (AMLNotSupported, the reason
        from ``_no_streams()``)."""
        self._streams = ordered

    @property
    def _ordered(self):
        """Whether the area takes streams (_take_streams)."""
        return self._streams

    cdef int _stream_of(self, object stream, unsigned long long *handle) except -1:
        """The one conversion of a stream argument (not None) into a native handle: an
        int in 0..2**64 - 1 in C, anything else by aml_core.stream.as_stream_handle (its
        errors: AMLTypeError, AMLValueError, a closed stream's); then AMLNotSupported
        where the area orders no work on streams."""
        cdef unsigned long long h
        if type(stream) is int:
            h = _as_ull(stream)
            if h == <unsigned long long>-1 and PyErr_Occurred() != NULL:
                PyErr_Clear()
                stream = _convert_stream(stream)  # its error: out of range
                h = stream
        elif type(stream) is _stream_type and stream._closed is False and type(stream.handle) is int:
            h = stream.handle  # an open aml Stream: its handle, read in C
        else:
            h = _convert_stream(stream)
        if not self._streams:
            self._no_streams()
            raise AMLNotSupported(f"this {type(self).__name__} orders no work on streams")
        handle[0] = h
        return 0

    def _split_stream(self, options, stream):
        """The deprecated ``stream`` option (``mmap(n, {"stream": s})``, an options
        class's ``stream`` field; to be removed in the next minor version): moved to the
        ``stream`` argument, with a DeprecationWarning. Returns (options, stream)."""
        if isinstance(options, _Mapping):
            if "stream" not in options:
                return options, stream
            rest = dict(options)
            value = rest.pop("stream")
            rest_options = rest or None
        else:
            if not hasattr(options, "stream"):
                return options, stream
            value = options.stream
            if value is not None:
                import attrs

                options = attrs.evolve(options, stream=None)
            try:
                rest_options = None if options == type(options)() else options  # defaults: the fast path may serve it
            except Exception:
                rest_options = options
            if value is None:
                return rest_options, stream  # the deprecated field not used
        _warnings.warn(
            "the mmap option 'stream' is deprecated: pass mmap(size, stream=s)",
            DeprecationWarning,
            stacklevel=3,
        )
        if value is not None and stream is not None:
            raise AMLValueError("mmap got a stream twice: as stream= and in its options")
        return rest_options, stream if value is None else value

    def _no_streams(self):
        """Raise why this area takes no stream (AMLNotSupported; areas override it to
        give their reason)."""
        raise AMLNotSupported(
            f"streams need a GPU area; this {type(self).__name__} has no runtime that orders work on streams"
        )

    cdef object _map(self, size, options, stream):
        """mmap itself: the one body of AreaBase.mmap and every _mmap_function."""
        cdef Py_ssize_t n = 0
        cdef bint has_stream = False
        cdef unsigned long long handle = 0
        if type(size) is int:  # the common case, a plain positive int, checked in C
            n = _as_ssize(size)
            if n == -1 and PyErr_Occurred() != NULL:
                PyErr_Clear()
        if n > 0:
            n_obj = size
        else:
            n_obj = _check_size(size)
            n = n_obj  # a checked size fits (checks.MAX_SIZE): the fast path takes both
        if self._closed:
            self._check_open()
        cdef BufferBase buf = None
        if options is None and stream is None:  # the hot case first: one test
            if self._fast is not None:
                buf = self._fast.take(self, n_obj, n, False, 0)
        else:
            if options is not None:
                options, stream = self._split_stream(options, stream)  # the deprecated option
            if stream is not None:
                self._stream_of(stream, &handle)
                has_stream = True
            if self._fast is not None and options is None:
                buf = self._fast.take(self, n_obj, n, has_stream, handle)
        if buf is None:
            self._enter()  # a finalizer run by the subclass's code defers its free
            try:
                if has_stream:
                    buf = self._allocate(n_obj, self._coerce_options(options), stream=handle)
                else:
                    buf = self._allocate(n_obj, self._coerce_options(options))
            finally:
                self._leave()
        if has_stream:
            buf._has_stream = True
            buf._stream = handle
        cdef int status = self._add(buf)
        if status != ADDED:
            self._refuse(buf, status, "mmap")
        return buf

    def munmap(self, buffer, size=None, *, stream=None):
        """Free a mapping made by this area, given as the Buffer or its base pointer, in
        the order of ``stream`` (None: the stream the buffer was allocated on, if any)."""
        if stream is None:
            self._unmap(buffer, size, True)
        else:
            self._unmap_on(buffer, size, stream)

    def _munmap_slow(self, buffer, size=None):
        """munmap through _free, never the fast path."""
        self._unmap(buffer, size, False)

    cdef int _unmap(self, buffer, size, bint fast) except -1:
        if self._closed:
            self._check_open()
        cdef BufferBase buf
        if self._own_lookup():
            buf = AreaBase._lookup(self, buffer, size)  # the body, no dispatch
        else:
            buf = self._lookup(buffer, size)  # a subclass's
        self._detach(buf)
        return self._free_detached(buf, fast)

    cdef int _unmap_on(self, buffer, size, object stream) except -1:
        """munmap in the order of ``stream`` (not None), converted once here."""
        if self._closed:
            self._check_open()
        cdef unsigned long long handle = 0
        self._stream_of(stream, &handle)
        cdef BufferBase buf = self._lookup(buffer, size)
        self._detach(buf)
        if self._fast is not None and self._fast.give(self, buf, True, handle):
            return 0
        self._enter()
        try:
            self._free(buf, stream=handle)
        except BaseException:
            self._restore(buf)  # the memory is still there: keep tracking it
            raise
        finally:
            self._leave()
        return 0


cdef str LOOKUP = "_lookup"
cdef object _AREA_LOOKUP = AreaBase.__dict__[LOOKUP]  # AreaBase's own (_own_lookup)


def _mmap_function():
    """A new function object that runs :meth:`AreaBase.mmap` (a call of the same
    compiled body), for an area class to give its ``mmap`` its own docstring and
    signature without a Python frame on the hot path (aml_core.area.compiled_mmap)."""

    def mmap(AreaBase self, size, options=None, *, stream=None):
        return self._map(size, options, stream)

    return mmap


cdef object _stream_module = None
cdef object _stream_type = None  # aml_core.stream.Stream, once that module is imported


cdef object _convert_stream(object stream):
    """aml_core.stream.as_stream_handle (imported on first use: it imports this module)."""
    global _stream_module, _stream_type
    if _stream_module is None:
        from . import stream as _mod
        _stream_module = _mod
        _stream_type = _mod.Stream
    return _stream_module.as_stream_handle(stream)
