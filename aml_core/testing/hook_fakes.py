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
import ctypes
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any, Literal

from ..gpu import hooks
from ..host import HostArea
from ..specs import Kind

__all__ = ["FakeDeviceArea", "fake_cupy", "fake_torch", "faked", "torch_entry_points"]


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
        CUDAPluggableAllocator=CUDAPluggableAllocator, change_current_allocator=change_current_allocator
    )
    setattr(torch, "cuda", types.SimpleNamespace(memory=memory))  # noqa: B010  (a module's new attribute)
    setattr(torch, "_C", types.SimpleNamespace(_cuda_customAllocator=custom_allocator))  # noqa: B010
    setattr(torch, "state", state)  # noqa: B010
    return torch


#: The C signatures PyTorch calls an allocator through: ``void *malloc(ssize_t size, int
#: device, cudaStream_t stream)`` and ``void free(void *ptr, ssize_t size, int device,
#: cudaStream_t stream)``.
TORCH_MALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)
TORCH_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)


def torch_entry_points(torch: types.ModuleType) -> tuple[Any, Any]:
    """The ``malloc`` and ``free`` that a hook installed in the fake ``torch`` (of
    :func:`fake_torch`), callable from Python as PyTorch calls them from C."""
    tag, alloc, free = torch.state["current"]
    assert tag == "custom", "no pluggable allocator was installed"
    return ctypes.cast(alloc, TORCH_MALLOC), ctypes.cast(free, TORCH_FREE)


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
