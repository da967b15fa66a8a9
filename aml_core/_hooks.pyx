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
``slow_free``, which records an error (``hook.errors``) and returns 0 when it fails.

What a refusal becomes in the framework:

* PyTorch's process-wide allocator (``torch_malloc``): a C++ ``aml::out_of_memory`` (a
  ``std::runtime_error``) thrown out of the entry point, which PyTorch's C++ frames
  carry to its Python binding, where it is a ``RuntimeError`` with aml's message
  (``CUDAPluggableAllocator`` never checks malloc for NULL, so NULL would become a tensor
  at address 0). The frames between the throw and PyTorch's catch are this module's, in
  C++ with unwind tables, and PyTorch's own; no Cython function catches or converts
  it: Cython's ``noexcept`` on ``torch_malloc`` is about Python exceptions only and
  emits no C++ ``noexcept`` (checked in the generated code), and the message is built,
  with the GIL, in a function that returns before the throw, so no Python reference or
  GIL state is held across it.
* A MemPool's allocator (the slot entry points ``slot_entry_points``): NULL, which
  PyTorch's caching allocator checks (``cudaErrorMemoryAllocation``): it frees its cached
  blocks, retries, and raises ``torch.OutOfMemoryError`` itself. Nothing is thrown there,
  because the caching allocator calls its pool's allocator under its own lock.
* CuPy: ``cupy_malloc`` raises the pool's error to CuPy (a Python method).

