# Part of aml_core/_buffer.pyx (included by it: one extension module); docs/kernel.md
# says which file holds which policy.
# The public Buffer (aml_core.buffer.Buffer re-exports it): a compiled class, so that an
# area's mmap makes one without a Python subclass's allocation, deallocation and
# finalizer call, and from BufferBase's free list (which serves the compiled classes:
# a Python subclass's objects are allocated as before). Its typed interface is aml_core/buffer.py's.

cdef object _format_size = None  # aml_core.statistics.format_size, imported on first use
cdef object _cuda_interface = None  # aml_core.buffer.area_cuda_array_interface, likewise


@cython.auto_pickle(False)  # a copy would be a second handle to one mapping (a double free)
cdef class Buffer(BufferBase):
    """Buffer()
--

    A mapping returned by ``area.mmap()``.

    Attributes (read-only: the area sets them when it makes the buffer, and frees the
    memory from them):

    ``ptr``
        address of the first byte (for MAPPED memory: the host address).
    ``device_ptr``
        the address devices use (differs from ``ptr`` only for mapped host memory on
        systems without unified addressing).
    ``size``
        size in bytes, as asked.
    ``kind``, ``device``, ``area``
        what the area allocated and where.
    ``exports``
        live buffer-protocol views and DLPack consumers.
    ``freed``
        True once unmapped.
    ``native``
        backend-specific data the area needs to free the mapping (a handle, a
        reference that keeps registered host memory alive...)."""

    def free(self):
        """Unmap this buffer (``self.area.munmap(self)``)."""
        self.area.munmap(self)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        """Unmap the buffer; if it is still viewed (``np.frombuffer(buf)`` kept past the
        block), detach it as the area's close() does: it leaves the area's live mappings
        now and its memory is released when its last view (and this object) is gone. Never raises because
        of a live view, and never masks an exception raised inside the block."""
        if self.freed:
            return
        area = self.area
        try:
            if area.closed:  # close() already freed or detached it
                return
            if self.exports:
                area._detach_viewed(self)
                return
            try:
                area.munmap(self)
            except AMLBusyError:  # a view appeared since the test above
                area._detach_viewed(self)
        except AMLError as error:
            if exc_type is None:
                raise
            _warnings.warn(
                f"could not unmap {self!r} while leaving its with block on {exc_type.__name__}: {error}",
                ResourceWarning,
                stacklevel=1,  # a compiled method has no frame: 1 is the with block's
            )

    def __len__(self):
        return self.size

    def __repr__(self):
        global _format_size
        if _format_size is None:
            from .statistics import format_size
            _format_size = format_size
        state = "freed" if self.freed else f"{self.exports} exports"
        dev = "" if self.device is None else f" device={self.device}"
        return (
            f"<aml Buffer {self.area.backend}:{self.kind.value}{dev} ptr=0x{self.ptr:x} "
            f"size={_format_size(self.size)} {state}>"
        )

    # -- DLPack ------------------------------------------------------------------
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of the bytes (``uint8[size]``), never a copy.

        ``copy=True`` and a ``dl_device`` other than :meth:`__dlpack_device__` raise
        :class:`BufferError` (aml does not copy behind your back). ``stream`` is the
        consumer's stream: the area makes pending work visible to it first.
        """
        if copy:
            raise BufferError("aml buffers are exported without a copy; copy=True is not supported")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(
                f"this buffer lives on DLPack device {self.__dlpack_device__()}, not {tuple(dl_device)}"
            )
        self.area._dlpack_prepare(self, stream)
        versioned = max_version is not None and int(max_version[0]) >= 1
        return self._dlpack_capsule(versioned, False)

    @property
    def __cuda_array_interface__(self):
        """The CUDA Array Interface (version 3) of the bytes, for CUDA/HIP device,
        managed, pinned and mapped memory. Absent (AttributeError) elsewhere."""
        global _cuda_interface
        if self.freed:
            raise AMLValueError("this aml buffer was freed")
        if _cuda_interface is None:
            from .buffer import area_cuda_array_interface
            _cuda_interface = area_cuda_array_interface
        cai = _cuda_interface(self.area, self)
        if cai is None:
            raise AttributeError("__cuda_array_interface__")
        return cai
