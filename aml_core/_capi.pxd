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

# Whether the interpreter is shutting down (no Python code may run, modules are torn down).
cdef extern from *:
    """
    #if PY_VERSION_HEX >= 0x030D0000
    #define aml_is_finalizing() Py_IsFinalizing()
    #else
    #define aml_is_finalizing() _Py_IsFinalizing()
    #endif
    """
    int aml_is_finalizing() noexcept nogil
