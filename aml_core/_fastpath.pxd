# The fast-path interface an area calls (aml_core/_fastpath.pyx says the contract).
from ._buffer cimport AreaBase, BufferBase


cdef class FastPath:
    cdef BufferBase take(self, AreaBase area, object n_obj, Py_ssize_t n, bint has_stream, unsigned long long stream)
    cdef bint give(self, AreaBase area, BufferBase buf, bint has_stream, unsigned long long stream) except -1
    cdef bint can_give(self, AreaBase area, BufferBase buf) noexcept
    cdef int installed(self, AreaBase area) except -1
