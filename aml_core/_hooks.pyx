# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, binding=True, embedsignature.format=clinic
# distutils: language = c++
"""The compiled framework hooks: C entry points that PyTorch and CuPy call for every
allocation, served by a pool's kernel (aml_core/_kernel.pyx) with no GIL and no Python
object (aml_core/gpu/hooks.py installs them and documents the rules).

PyTorch (``CUDAPluggableAllocator``, through ``torch._C._cuda_customAllocator``):
``void *malloc(ssize_t size, int device, cudaStream_t stream)`` and
``void free(void *ptr, ssize_t size, int device, cudaStream_t stream)``; one kernel per
device (``set_torch``). CuPy (``cupy.cuda.memory.CFunctionAllocator``):
``void *malloc(void *param, size_t size, int device)`` and
``void free(void *param, void *ptr, int device)``, ``param`` a :class:`HookState`.

A hit of the kernel runs in C. Anything else — a miss (a new slab), a stream hand-over,
a closed pool, an area that is not a pool, a pointer the kernel did not hand out, a
device without a pool — takes the GIL and calls the hook's Python ``slow_malloc`` /
``slow_free``, which records an error and returns 0 (PyTorch's and CuPy's out of
memory) when it fails. Nothing here raises into the framework.
"""

cimport cython
from cpython.object cimport PyObject
from libc.stdint cimport uintptr_t

from ._kernel cimport PoolKernel, u64


cdef enum:
    MAX_DEVICES = 64

cdef extern from *:
    """
    static inline void aml_count(long long *p, long long d) { __atomic_add_fetch(p, d, __ATOMIC_RELAXED); }
    """
    void aml_count(long long *p, long long d) nogil


@cython.final
cdef class HookState:
    """HookState(kernel, slow_malloc, slow_free)
--

    What one installed hook's C entry points use: the pool kernel that serves hits (or
    None: every call takes the slow path), the Python slow paths, and the count of live
    allocations the framework holds from the hook (``live``)."""

    cdef PyObject *kernel  # borrowed: self._kernel keeps it
    cdef object _kernel
    cdef object slow_malloc
    cdef object slow_free
    cdef readonly long long live
    cdef readonly long long fast_allocs
    cdef readonly long long fast_frees

    def __init__(self, kernel, slow_malloc, slow_free):
        if kernel is not None and not isinstance(kernel, PoolKernel):
            raise TypeError("kernel must be a PoolKernel or None")
        self._kernel = kernel
        if kernel is None:
            self.kernel = NULL
        else:
            self.kernel = <PyObject *>kernel
        self.slow_malloc = slow_malloc
        self.slow_free = slow_free

    @property
    def address(self):
        """This state's address: CuPy's ``param``."""
        return <uintptr_t><void *>self


cdef void *_hook_malloc(HookState st, size_t size, int device, bint has_stream, u64 stream) noexcept nogil:
    cdef u64 addr = 0
    if st.kernel != NULL and (<PoolKernel>st.kernel).hook_alloc(size, has_stream, stream, &addr) == 0:
        aml_count(&st.live, 1)  # atomic: hook threads run without the GIL
        aml_count(&st.fast_allocs, 1)
        return <void *><uintptr_t>addr
    with gil:
        try:
            addr = st.slow_malloc(size, device, stream if has_stream else None)
        except BaseException:
            addr = 0  # the slow path records its errors; this is the last resort
        if addr:
            aml_count(&st.live, 1)
    return <void *><uintptr_t>addr


cdef void _hook_free(HookState st, void *ptr, int device, bint has_stream, u64 stream) noexcept nogil:
    if st.kernel != NULL and (<PoolKernel>st.kernel).hook_free(<u64><uintptr_t>ptr, has_stream, stream) == 0:
        aml_count(&st.live, -1)
        aml_count(&st.fast_frees, 1)
        return
    with gil:
        try:
            if st.slow_free(<u64><uintptr_t>ptr, device, stream if has_stream else None):
                aml_count(&st.live, -1)
        except BaseException:
            pass


# -- PyTorch ------------------------------------------------------------------------------
cdef PyObject *_torch[MAX_DEVICES]  # borrowed: _torch_states keeps them
cdef PyObject *_torch_default = NULL  # the state of devices without their own
_torch_states = {}