Frees never throw: PyTorch calls them from deleters.
"""

cimport cython
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport uintptr_t

from ._capi cimport aml_is_finalizing
from ._kernel cimport PoolKernel, u64


cdef enum:
    MAX_DEVICES = 64

ctypedef void *(*slot_malloc_t)(int, Py_ssize_t, int, void *) noexcept nogil
ctypedef void (*slot_free_t)(int, void *, Py_ssize_t, int, void *) noexcept nogil

cdef extern from *:
    """
    #include <array>
    #include <cstddef>
    #include <cstdint>
    #include <functional>
    #include <stdexcept>
    #include <string>
    #include <utility>
    static inline void aml_count(long long *p, long long d) { __atomic_add_fetch(p, d, __ATOMIC_RELAXED); }

    /* A refusal of PyTorch's process-wide allocator: thrown through PyTorch's C++ frames,
       which make it a Python RuntimeError carrying what(). */
    namespace aml {
    class out_of_memory : public std::runtime_error {
      public:
        explicit out_of_memory(const std::string &what) : std::runtime_error(what) {}
    };
    }
    static thread_local std::string aml_oom_text;
    static void aml_set_oom(const char *text) { aml_oom_text = text; }
    [[noreturn]] static void aml_throw_oom(void) { throw aml::out_of_memory(aml_oom_text); }

    /* Call a PyTorch malloc entry point as PyTorch does: through a std::function of
       CUDAPluggableAllocator's type, in a try/catch of std::exception (the last catch of
       PyTorch's Python bindings). *thrown: 1 with the exception's what() in aml_caught. */
    typedef struct aml_stream_st *aml_stream_t; /* cudaStream_t's shape */
    static thread_local std::string aml_caught;
    static void *aml_call_catching(uintptr_t fn, Py_ssize_t size, int device, uintptr_t stream, int *thrown) {
        std::function<void *(size_t, int, aml_stream_t)> call =
            reinterpret_cast<void *(*)(size_t, int, aml_stream_t)>(fn);
        *thrown = 0;
        try {
            return call((size_t)size, device, reinterpret_cast<aml_stream_t>(stream));
        } catch (const std::exception &e) {
            *thrown = 1;
            aml_caught = e.what();
            return NULL;
        }
    }
    static const char *aml_caught_text(void) { return aml_caught.c_str(); }

    /* The MemPool slots: PyTorch's allocator signature has no user pointer, so each
       MemPool gets its own pair of C functions, which pass their slot's index on. */
    enum { AML_SLOTS = 64 };
    typedef void *(*aml_slot_malloc_impl_t)(int, Py_ssize_t, int, void *);
    typedef void (*aml_slot_free_impl_t)(int, void *, Py_ssize_t, int, void *);
    static aml_slot_malloc_impl_t aml_slot_malloc_impl = NULL;
    static aml_slot_free_impl_t aml_slot_free_impl = NULL;
    static void aml_set_slot_impl(aml_slot_malloc_impl_t m, aml_slot_free_impl_t f) {
        aml_slot_malloc_impl = m;
        aml_slot_free_impl = f;
    }
    template <int N> static void *aml_slot_malloc(Py_ssize_t size, int device, void *stream) {
        return aml_slot_malloc_impl(N, size, device, stream);
    }
    template <int N> static void aml_slot_free(void *ptr, Py_ssize_t size, int device, void *stream) {
        aml_slot_free_impl(N, ptr, size, device, stream);
    }
    template <std::size_t... I>
    static std::array<uintptr_t, 2 * sizeof...(I)> aml_make_slots(std::index_sequence<I...>) {
        return {{reinterpret_cast<uintptr_t>(&aml_slot_malloc<(int)I>)...,
                 reinterpret_cast<uintptr_t>(&aml_slot_free<(int)I>)...}};
    }
    static const std::array<uintptr_t, 2 * AML_SLOTS> aml_slots = aml_make_slots(std::make_index_sequence<AML_SLOTS>{});
    static uintptr_t aml_slot_malloc_addr(int i) { return aml_slots[i]; }
    static uintptr_t aml_slot_free_addr(int i) { return aml_slots[AML_SLOTS + i]; }
    """
    enum: AML_SLOTS  # MemPools bound at once (each needs its own pair of C functions)
    void aml_count(long long *p, long long d) nogil
    void aml_set_oom(const char *text) noexcept nogil
    void aml_throw_oom() nogil  # throws aml::out_of_memory: only at the end of torch_malloc
    void *aml_call_catching(uintptr_t fn, Py_ssize_t size, int device, uintptr_t stream, int *thrown) noexcept nogil
    const char *aml_caught_text() noexcept nogil
    void aml_set_slot_impl(slot_malloc_t m, slot_free_t f) noexcept
    uintptr_t aml_slot_malloc_addr(int i) noexcept nogil
    uintptr_t aml_slot_free_addr(int i) noexcept nogil


@cython.final
cdef class HookState:
    """HookState(kernel, slow_malloc, slow_free, raising_malloc=None, errors=None, label="GPU")
--

    What one installed hook's C entry points use: the pool kernel that serves hits (or
    None: every call takes the slow path), the Python slow paths, and the count of live
    allocations the framework holds from the hook (``live``). With ``errors`` (a list), a
    miss runs the kernel's slow path in C with the GIL (``hook_slow_alloc``,
    ``hook_slow_free``), appending a failure's exception there; the Python slow paths
    then serve only what the kernel declines (a closed pool, a log, a foreign pointer).
    ``label`` names the memory in an out-of-memory message ("CUDA", "HIP"); the last of
    ``errors`` is that message's cause."""

    cdef PyObject *kernel  # borrowed: self._kernel keeps it
    cdef object _kernel
    cdef object slow_malloc
    cdef object slow_free
    cdef object raising_malloc
    cdef list errors
    cdef readonly str label
    cdef readonly long long live
    cdef readonly long long fast_allocs
    cdef readonly long long fast_frees

    def __init__(self, kernel, slow_malloc, slow_free, raising_malloc=None, list errors=None, str label="GPU"):
        if kernel is not None and not isinstance(kernel, PoolKernel):
            raise TypeError("kernel must be a PoolKernel or None")
        self.errors = errors
        self.label = label
        self.raising_malloc = raising_malloc
        self._kernel = kernel
        if kernel is None:
            self.kernel = NULL
        else:
            # From now on this kernel has users without the GIL: its hits take the mutex.
            (<PoolKernel>kernel)._nogil_users = True
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
    # Cython's noexcept: no Python exception leaves it. A refusal throws the C++
    # aml::out_of_memory at the end (see the module doc), never NULL for a size.
    cdef PyObject *st = _torch_state(device)
    cdef void *p = NULL
    if size <= 0:
        return NULL  # nothing asked: PyTorch keeps no pointer
    if st != NULL:
        p = _hook_malloc(<HookState>st, <size_t>size, device, stream != NULL, <u64><uintptr_t>stream)
        if p != NULL:
            return p
    _torch_oom(st, size, device)  # the message, in C++; the GIL taken and given back in there
    aml_throw_oom()
    return NULL  # not reached


