# The parts of CPython's C API that aml's compiled modules (_buffer, _allocator,
# _pool_cache) declare their own way: without exception checks (the callers test and
# clear errors themselves). Declarations only: nothing is compiled from this file.
from cpython.object cimport PyObject

cdef extern from "Python.h":
    Py_ssize_t _as_ssize "PyLong_AsSsize_t"(object) noexcept
    unsigned long long _as_ull "PyLong_AsUnsignedLongLong"(object) noexcept
    PyObject *PyErr_Occurred() noexcept
    void PyErr_Clear() noexcept
    const Py_ssize_t PY_SSIZE_T_MAX
