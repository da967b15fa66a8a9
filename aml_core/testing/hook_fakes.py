"""Stand-ins for CuPy and PyTorch, for testing the allocator hooks
(:mod:`aml_core.gpu.hooks`) of a GPU backend on any machine.

Each fake has only the names the hooks use and keeps what it is given, so a test can check
what was installed; put it in ``sys.modules`` in place of the real library::

    with faked("cupy") as cupy:
        hook = aml_cuda.use_with_cupy(FakeDeviceArea())
        assert cupy.state["allocator"] == hook.malloc

(:func:`faked` also gives each block a fresh hook state: aml keeps one CuPy hook and one
PyTorch hook per process.)

:class:`FakeDeviceArea` is host memory that calls itself device memory: what a hook sees of
a GPU area, with memory a test may touch.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any, Literal

from .. import _hooks
from ..gpu import hooks
from ..host import HostArea
from ..specs import Kind

__all__ = ["FakeDeviceArea", "entry_points", "fake_cupy", "fake_torch", "faked", "torch_entry_points"]


class FakeDeviceArea(HostArea):
    """Host memory that calls itself device memory (no arguments: a default host area)."""

    def __init__(self) -> None:
        super().__init__()
        self.kind = Kind.DEVICE


def fake_cupy() -> types.ModuleType:
    """A ``cupy`` module with the names the CuPy hooks use. ``state`` holds the installed
    ``allocator`` and ``pinned`` allocator; ``defaults`` CuPy's own two;
    ``cuda.get_allocator()`` is the calling thread's ``using_allocator`` one, else the
    installed one (CuPy's rule)."""
    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    memory = types.ModuleType("cupy.cuda.memory")

    class Memory:
        def __init__(self, size: int) -> None:
            self.ptr = 0
            self.size = size

    class UnownedMemory:
        def __init__(self, ptr: int, size: int, owner: Any, device_id: int) -> None:
            self.ptr, self.size, self.owner, self.device_id = ptr, size, owner, device_id

    class MemoryPointer:
        def __init__(self, mem: Any, offset: int) -> None:
            self.mem = mem
            self.ptr = mem.ptr + offset

    class PinnedMemoryPointer:
        def __init__(self, mem: Any, offset: int) -> None:
            self.mem = mem
            self.ptr = mem.ptr + offset
            self.size = mem.size - offset

    class PythonFunctionAllocatorMemory:
        """CuPy's memory of a Python-function allocator: freed through it when dropped."""

        def __init__(self, size: int, device_id: int, malloc: Any, free: Any) -> None:
            self.size, self.device_id, self.ptr = size, device_id, 0
            self._free = free
            if size > 0:
                self.ptr = malloc(size, device_id)

        def __del__(self) -> None:
            if self.ptr:
                self._free(self.ptr, self.device_id)

    class PythonFunctionAllocator:
        def __init__(self, malloc_func: Any, free_func: Any) -> None:
            self._malloc, self._free = malloc_func, free_func

        def malloc(self, size: int) -> Any:
            return MemoryPointer(PythonFunctionAllocatorMemory(size, 0, self._malloc, self._free), 0)

    def default_allocator(size: int) -> Any:
        return ("default", size)

    def default_pinned(size: int) -> Any:
        return ("default pinned", size)

    state: dict[str, Any] = {"allocator": default_allocator, "pinned": None}
    local = threading.local()  # CuPy's thread-local allocator (using_allocator)

    def get_allocator() -> Any:
        allocator = getattr(local, "allocator", None)
        return state["allocator"] if allocator is None else allocator

    @contextlib.contextmanager
    def using_allocator(allocator: Any = None) -> Iterator[None]:
        """CuPy's: the thread's allocator for the block, the previous one back after it."""
        previous = getattr(local, "allocator", None)
        local.allocator = allocator if allocator is not None else ("raw", None)
        try:
            yield
        finally:
            local.allocator = previous

    names: dict[types.ModuleType, dict[str, Any]] = {
        memory: {"Memory": Memory, "PythonFunctionAllocator": PythonFunctionAllocator},
        cuda: {
            "memory": memory,
            "UnownedMemory": UnownedMemory,
            "MemoryPointer": MemoryPointer,
            "PinnedMemoryPointer": PinnedMemoryPointer,
            "runtime": types.SimpleNamespace(getDevice=lambda: 0),
            "get_allocator": get_allocator,
            "using_allocator": using_allocator,
            "set_allocator": lambda f: state.__setitem__("allocator", f),
            "set_pinned_memory_allocator": lambda f: state.__setitem__("pinned", f),
        },
        cupy: {
            "cuda": cuda,
            "get_default_pinned_memory_pool": lambda: types.SimpleNamespace(malloc=default_pinned),
            "state": state,
            "defaults": (default_allocator, default_pinned),
        },
    }
    for module, attributes in names.items():
        for name, value in attributes.items():
            setattr(module, name, value)
    return cupy


def fake_torch() -> types.ModuleType:
    """A ``torch`` module with the names the PyTorch hook uses. ``state["current"]`` is
    the installed allocator (``("custom", malloc address, free address)``); set
    ``state["initialized"]`` to make PyTorch refuse a new allocator."""
    torch = types.ModuleType("torch")
    state: dict[str, Any] = {"current": None, "initialized": False}

    class CUDAPluggableAllocator:
        def __init__(self, *args: Any) -> None:  # the hook bypasses the .so loading
            raise AssertionError("not called by the hook")

    def custom_allocator(alloc: int, free: int) -> tuple[str, int, int]:
        return ("custom", alloc, free)

    def change_current_allocator(allocator: Any) -> None:
        if state["initialized"]:
            raise RuntimeError("Can't swap an already initialized allocator")
        state["current"] = allocator._allocator

    memory = types.SimpleNamespace(
        CUDAPluggableAllocator=CUDAPluggableAllocator,
        change_current_allocator=change_current_allocator,
        get_allocator_backend=lambda: state["backend"],
    )
    cuda = types.SimpleNamespace(memory=memory)
    setattr(torch, "cuda", cuda)  # noqa: B010  (a module's new attribute)
    setattr(torch, "_C", types.SimpleNamespace(_cuda_customAllocator=custom_allocator))  # noqa: B010
    setattr(torch, "state", state)  # noqa: B010
    setattr(torch, "__version__", "2.13.0")  # noqa: B010
    _fake_mem_pools(torch, cuda, state)
    return torch


class _Segment:
    """A segment of a fake MemPool: what PyTorch's caching allocator got from the pool's
    allocator (one tensor in it at most, in this model)."""

    __slots__ = ("ptr", "size", "used")

    def __init__(self, ptr: int, size: int) -> None:
        self.ptr, self.size, self.used = ptr, size, True


def _fake_mem_pools(torch: types.ModuleType, cuda: Any, state: dict[str, Any]) -> None:
    """``torch.cuda.MemPool``, ``use_mem_pool``, ``empty_cache``, ``device``,
    ``current_device`` and ``torch.OutOfMemoryError``, modelling what PyTorch's caching
    allocator does with a MemPool's allocator (c10/cuda/CUDACachingAllocator.cpp, 2.8 on):

    * ``cuda.empty(size)`` is ``torch.empty(size, device="cuda")``: inside a
      ``use_mem_pool`` scope a free cached segment of the pool, else a new segment of at
      least 2 MiB from the pool's allocator (its C entry point, called as PyTorch calls
      it); NULL makes it release the freeable pools' cached segments and retry, then
      raise ``torch.OutOfMemoryError``. Outside a scope: PyTorch's own memory (a tuple).
    * a tensor dropped leaves its segment cached in its pool (not given back);
    * ``~MemPool`` (the object collected) releases the pool (use count down) and empties
      its cache: the free segments go back through the allocator's free;
    * ``empty_cache()`` empties only pools whose use count is 0 (pytorch#145168: a pool
      alive, or in a scope, keeps its segments).

    ``state["pools"]`` maps a MemPool's id to its record (``segments``, ``use_count``);
    ``state["device"]`` is the current device, ``state["backend"]`` the allocator
    backend. Scopes are per process here (PyTorch's are per thread), and only the
    innermost is modelled (which of nested scopes PyTorch serves is not claimed)."""
    state.update(pools={}, active={}, device=0, backend="native", next_id=1)

    class OutOfMemoryError(RuntimeError):
        pass

    def release(record: dict[str, Any]) -> None:
        for seg in [s for s in record["segments"] if not s.used]:
            record["free"](seg.ptr, seg.size, record["device"], None)
            record["segments"].remove(seg)
        if record["use_count"] == 0 and not record["segments"]:
            state["pools"].pop(record["id"], None)

    class MemPool:
        def __init__(self, allocator: Any = None, use_on_oom: bool = False, no_split: bool = False) -> None:
            tag, malloc, free = allocator
            assert tag == "custom", "a MemPool over something else than _cuda_customAllocator"
            self.id = (0, state["next_id"])
            state["next_id"] += 1
            call_malloc, call_free = entry_points(malloc, free)
            self._record: dict[str, Any] = {
                "id": self.id, "device": state["device"], "malloc": call_malloc, "free": call_free,
                "segments": [], "use_count": 1,
            }  # fmt: skip
            state["pools"][self.id] = self._record

        def use_count(self) -> int:
            return int(self._record["use_count"])

        def __del__(self) -> None:  # ~MemPool: releasePool, emptyCache(id)
            self._record["use_count"] -= 1
            release(self._record)

    @contextlib.contextmanager
    def use_mem_pool(pool: MemPool, device: int | None = None) -> Iterator[None]:
        index = state["device"] if device is None else device
        pool._record["use_count"] += 1
        state["active"].setdefault(index, []).append(pool._record)
        try:
            yield
        finally:
            state["active"][index].pop()
            pool._record["use_count"] -= 1

    class Tensor:
        def __init__(self, seg: _Segment) -> None:
            self._seg = seg

        def data_ptr(self) -> int:
            return self._seg.ptr

        def __del__(self) -> None:
            self._seg.used = False  # cached in its pool, not given back

    def empty(size: int) -> Any:
        scopes = state["active"].get(state["device"])
        if not scopes:
            return ("PyTorch's own memory", size)
        record = scopes[-1]
        for seg in record["segments"]:
            if not seg.used and seg.size >= size:
                seg.used = True
                return Tensor(seg)
        seg_size = max(2 << 20, (size + (2 << 20) - 1) & ~((2 << 20) - 1))
        ptr = record["malloc"](seg_size, state["device"], None)
        if ptr is None:  # cudaErrorMemoryAllocation: release what can go, retry once
            empty_cache()
            ptr = record["malloc"](seg_size, state["device"], None)
        if ptr is None:
            raise OutOfMemoryError(f"CUDA out of memory. Tried to allocate {seg_size} bytes")
        seg = _Segment(ptr, seg_size)
        record["segments"].append(seg)
        return Tensor(seg)

    def empty_cache() -> None:
        for record in list(state["pools"].values()):
            if record["use_count"] == 0:
                release(record)

    @contextlib.contextmanager
    def device(index: int) -> Iterator[None]:
        saved, state["device"] = state["device"], index
        try:
            yield
        finally:
            state["device"] = saved

    names = {
        "MemPool": MemPool,
        "use_mem_pool": use_mem_pool,
        "empty": empty,
        "empty_cache": empty_cache,
        "device": device,
        "current_device": lambda: state["device"],
        "is_available": lambda: True,
    }
    for name, value in names.items():
        setattr(cuda, name, value)
    setattr(torch, "OutOfMemoryError", OutOfMemoryError)  # noqa: B010


def entry_points(malloc: int, free: int) -> tuple[Any, Any]:
    """Python callables for the C entry points at ``malloc`` and ``free`` (``void
    *malloc(ssize_t size, int device, cudaStream_t stream)`` and ``void free(void *ptr,
    ssize_t size, int device, cudaStream_t stream)``), called as PyTorch calls them: from
    C++, without the GIL, through a ``std::function`` in a try/catch of
    ``std::exception`` (:func:`aml_core._hooks.call_entry_malloc`). ``malloc(size,
    device, stream)`` returns the address, or None for NULL; a C++ exception it throws is
    the ``RuntimeError`` PyTorch would raise (ctypes could not carry it: the process would
    abort). ``stream`` is a handle or None."""

    def call_malloc(size: int, device: int, stream: int | None) -> int | None:
        return _hooks.call_entry_malloc(malloc, size, device, stream or 0) or None

    def call_free(ptr: int | None, size: int, device: int, stream: int | None) -> None:
        _hooks.call_entry_free(free, ptr or 0, size, device, stream or 0)

    return call_malloc, call_free


def torch_entry_points(torch: types.ModuleType) -> tuple[Any, Any]:
    """The ``malloc`` and ``free`` that a hook installed in the fake ``torch`` (of
    :func:`fake_torch`), callable from Python as PyTorch calls them from C++
    (:func:`entry_points`)."""
    tag, alloc, free = torch.state["current"]
    assert tag == "custom", "no pluggable allocator was installed"
    return entry_points(alloc, free)


@contextlib.contextmanager
def faked(name: Literal["cupy", "torch"]) -> Iterator[types.ModuleType]:
    """:func:`fake_cupy` or :func:`fake_torch` as ``sys.modules[name]`` for the block, with
    aml's hook of that library fresh: none installed when the block starts; at its end the
    CuPy hook installed in it is uninstalled (``force``), the PyTorch hook state and the
    module restored (PyTorch cannot change its allocator back)."""
    fake = fake_cupy() if name == "cupy" else fake_torch()
    saved_module, saved_torch_hook = sys.modules.get(name), hooks._torch_hook
    sys.modules[name] = fake
    if name == "torch":
        hooks._torch_hook = None
    try:
        yield fake
    finally:
        if name == "cupy" and hooks._installed is not None:
            hooks._installed.uninstall(force=True)
        if name == "torch":
            hooks._torch_hook = saved_torch_hook
        if saved_module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved_module
