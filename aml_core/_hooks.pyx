# cython: language_level=3, boundscheck=False, wraparound=False, embedsignature=True, binding=True, embedsignature.format=clinic
# distutils: language = c++
"""The compiled framework hooks: C entry points that PyTorch and CuPy call for every
allocation, served by a pool's kernel (aml_core/_kernel.pyx) with no GIL and no Python
object (aml_core/gpu/hooks.py installs them and documents the rules).

PyTorch (``CUDAPluggableAllocator``, through ``torch._C._cuda_customAllocator``):
``void *malloc(ssize_t size, int device, cudaStream_t stream)`` and
``void free(void *ptr, ssize_t size, int device, cudaStream_t stream)``; one kernel per
device (``set_torch``). CuPy (``cupy.cuda.memory.PythonFunctionAllocator``): the compiled
methods ``HookState.cupy_malloc(size, device)`` and ``cupy_free(ptr, device)``, which
CuPy calls for each of its memory objects; CuPy's ``CFunctionAllocator`` is not used
because CuPy does not check its malloc for NULL (a failure would become a NULL pointer
that kernels then write through), where a Python-level malloc may raise the pool's error.

A hit of the kernel runs in C. Anything else — a miss (a new slab), a stream hand-over,
a closed pool, an area that is not a pool, a pointer the kernel did not hand out, a
device without a pool — takes the GIL and calls the hook's Python ``slow_malloc`` /
``slow_free``, which records an error and returns 0 (PyTorch's and CuPy's out of
memory) when it fails. Nothing here raises into the framework.
"""

cimport cython
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from libc.stdint cimport uintptr_t

from ._capi cimport aml_is_finalizing
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
    """HookState(kernel, slow_malloc, slow_free, raising_malloc=None, errors=None)
--

    What one installed hook's C entry points use: the pool kernel that serves hits (or
    None: every call takes the slow path), the Python slow paths, and the count of live
    allocations the framework holds from the hook (``live``). With ``errors`` (a list), a
    miss runs the kernel's slow path in C with the GIL (``hook_slow_alloc``,
    ``hook_slow_free``), appending a failure's exception there; the Python slow paths
    then serve only what the kernel declines (a closed pool, a log, a foreign pointer)."""

    cdef PyObject *kernel  # borrowed: self._kernel keeps it
    cdef object _kernel
    cdef object slow_malloc
    cdef object slow_free
    cdef object raising_malloc
    cdef list errors
    cdef readonly long long live
    cdef readonly long long fast_allocs
    cdef readonly long long fast_frees

    def __init__(self, kernel, slow_malloc, slow_free, raising_malloc=None, list errors=None):
        if kernel is not None and not isinstance(kernel, PoolKernel):
            raise TypeError("kernel must be a PoolKernel or None")
        self.errors = errors
        self.raising_malloc = raising_malloc
        self._kernel = kernel
        if kernel is None:
            self.kernel = NULL
        else:
            self.kernel = <PyObject *>kernel
        self.slow_malloc = slow_malloc
        self.slow_free = slow_free

    def cupy_malloc(self, Py_ssize_t size, int device):
        """CuPy's malloc (PythonFunctionAllocator): a hit in C, else the pool's slow path,
        whose error is raised to CuPy."""
        cdef u64 addr = 0
        cdef int status = 1
        if size <= 0:
            raise ValueError(f"CuPy asked for {size} bytes")
        if self.kernel != NULL:
            with nogil:
                status = (<PoolKernel>self.kernel).hook_alloc(<size_t>size, False, 0, &addr)
        if status != 0:
            addr = self.raising_malloc(size, device)
        aml_count(&self.live, 1)
        if status == 0:
            aml_count(&self.fast_allocs, 1)
        return addr

    def cupy_free(self, u64 ptr, int device):
        """CuPy's free (PythonFunctionAllocator): never raises (CuPy calls it from a
        deallocator); a failure is kept by the slow path."""
        _hook_free(self, <void *><uintptr_t>ptr, device, False, 0)


