# The fast-path interface an area calls (aml_core/_fastpath.pyx says the contract).
from ._buffer cimport AreaBase, BufferBase


cdef class FastPath:
    cdef BufferBase take(self, AreaBase area, object n_obj)
    cdef BufferBase take_with(self, AreaBase area, object n_obj, object options)
    cdef bint give(self, AreaBase area, BufferBase buf) except -1
    cdef bint give_on(self, AreaBase area, BufferBase buf, unsigned long long stream) except -1
    cdef bint can_give(self, AreaBase area, BufferBase buf) noexcept
    cdef int installed(self, AreaBase area) except -1