cdef void _torch_oom(PyObject *st, Py_ssize_t size, int device) noexcept nogil:
    """Set the out-of-memory message of this thread's next throw."""
    if aml_is_finalizing():
        aml_set_oom(b"out of memory: aml refused a PyTorch allocation while the interpreter shut down")
        return
    with gil:
        _torch_oom_text(<object>st if st != NULL else None, size, device)


cdef void _torch_oom_text(object st, Py_ssize_t size, int device) noexcept:
    cdef bytes text
    try:
        if st is None:
            _torch_refuse("malloc", device, size)
            cause = "this hook serves no pool for that device (see hook.errors)"
            label = "GPU"
        else:
            errors = (<HookState>st).errors
            cause = repr(errors[len(errors) - 1]) if errors else "refused (see hook.errors)"
            label = (<HookState>st).label
        text = (
            f"{label} out of memory. aml could not allocate {size} bytes on device {device} "
            f"for PyTorch: {cause}"
        ).encode("utf-8", "replace")
        aml_set_oom(text)
    except BaseException:
        aml_set_oom(b"out of memory: aml refused a PyTorch allocation")


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
    benchmarks); returns the address; a refusal (the entry point's C++ throw) is a
    RuntimeError with its message, as PyTorch raises it."""
    return call_entry_malloc(<uintptr_t>&torch_malloc, size, device, stream)


def call_entry_malloc(uintptr_t address, size, device, stream=0):
    """Call the malloc entry point at ``address`` (``void *(ssize_t size, int device,
    cudaStream_t stream)``) as ``CUDAPluggableAllocator`` does: through a
    ``std::function`` of its type, without the GIL, in a C++ try/catch of
    ``std::exception`` as PyTorch's bindings have; returns the address (0: NULL). A C++
    exception thrown by the entry point is a RuntimeError carrying its ``what()``, as
    PyTorch raises it: never through ctypes, whose C frames cannot carry one."""
    cdef void *p
    cdef Py_ssize_t n = size
    cdef int dev = device
    cdef uintptr_t s = stream or 0
    cdef int thrown = 0
    with nogil:
        p = aml_call_catching(address, n, dev, s, &thrown)
    if thrown:
        raise RuntimeError(aml_caught_text().decode("utf-8", "replace"))
    return <uintptr_t>p


def call_entry_free(uintptr_t address, ptr, size, device, stream=0):
    """Call the free entry point at ``address`` (``void (void *ptr, ssize_t size, int
    device, cudaStream_t stream)``) without the GIL, as PyTorch does (frees never throw)."""
    cdef uintptr_t p = ptr
    cdef Py_ssize_t n = size
    cdef int dev = device
    cdef uintptr_t s = stream or 0
    cdef void (*free_fn)(void *, Py_ssize_t, int, void *) noexcept nogil
    free_fn = <void (*)(void *, Py_ssize_t, int, void *) noexcept nogil>address
    with nogil:
        free_fn(<void *>p, n, dev, <void *>s)


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


# -- MemPool slots ----------------------------------------------------------------------------
# torch.cuda.MemPool(allocator) over an aml pool (aml_core/gpu/torch_pool.py): PyTorch's
# caching allocator calls its pool's allocator for whole segments (raw_alloc /
# raw_delete) under its own lock, and checks malloc for NULL (cudaErrorMemoryAllocation:
# it frees its cache, retries, then raises torch.OutOfMemoryError). So a slot's malloc
# returns NULL on refusal and never throws. Each slot is one pair of C functions
# (PyTorch's signature has no user pointer) and one HookState, owned here (a reference
# taken by bind_slot, given back by unbind_slot once PyTorch holds nothing of it).
cdef PyObject *_slots[AML_SLOTS]
cdef int _slot_device[AML_SLOTS]  # the device the slot's pool serves (-1: any)


cdef void *_slot_malloc(int slot, Py_ssize_t size, int device, void *stream) noexcept nogil:
    cdef PyObject *st = _slots[slot] if 0 <= slot < AML_SLOTS else NULL
    if size <= 0:
        return NULL
    if st == NULL:
        return NULL  # an unbound slot: PyTorch raises its out of memory (cannot happen: see unbind_slot)
    if _slot_device[slot] >= 0 and device != _slot_device[slot]:
        if not aml_is_finalizing():
            with gil:
                _slot_wrong_device(<object>st, slot, device, size)
        return NULL
    return _hook_malloc(<HookState>st, <size_t>size, device, stream != NULL, <u64><uintptr_t>stream)


cdef void _slot_free(int slot, void *ptr, Py_ssize_t size, int device, void *stream) noexcept nogil:
    cdef PyObject *st = _slots[slot] if 0 <= slot < AML_SLOTS else NULL
    if ptr == NULL or st == NULL:
        return
    _hook_free(<HookState>st, ptr, device, stream != NULL, <u64><uintptr_t>stream)


cdef void _slot_wrong_device(object st, int slot, int device, Py_ssize_t size) noexcept:
    try:
        errors = (<HookState>st).errors
        if errors is not None:
            errors.append(
                _value_error(
                    f"PyTorch asked this MemPool for {size} bytes on device {device}; "
                    f"its aml pool serves device {_slot_device[slot]}"
                )
            )
    except BaseException:
        pass


def _value_error(text):
    from .errors import AMLValueError

    return AMLValueError(text)


aml_set_slot_impl(&_slot_malloc, &_slot_free)


def bind_slot(HookState state not None, int device=-1):
    """Bind a free slot to ``state`` for a MemPool whose pool serves ``device`` (-1: any);
    returns the slot's index (None: all AML_SLOTS are bound)."""
    cdef int i
    for i in range(AML_SLOTS):
        if _slots[i] == NULL:
            Py_INCREF(state)
            _slot_device[i] = device
            _slots[i] = <PyObject *>state
            return i
    return None


def unbind_slot(int slot):
    """Give slot ``slot`` back (its state's reference too): only once PyTorch holds no
    block of it and can call it no more (its MemPool destroyed, its segments freed)."""
    if not 0 <= slot < AML_SLOTS or _slots[slot] == NULL:
        raise ValueError(f"slot {slot} is not bound")
    st = <object>_slots[slot]
    _slots[slot] = NULL
    Py_DECREF(st)


def slot_state(int slot):
    """The HookState bound to ``slot`` (None: unbound)."""
    if not 0 <= slot < AML_SLOTS or _slots[slot] == NULL:
        return None
    return <object>_slots[slot]


def slot_entry_points(int slot):
    """The addresses of slot ``slot``'s C functions: (malloc, free), for
    ``torch._C._cuda_customAllocator``."""
    if not 0 <= slot < AML_SLOTS:
        raise ValueError(f"a slot is in 0..{AML_SLOTS - 1}")
    return (aml_slot_malloc_addr(slot), aml_slot_free_addr(slot))


SLOTS = AML_SLOTS