cdef void *torch_malloc(Py_ssize_t size, int device, void *stream) noexcept nogil:
    cdef PyObject *st = _torch_state(device)
    if st == NULL or size <= 0:
        with gil:
            _torch_refuse("malloc", device, size)
        return NULL
    return _hook_malloc(<HookState>st, <size_t>size, device, stream != NULL, <u64><uintptr_t>stream)


cdef void torch_free(void *ptr, Py_ssize_t size, int device, void *stream) noexcept nogil:
    cdef PyObject *st = _torch_state(device)
    if st == NULL:
        with gil:
            _torch_refuse("free", device, size)
        return
    _hook_free(<HookState>st, ptr, device, stream != NULL, <u64><uintptr_t>stream)


cdef inline PyObject *_torch_state(int device) noexcept nogil:
    if 0 <= device < MAX_DEVICES and _torch[device] != NULL:
        return _torch[device]
    return _torch_default


cdef void _torch_refuse(str what, int device, Py_ssize_t size) noexcept:
    try:
        report = _torch_states.get("report")
        if report is not None:
            report(what, device, size)
    except BaseException:
        pass


def set_torch(states, default, report):
    """Install PyTorch's states: ``states`` maps a device index (0..63) to its
    HookState, ``default`` serves the other devices (or None: refused), ``report(what,
    device, size)`` records a refused call. Once per process (PyTorch keeps its
    allocator)."""
    cdef int i
    for device, st in states.items():
        if not isinstance(st, HookState) or not (0 <= device < MAX_DEVICES):
            raise ValueError(f"device {device!r} needs a HookState and an index in 0..{MAX_DEVICES - 1}")
    if default is not None and not isinstance(default, HookState):
        raise TypeError("default must be a HookState or None")
    _torch_states.clear()
    _torch_states.update({("device", d): st for d, st in states.items()})
    _torch_states["default"] = default
    _torch_states["report"] = report
    global _torch_default
    for i in range(MAX_DEVICES):
        _torch[i] = NULL
    for device, st in states.items():
        _torch[<int>device] = <PyObject *>st
    if default is None:
        _torch_default = NULL
    else:
        _torch_default = <PyObject *>default


def torch_entry_points():
    """The addresses of the PyTorch entry points: (malloc, free)."""
    return (<uintptr_t>&torch_malloc, <uintptr_t>&torch_free)


# -- CuPy ---------------------------------------------------------------------------------
cdef void *cupy_malloc(void *param, size_t size, int device) noexcept nogil:
    if size == 0:
        size = 1  # CuPy asks for 0 bytes for empty arrays: one granule, freed as usual
    return _hook_malloc(<HookState>param, size, device, False, 0)


cdef void cupy_free(void *param, void *ptr, int device) noexcept nogil:
    _hook_free(<HookState>param, ptr, device, False, 0)


def cupy_entry_points():
    """The addresses of the CuPy entry points: (malloc, free), for
    ``cupy.cuda.memory.CFunctionAllocator(state.address, malloc, free, state)``."""
    return (<uintptr_t>&cupy_malloc, <uintptr_t>&cupy_free)


def call_malloc(which, HookState st, size, device, stream=0):
    """Call an entry point as the framework would (tests, benchmarks): ``which`` is
    "torch" or "cupy"; returns the address (0: out of memory)."""
    cdef void *p
    cdef Py_ssize_t n = size
    cdef int dev = device
    cdef uintptr_t s = stream
    if which == "torch":
        with nogil:
            p = torch_malloc(n, dev, <void *>s)
    else:
        with nogil:
            p = cupy_malloc(<void *>st, <size_t>n, dev)
    return <uintptr_t>p


def call_free(which, HookState st, ptr, size, device, stream=0):
    """Call a free entry point as the framework would (tests, benchmarks)."""
    cdef uintptr_t p = ptr
    cdef Py_ssize_t n = size
    cdef int dev = device
    cdef uintptr_t s = stream
    if which == "torch":
        with nogil:
            torch_free(<void *>p, n, dev, <void *>s)
    else:
        with nogil:
            cupy_free(<void *>st, <void *>p, dev)
