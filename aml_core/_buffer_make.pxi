# Part of aml_core/_buffer.pyx (included by it: one extension module); docs/kernel.md
# says which file holds which policy.
# Making buffers: _Maker (a buffer of the area's buffer_type, bound in one C call: _make)
# and the fast path an area installs (_set_native, _set_pool).

cdef extern from *:
    """
    #define aml_tp_finalize(t) ((void *)((PyTypeObject *)(t))->tp_finalize)
    /* A type's attribute-cache version: 0 while it has none. Any change to the type or
       a base (an attribute set, __del__ assigned, __bases__) gives it a new one. */
    #define aml_type_tag(t) ((((PyTypeObject *)(t))->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) \
                             ? ((PyTypeObject *)(t))->tp_version_tag : 0u)
    """
    void *aml_tp_finalize(object t) noexcept
    unsigned int aml_type_tag(object t) noexcept

cdef tuple NO_DL_DEVICE = (0, 0)
cdef tuple EMPTY = ()
cdef str BUFFER_TYPE = "buffer_type"


@cython.no_gc_clear  # finalizers that run after a collection may still use the table
@cython.auto_pickle(False)
cdef class _Maker(_Lifetime):
    """_Maker(*args, **kwargs)
--

    Making buffers (AreaBase's third base): _new_buffer, the checked buffer type,
    _make, tracking a new buffer (_track, _refuse) and the installed fast path."""

    # -- making buffers -------------------------------------------------------------------
    def _new_buffer(
        self,
        ptr,
        Py_ssize_t size,
        *,
        host_accessible,
        readonly=False,
        dl_device=NO_DL_DEVICE,
        device_ptr=None,
        native=None,
        device=None,
        buffer_type=None,
    ):
        """A new buffer of this area's buffer_type (or of buffer_type, a Buffer subclass),
        bound to the memory and to this area: device_ptr defaults to ptr and device to the
        area's."""
        tp = self._buffer_type(buffer_type)
        if size < 0:
            raise ValueError("size must be >= 0")
        cdef unsigned long long p = ptr
        cdef int flags = (F_HOST if host_accessible else 0) | (F_READONLY if readonly else 0)
        dt, did = dl_device
        return self._make(
            tp, ptr, p, size, flags, dt, did, self.device if device is None else device, device_ptr, native
        )

    cdef object _buffer_type(self, buffer_type):
        cdef PyObject *cls_attr
        cdef unsigned int area_tag
        if buffer_type is None:  # the class attribute, through the type attribute cache
            # The class's buffer type as last checked, while neither class changed since
            # (their attribute-cache versions are the same: a mmap's hit checks nothing else)
            area_tag = aml_type_tag(type(self))
            if area_tag != 0 and area_tag == self._tp_area_tag and self._tp_checked is not None:
                if aml_type_tag(self._tp_checked) == self._tp_buffer_tag:
                    return self._tp_checked
            cls_attr = _PyType_Lookup(Py_TYPE(self), BUFFER_TYPE)
            tp = <object>cls_attr if cls_attr != NULL else type(self).buffer_type
        else:
            tp = buffer_type
        if not isinstance(tp, type) or not PyType_IsSubtype(<PyTypeObject *>tp, <PyTypeObject *>BufferBase):
            raise TypeError(f"buffer_type must be a Buffer class, not {tp!r}")
        if aml_tp_finalize(tp) != aml_tp_finalize(BufferBase):
            # Its finalizer frees a dropped buffer and keeps the live table sound.
            raise TypeError(f"{tp.__name__} defines __del__: a Buffer class must not override it")
        if buffer_type is None:
            _PyType_Lookup(<PyTypeObject *>tp, BUFFER_TYPE)  # gives the class a version if it has none
            self._tp_buffer_tag = aml_type_tag(tp)
            self._tp_area_tag = aml_type_tag(type(self)) if self._tp_buffer_tag != 0 else 0
            self._tp_checked = tp
        return tp

    cdef BufferBase _make(
        self, tp, ptr, unsigned long long p, Py_ssize_t size, int flags, int dl_type, int dl_id,
        device, device_ptr, native,
    ):
        """Bind a new buffer of class tp (checked by _buffer_type): _new_buffer's and the
        compiled mmap's one constructor. ``ptr`` is p as an int, or None (the int is made
        when first asked for: a pool's hit makes none)."""
        # tp's own tp_new (BufferBase's, inherited by Python subclasses), in one C call.
        cdef BufferBase buf = <BufferBase>(<PyTypeObject *>tp).tp_new(tp, <PyObject *>EMPTY, NULL)
        aml_gc_unfinalize(buf)  # a new object, perhaps from the free list (_buffer_views.pxi)
        buf._ptr = p
        buf._key = ptr if type(ptr) is int else None  # None: made on first use (key_of)
        buf.size = size
        buf.flags = flags | F_BOUND
        buf.dl_device_type = dl_type
        buf.dl_device_id = dl_id
        buf._area = self
        buf.kind = self.kind
        buf.device = device
        buf._device_ptr = device_ptr  # None: ptr
        buf.native = native
        return buf

    # -- the fast path (_fastpath.pyx) -----------------------------------------------------
    def _set_native(self, allocator, mode="device", **options):
        """Install ``allocator`` (a NativeAllocator) for this area's ``mode`` (the
        ``options`` are NativePath's, which says what then runs in C); None uninstalls
        it. _free must free both kinds of buffers: close, finalizers and every other case
        use it. An area runs either a NativeAllocator or a pool cache."""
        if allocator is None:
            if isinstance(self._fast, NativePath):
                self._fast = None
            return
        if self._fast is not None and not isinstance(self._fast, NativePath):
            raise ValueError("this area runs a PoolKernel already")
        self._install(NativePath(allocator, self, mode, **options))

    def _set_pool(self, kernel):
        """Install a pool's kernel (None uninstalls it): then ``mmap(size)`` without
        options, or with a stream the kernel can read, that the kernel serves from its
        cached blocks, and ``munmap`` of its blocks while it keeps stacks, run in C (see
        PoolKernel). _allocate and _free do everything else and must accept blocks either
        path made. An area runs either a NativeAllocator or a pool kernel."""
        if kernel is None:
            if isinstance(self._fast, PoolKernel):
                self._fast = None
            return
        if not isinstance(kernel, PoolKernel):
            raise TypeError(f"_set_pool takes a PoolKernel, not {type(kernel).__name__}")
        if self._fast is not None and not isinstance(self._fast, PoolKernel):
            raise ValueError("this area runs a NativeAllocator already")
        self._install(kernel)

    cdef int _install(self, FastPath path) except -1:
        path.installed(self)
        self._fast = path
        return 0

    @property
    def _native_allocator(self):
        """The installed NativeAllocator, or None."""
        return self._fast.allocator if isinstance(self._fast, NativePath) else None

    @property
    def _pool_kernel(self):
        """The installed PoolKernel, or None."""
        return self._fast if isinstance(self._fast, PoolKernel) else None

    def _track(self, BufferBase buf not None, during="mmap"):
        """Track a new buffer (mmap's, or one a subclass made); if the area is closed, give
        the memory back and raise."""
        cdef int status = self._add(buf)
        if status != ADDED:
            self._refuse(buf, status, during)
        return buf

    cdef int _refuse(self, BufferBase buf, int status, str during) except -1:
        # Not tracked: give the memory back, then say why.
        buf._release()
        if status == NULL_PTR or status == DUPLICATE:
            # Nothing of ours to free: NULL is no memory, and a live address is another
            # buffer's. The native call lied; that is a FAILURE, never a buffer.
            what = "NULL" if status == NULL_PTR else f"0x{buf._ptr:x}, an address already live in this area"
            raise AMLFailure(
                f"the {self.backend} {self.kind.value} allocation ({during}) reported success "
                f"but returned {what}"
            )
        self._enter()
        try:
            self._free(buf)
        finally:
            self._leave()
        if status == NOMEM:
            raise AMLMemoryError(
                f"no memory to track a new mapping of this {self.backend} {self.kind.value} area"
            )
        if status == FULL:
            raise AMLDomainError(
                f"this {self.backend} {self.kind.value} area's live mappings would pass 2**64 - 1 "
                f"bytes with {buf.size} more"
            )
        raise AMLValueError(f"this {self.backend} area ({self.kind.value} memory) was closed during {during}")