cdef void *_hook_malloc(HookState st, size_t size, int device, bint has_stream, u64 stream) noexcept nogil:
    cdef u64 addr = 0
    if st.kernel != NULL and (<PoolKernel>st.kernel).hook_alloc(size, has_stream, stream, &addr) == 0:
        aml_count(&st.live, 1)  # atomic: hook threads run without the GIL
        aml_count(&st.fast_allocs, 1)
        return <void *><uintptr_t>addr
    if aml_is_finalizing():
        return NULL  # no Python code any more
    cdef int status = 1
    with gil:
        if st.kernel != NULL and st.errors is not None:
            status = (<PoolKernel>st.kernel).hook_slow_alloc(size, has_stream, stream, &addr, st.errors)
        if status == 1:
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
    if aml_is_finalizing():
        return  # the interpreter is gone: the process's exit returns the memory
    cdef int status = 1
    with gil:
        if st.kernel != NULL and st.errors is not None:
            status = (<PoolKernel>st.kernel).hook_slow_free(<u64><uintptr_t>ptr, has_stream, stream, st.errors)
        if status == 0:
            aml_count(&st.live, -1)
        elif status == 1:
            try:
                if st.slow_free(<u64><uintptr_t>ptr, device, stream if has_stream else None):
                    aml_count(&st.live, -1)
            except BaseException:
                pass


# -- PyTorch ------------------------------------------------------------------------------
cdef PyObject *_torch[MAX_DEVICES]  # immortal (set_torch): never freed
cdef PyObject *_torch_default = NULL  # the state of devices without their own
_torch_report = None  # report(what, device, size): a call no state serves


cdef void *torch_malloc(Py_ssize_t size, int device, void *stream) noexcept nogil:
    cdef PyObject *st = _torch_state(device)
    if size <= 0:
        return NULL  # nothing asked: PyTorch keeps no pointer
    if st == NULL:
        if not aml_is_finalizing():
            with gil:
                _torch_refuse("malloc", device, size)
        return NULL
    return _hook_malloc(<HookState>st, <size_t>size, device, stream != NULL, <u64><uintptr_t>stream)


cdef void torch_free(void *ptr, Py_ssize_t size, int device, void *stream) noexcept nogil:
    cdef PyObject *st = _torch_state(device)
    if ptr == NULL:
        return  # PyTorch's tensor of a refused allocation: nothing was handed out
    if st == NULL:
        if not aml_is_finalizing():
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
        if _torch_report is not None:
            _torch_report(what, device, size)
    except BaseException:
        pass


def set_torch(states, default, report):
    """Install PyTorch's states: ``states`` maps a device index (0..63) to its
    HookState, ``default`` serves the other devices (or None: refused), ``report(what,
    device, size)`` records a refused call. Once per process: PyTorch keeps its
    allocator and calls it until the process ends (its tensors are freed after the
    interpreter is torn down), so each state, and the kernel it serves, is made
    immortal here (a reference never given back)."""
    cdef int i
    for device, st in states.items():
        if not isinstance(st, HookState) or not (0 <= device < MAX_DEVICES):
            raise ValueError(f"device {device!r} needs a HookState and an index in 0..{MAX_DEVICES - 1}")
    if default is not None and not isinstance(default, HookState):
        raise TypeError("default must be a HookState or None")
    for st in list(states.values()) + ([default] if default is not None else []):
        Py_INCREF(st)  # immortal: see the docstring
    global _torch_default, _torch_report
    _torch_report = report
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


def call_torch_malloc(size, device, stream=0):
    """Call PyTorch's malloc entry point as PyTorch does, without the GIL (tests,
    benchmarks); returns the address (0: out of memory)."""
    cdef void *p
    cdef Py_ssize_t n = size
    cdef int dev = device
    cdef uintptr_t s = stream
    with nogil:
        p = torch_malloc(n, dev, <void *>s)
    return <uintptr_t>p


def call_torch_free(ptr, size, device, stream=0):
    """Call PyTorch's free entry point as PyTorch does, without the GIL."""
    cdef uintptr_t p = ptr
    cdef Py_ssize_t n = size
    cdef int dev = device
    cdef uintptr_t s = stream
    with nogil:
        torch_free(<void *>p, n, dev, <void *>s)


def call_hook_malloc(HookState state not None, size, stream=None):
    """Call a hook state's malloc as PyTorch's entry point does (the same C function,
    without the GIL), on ``stream`` (a handle; None: host order), for any state, without
    installing it for PyTorch (tests: the state machines); returns the address (0: the
    slow path refused, its error recorded by the state's slow_malloc)."""
    cdef void *p
    cdef size_t n = size
    cdef bint has = stream is not None
    cdef u64 s = stream if has else 0
    with nogil:
        p = _hook_malloc(state, n, 0, has, s)
    return <uintptr_t>p


def call_hook_free(HookState state not None, ptr, stream=None):
    """Call a hook state's free as PyTorch's entry point does (see call_hook_malloc)."""
    cdef void *p = <void *><uintptr_t>(<u64>ptr)
    cdef bint has = stream is not None
    cdef u64 s = stream if has else 0
    with nogil:
        _hook_free(state, p, 0, has, s)
