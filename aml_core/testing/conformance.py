"""Reusable conformance tests that any backend runs against its own areas.

Subclass a class and provide its fixture; tests a backend cannot pass skip by the
capabilities the area declares (``area.capabilities``)::

    import pytest
    from aml_core.testing import AreaConformance

    class TestMyArea(AreaConformance):
        @pytest.fixture
        def area(self):
            area = MyArea()
            yield area
            area.close()

Data is written and read through the buffer protocol for host-accessible memory and
through ``area.write(buf, data)`` / ``area.read(buf)`` otherwise (GPU areas have them);
override :meth:`AreaConformance.write` / :meth:`AreaConformance.read` if yours differ.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import pickle
import subprocess
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from ..area import Area
from ..buffer import Buffer
from ..errors import (
    AMLBusyError,
    AMLDomainError,
    AMLError,
    AMLMemoryError,
    AMLNotSupported,
    AMLTypeError,
    AMLValueError,
    ErrorCode,
)
from ..specs import MAX_SIZE, AreaStats, Capability
from .lifetime import catch_unraisable, collect, collect_often, drop_hammer

__all__ = ["AreaConformance", "IpcConformance", "ManagedConformance", "VirtualMemoryConformance"]


def _pattern(n: int) -> bytes:
    """``n`` random bytes (a random block repeated): never zeros, new on every call."""
    block = os.urandom(min(n, 4096))
    return (block * -(-n // len(block)))[:n] if n else b""


def _is_freed(buf: Buffer) -> bool:
    return buf.freed


def _can_access(area: Area, buf: Buffer) -> bool:
    return buf.host_accessible or (hasattr(area, "write") and hasattr(area, "read"))


class _Cycle:
    """Holds buffers in a reference cycle: only the cyclic collector frees them."""

    def __init__(self, *held: object) -> None:
        self.held = held
        self.me = self


class _DataAccess:
    """How the kit writes and reads a buffer's bytes: the buffer protocol for
    host-accessible memory, else the area's ``write(buf, data)`` / ``read(buf, size)``;
    override both if your area differs."""

    def write(self, area: Area, buf: Buffer, data: bytes) -> None:
        if buf.host_accessible:
            with memoryview(buf) as view:
                view[: len(data)] = data
        elif hasattr(area, "write"):
            area.write(buf, data)
        else:
            pytest.skip("the area's memory is not host-accessible and the area has no write()")

    def read(self, area: Area, buf: Buffer, size: int) -> bytes:
        if buf.host_accessible:
            with memoryview(buf) as view:
                return bytes(view[:size])
        if hasattr(area, "read"):
            data: bytes = area.read(buf, size)
            return data
        pytest.skip("the area's memory is not host-accessible and the area has no read()")


class AreaConformance(_DataAccess):
    """What every area must do. Needs a fixture ``area`` yielding a fresh, open area."""

    #: Sizes mapped by the round-trip tests.
    sizes: ClassVar[tuple[int, ...]] = (1, 4095, 4096, 65537, 1 << 20)
    #: Threads and rounds of the concurrency test.
    threads: ClassVar[int] = 8
    rounds: ClassVar[int] = 50
    #: A size the system cannot provide (ENOMEM expected), or None to skip that test.
    enomem_size: ClassVar[int | None] = MAX_SIZE
    #: Mappings made and freed by the leak check.
    leak_rounds: ClassVar[int] = 64
    #: Whether the area's backend is one the registry makes areas of (``aml_core.area``):
    #: the kit then checks its entry point and its factory. False for an area the
    #: registry does not make (a pool over another area, a test double).
    registered: ClassVar[bool] = True

    # -- leak check hook, overridable ---------------------------------------------------
    def native_live(self, area: Area) -> int | None:
        """The number of native allocations of ``area`` still alive, as the backend (or
        its driver double) counts them; None (the default) when it cannot tell. With a
        count, the leak check proves that ``_free`` really frees."""
        return None

    # -- mapping ---------------------------------------------------------------------
    def test_mmap_munmap_round_trip(self, area: Area) -> None:
        for size in self.sizes:
            buf = area.mmap(size)
            assert buf.size == size
            assert buf.ptr != 0
            assert buf.area is area
            assert buf.kind is area.kind
            assert not buf.freed
            data = _pattern(size)
            self.write(area, buf, data)
            assert self.read(area, buf, size) == data
            area.munmap(buf)
            assert buf.freed

    def test_buffers_do_not_overlap(self, area: Area) -> None:
        bufs = [area.mmap(4096 + i) for i in range(16)]
        spans = sorted((b.ptr, b.ptr + b.size) for b in bufs)
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start
        for i, buf in enumerate(bufs):
            self.write(area, buf, bytes([i]) * 64)
        for i, buf in enumerate(bufs):
            assert self.read(area, buf, 64) == bytes([i]) * 64
        for buf in bufs:
            area.munmap(buf)

    def test_munmap_by_pointer_and_size(self, area: Area) -> None:
        buf = area.mmap(8192)
        area.munmap(buf.ptr, 8192)
        assert buf.freed

    def test_stats(self, area: Area) -> None:
        before = area.stats
        a = area.mmap(1000)
        b = area.mmap(3000)
        mid = area.stats
        assert mid.bytes_in_use == before.bytes_in_use + 4000
        assert mid.live_mappings == before.live_mappings + 2
        assert mid.total_maps == before.total_maps + 2
        assert mid.peak_bytes >= mid.bytes_in_use
        area.munmap(a)
        area.munmap(b)
        after = area.stats
        assert after.bytes_in_use == before.bytes_in_use
        assert after.total_unmaps == before.total_unmaps + 2
        assert after.peak_bytes >= mid.bytes_in_use
        assert isinstance(after, AreaStats)

    def test_free_is_called_and_frees(self, area: Area) -> None:
        """Catch a ``_free`` that is never reached or does nothing: every munmap and
        close() calls it once per mapping, the stats come back to where they were and,
        with :meth:`native_live`, the backend's own count does too. An area with a
        compiled allocator installed (``AreaBase._set_native``) frees its fast-path
        buffers without ``_free``: there the backend's native count is the witness."""
        compiled = getattr(area, "_native_allocator", None) is not None
        if compiled and self.native_live(area) is None:
            pytest.skip(
                "a compiled allocator frees without _free, and the backend gives no native live count"
            )
        # A pool's compiled cache hands blocks back without _free: check _free itself with
        # the cache set aside, and put it back after.
        cache = getattr(area, "_pool_cache", None)
        if cache is not None:
            area._set_pool(None)
        freed: list[int] = []
        original = area._free

        def counting_free(buffer: Buffer) -> None:
            freed.append(buffer.ptr)
            original(buffer)

        area._free = counting_free  # type: ignore[method-assign]
        try:
            before, native_before = area.stats, self.native_live(area)
            bufs = [area.mmap(4096 + i) for i in range(self.leak_rounds)]
            if native_before is not None:
                assert self.native_live(area) == native_before + self.leak_rounds
            for buf in bufs[: self.leak_rounds // 2]:
                area.munmap(buf)
            if compiled:
                assert native_before is not None  # checked above: compiled areas need the count
                assert self.native_live(area) == native_before + self.leak_rounds - self.leak_rounds // 2
            else:
                assert sorted(freed) == sorted(b.ptr for b in bufs[: self.leak_rounds // 2])
            rest = bufs[self.leak_rounds // 2 :]
            area.close()
            if not compiled:
                assert len(freed) == self.leak_rounds
            assert all(b.freed for b in rest)
            after = area.stats
            assert after.bytes_in_use == before.bytes_in_use
            assert after.live_mappings == before.live_mappings
            assert after.total_unmaps - before.total_unmaps == self.leak_rounds
            if native_before is not None:
                assert self.native_live(area) == native_before, "_free did not release the native memory"
        finally:
            del area._free
            if cache is not None and not area.closed:
                area._set_pool(cache)

    def test_enomem(self, area: Area) -> None:
        """A size the system cannot provide is ENOMEM (:class:`AMLMemoryError`, also a
        MemoryError), and nothing is tracked."""
        if self.enomem_size is None:
            pytest.skip("this backend sets no enomem_size")
        before = area.stats
        with pytest.raises(AMLMemoryError) as info:
            area.mmap(self.enomem_size)
        assert info.value.code is ErrorCode.ENOMEM
        assert isinstance(info.value, MemoryError)
        assert area.stats == before

    # -- bad input -------------------------------------------------------------------------
    @pytest.mark.parametrize(
        ("size", "error", "builtin"),
        [
            (0, AMLValueError, ValueError),
            (-1, AMLValueError, ValueError),
            (1.5, AMLTypeError, TypeError),
            ("4096", AMLTypeError, TypeError),
            (True, AMLTypeError, TypeError),
            (None, AMLTypeError, TypeError),
            (MAX_SIZE + 1, AMLDomainError, ValueError),
            (1 << 64, AMLDomainError, ValueError),
        ],
    )
    def test_bad_size(
        self, area: Area, size: object, error: type[AMLError], builtin: type[Exception]
    ) -> None:
        with pytest.raises(error) as info:
            area.mmap(size)  # type: ignore[arg-type]
        assert isinstance(info.value, builtin)
        assert area.stats.live_mappings == 0

    def test_bad_options(self, area: Area) -> None:
        with pytest.raises(AMLTypeError):
            area.mmap(4096, options=object())
        with pytest.raises(AMLTypeError):
            area.mmap(4096, options={"no_such_option_anywhere": 1})

    # -- the backend as users reach it: its entry point and its factory -------------------
    def test_backend_is_discoverable_through_its_entry_point(self, area: Area) -> None:
        """``aml info`` and ``aml_core.area(backend=...)`` find the backend through an
        entry point of the group ``aml.backends`` (not only a plugin registered by hand)."""
        if not self.registered:
            pytest.skip("registered = False: the registry does not make this area")
        problem = _discovery_problem(area.backend)
        assert not problem, problem

    def test_factory_refuses_unknown_options(self, area: Area) -> None:
        """``aml_core.area(..., backend=<it>, <unknown option>=1)`` is AMLTypeError,
        raised by the backend's factory and passed through by the registry (not reported
        as a plugin failure, not passed on to another backend)."""
        from ..registry import Registry
        from ..specs import AreaSpec

        if not self.registered or _discovery_problem(area.backend):
            pytest.skip("the backend is not found through its entry point (see the test above)")
        reg = Registry()
        try:
            reg.area(AreaSpec(area.kind, backend=area.backend)).close()
        except AMLError as exc:
            pytest.skip(f"the registry cannot make a {area.backend} area here: {exc}")
        try:
            made = reg.area(AreaSpec(area.kind, backend=area.backend, options={"aml_kit_no_such_option": 1}))
        except AMLTypeError:
            return
        except AMLError as exc:
            pytest.fail(
                f"an unknown area option must be AMLTypeError from the factory, got {type(exc).__name__}: "
                f"{exc} (docs/backend-authoring.md, 'The factory')"
            )
        made.close()
        pytest.fail("the factory accepted the unknown area option aml_kit_no_such_option=1")

    def test_munmap_foreign_pointer(self, area: Area) -> None:
        buf = area.mmap(4096)
        with pytest.raises(AMLValueError) as info:
            area.munmap(buf.ptr + (1 << 40))
        assert info.value.code is ErrorCode.EINVAL
        area.munmap(buf)

    def test_munmap_offset_pointer(self, area: Area) -> None:
        buf = area.mmap(8192)
        with pytest.raises(AMLValueError, match="inside the mapping"):
            area.munmap(buf.ptr + 16)
        area.munmap(buf)

    def test_double_munmap(self, area: Area) -> None:
        buf = area.mmap(4096)
        area.munmap(buf)
        with pytest.raises(AMLValueError):
            area.munmap(buf)
        with pytest.raises(AMLValueError):
            area.munmap(buf.ptr)

    def test_munmap_wrong_size(self, area: Area) -> None:
        buf = area.mmap(4096)
        with pytest.raises(AMLValueError, match="size"):
            area.munmap(buf, 8192)
        area.munmap(buf, 4096)

    def test_munmap_wrong_type(self, area: Area) -> None:
        with pytest.raises(AMLTypeError):
            area.munmap("0x1000")  # type: ignore[arg-type]
        with pytest.raises(AMLTypeError):
            area.munmap(None)  # type: ignore[arg-type]

    def test_freed_buffer_cannot_be_viewed(self, area: Area) -> None:
        buf = area.mmap(4096)
        area.munmap(buf)
        with pytest.raises(BufferError):
            memoryview(buf)
        if area.capabilities & Capability.DLPACK:
            with pytest.raises(BufferError):
                buf.__dlpack__()

    # -- lifetime ---------------------------------------------------------------------------
    def test_closed_area_raises(self, area: Area) -> None:
        buf = area.mmap(4096)
        area.close()
        assert area.closed
        assert buf.freed
        with pytest.raises(AMLValueError, match="closed"):
            area.mmap(4096)
        with pytest.raises(AMLValueError):
            area.munmap(buf)
        area.close()  # idempotent

    def test_close_frees_everything(self, area: Area) -> None:
        bufs = [area.mmap(4096) for _ in range(5)]
        area.close()
        assert all(b.freed for b in bufs)
        assert area.stats.live_mappings == 0
        assert area.stats.bytes_in_use == 0

    def test_context_managers(self, area: Area) -> None:
        with area.mmap(4096) as buf:
            assert buf.exports == 0
        assert _is_freed(buf)
        with area as same:
            assert same is area
        assert area.closed

    def test_threads(self, area: Area) -> None:
        probe = area.mmap(4096)
        accessible = _can_access(area, probe)
        area.munmap(probe)
        if not accessible:  # write()/read() would skip inside a worker thread: skip here
            pytest.skip("the area's memory is not host-accessible and the area has no write()/read()")
        errors: list[BaseException] = []
        start = area.stats

        def work(worker: int) -> None:
            try:
                for i in range(self.rounds):
                    buf = area.mmap(4096 + worker * 64 + i)
                    payload = bytes([worker]) * 32
                    self.write(area, buf, payload)
                    assert self.read(area, buf, 32) == payload
                    area.munmap(buf)
            except BaseException as exc:  # collected for the main thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(self.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
        end = area.stats
        assert end.live_mappings == start.live_mappings
        assert end.total_maps - start.total_maps == self.threads * self.rounds
        assert end.total_unmaps - start.total_unmaps == self.threads * self.rounds

    # -- zero-copy protocols --------------------------------------------------------------------
    def test_buffer_protocol(self, area: Area) -> None:
        if not area.capabilities & Capability.BUFFER_PROTOCOL:
            pytest.skip("the area does not declare BUFFER_PROTOCOL")
        buf = area.mmap(4096)
        view = memoryview(buf)
        assert view.nbytes == 4096
        assert buf.exports == 1
        view[0:4] = b"aml!"
        assert self.read(area, buf, 4) == b"aml!"
        with pytest.raises(AMLBusyError):
            area.munmap(buf)
        assert not buf.freed
        view.release()
        assert buf.exports == 0
        area.munmap(buf)

    def test_numpy_shares_bytes(self, area: Area) -> None:
        np = pytest.importorskip("numpy")
        if not area.capabilities & Capability.BUFFER_PROTOCOL:
            pytest.skip("the area does not declare BUFFER_PROTOCOL")
        buf = area.mmap(4096)
        arr = np.frombuffer(buf, dtype=np.uint8)
        assert arr.ctypes.data == buf.ptr
        arr[:3] = [1, 2, 3]
        assert self.read(area, buf, 3) == b"\x01\x02\x03"
        with pytest.raises(AMLBusyError):
            area.munmap(buf)
        del arr
        area.munmap(buf)

    def test_dlpack(self, area: Area) -> None:
        if not area.capabilities & Capability.DLPACK:
            pytest.skip("the area does not declare DLPACK")
        buf = area.mmap(4096)
        dev_type, dev_id = buf.__dlpack_device__()
        assert dev_type > 0
        assert dev_id >= 0
        capsule = buf.__dlpack__()
        assert buf.exports == 1
        with pytest.raises(AMLBusyError):
            area.munmap(buf)
        del capsule
        assert buf.exports == 0
        versioned = buf.__dlpack__(max_version=(1, 0))
        del versioned
        with pytest.raises(BufferError):
            buf.__dlpack__(copy=True)
        with pytest.raises(BufferError):
            buf.__dlpack__(dl_device=(dev_type + 100, 0))
        area.munmap(buf)

    def test_numpy_from_dlpack(self, area: Area) -> None:
        np = pytest.importorskip("numpy")
        if not area.capabilities & Capability.DLPACK or not area.capabilities & Capability.BUFFER_PROTOCOL:
            pytest.skip("needs host-accessible DLPack buffers")
        buf = area.mmap(4096)
        if buf.__dlpack_device__()[0] not in (1, 3, 11, 13):  # kDLCPU, CUDAHost, ROCMHost, CUDAManaged
            area.munmap(buf)
            pytest.skip("NumPy imports only host-accessible DLPack devices")
        arr = np.from_dlpack(buf)
        assert arr.ctypes.data == buf.ptr
        assert arr.shape == (4096,)
        arr[7] = 42
        assert self.read(area, buf, 8)[7] == 42
        del arr
        area.munmap(buf)

    def test_cuda_array_interface(self, area: Area) -> None:
        buf = area.mmap(4096)
        if not area.capabilities & Capability.CUDA_ARRAY_INTERFACE:
            assert not hasattr(buf, "__cuda_array_interface__")
            area.munmap(buf)
            return
        cai = buf.__cuda_array_interface__
        assert cai["shape"] == (4096,)
        assert cai["data"][0] == buf.device_ptr
        assert cai["version"] == 3
        area.munmap(buf)

    # -- garbage collection (aml_core.area, "Garbage collection") -------------------------------
    def _assert_back(self, area: Area, before: AreaStats, native_before: int | None, freed: int) -> None:
        """The stats (and the backend's native count, if it gives one) are back to
        ``before``, with ``freed`` more unmaps."""
        after = area.stats
        assert after.live_mappings == before.live_mappings, after
        assert after.bytes_in_use == before.bytes_in_use, after
        assert after.total_unmaps - before.total_unmaps == freed, after
        if native_before is not None:
            assert self.native_live(area) == native_before, "a dropped buffer's native memory was not freed"

    def test_dropped_buffer_is_freed(self, area: Area) -> None:
        """A buffer dropped without munmap is freed when it is garbage collected (at once,
        when nothing else references it), through the area's munmap path."""
        before, native_before = area.stats, self.native_live(area)
        buf = area.mmap(4096)
        if _can_access(area, buf):
            self.write(area, buf, _pattern(64))
        if native_before is not None:
            assert self.native_live(area) == native_before + 1
        ref = weakref.ref(buf)
        del buf
        collect()
        assert ref() is None
        self._assert_back(area, before, native_before, 1)
        assert area.buffers() == ()

    def test_dropped_buffer_in_a_cycle_is_freed(self, area: Area) -> None:
        """A buffer held only by a reference cycle is freed by the cyclic collector."""
        before, native_before = area.stats, self.native_live(area)
        _Cycle(area.mmap(4096), area.mmap(100))
        assert area.stats.live_mappings == before.live_mappings + 2
        collect()
        self._assert_back(area, before, native_before, 2)

    def test_views_keep_a_dropped_buffer(self, area: Area) -> None:
        """A buffer still viewed (a memoryview, a DLPack consumer) is not freed when its
        Buffer object is dropped, but once its last view is gone."""
        caps = area.capabilities
        if not caps & (Capability.BUFFER_PROTOCOL | Capability.DLPACK):
            pytest.skip("the area declares neither BUFFER_PROTOCOL nor DLPACK")
        before, native_before = area.stats, self.native_live(area)
        buf = area.mmap(4096)
        view: Any = memoryview(buf) if caps & Capability.BUFFER_PROTOCOL else buf.__dlpack__()
        del buf
        collect()
        assert area.stats.live_mappings == before.live_mappings + 1
        if isinstance(view, memoryview):
            view[:4] = b"kept"  # still mapped
            view.release()
        del view
        collect()
        self._assert_back(area, before, native_before, 1)

    def test_collector_inside_area_operations(self, area: Area) -> None:
        """With the collector running at every allocation, finalizers run inside mmap,
        munmap and the area's own code: their frees wait for it, and nothing is lost."""
        before, native_before = area.stats, self.native_live(area)
        with collect_often(1):
            for i in range(30):
                buf = area.mmap(1000 + i)
                if i % 3 == 0:
                    _Cycle(buf)
                elif i % 3 == 1:
                    area.munmap(buf)
                del buf
        collect()
        self._assert_back(area, before, native_before, 30)

    def test_dropped_buffers_from_threads(self, area: Area) -> None:
        """Many threads dropping buffers, freed in whatever thread the collector runs."""
        before, native_before = area.stats, self.native_live(area)
        drop_hammer(area, threads=self.threads, rounds=self.rounds)
        self._assert_back(area, before, native_before, self.threads * self.rounds)

    def test_failed_free_of_a_dropped_buffer_is_kept(self, area: Area) -> None:
        """A GC-driven free that fails is reported (sys.unraisablehook) and the mapping
        stays tracked, held by the area, until close() frees it."""
        if getattr(area, "_native_allocator", None) is not None:
            pytest.skip(
                "a compiled allocator frees without _free: the backend's tests inject its native error"
            )
        # A pool's compiled cache hands blocks back without _free: set it aside.
        cache = getattr(area, "_pool_cache", None)
        if cache is not None:
            area._set_pool(None)
        before, native_before = area.stats, self.native_live(area)
        original = area._free

        def failing_free(buffer: Buffer) -> None:
            area._free = original  # type: ignore[method-assign]  # once
            raise AMLValueError("the native free failed (injected by the conformance kit)")

        buf = area.mmap(4096)
        ptr = buf.ptr
        area._free = failing_free  # type: ignore[method-assign]
        try:
            with catch_unraisable() as caught:
                del buf
                collect()
        finally:
            if "_free" in vars(area):
                del area._free
        assert [type(r.exc) for r in caught] == [AMLValueError], caught
        assert "close() retries" in caught[0].text
        del caught
        collect()
        assert [b.ptr for b in area.buffers()] == [ptr], "the mapping whose free failed is not tracked"
        assert area.stats.live_mappings == before.live_mappings + 1
        area.close()
        assert area.stats.live_mappings == 0
        if native_before is not None:
            assert self.native_live(area) == native_before
        if cache is not None and not area.closed:
            area._set_pool(cache)


def _discovery_problem(backend: str) -> str:
    """What keeps ``backend`` from being found through an ``aml.backends`` entry point,
    and how to fix it; ``""`` when it is found."""
    from importlib import metadata

    from ..registry import ENTRY_POINT_GROUP, Registry

    try:
        found = Registry().plugin_of(backend)
    except AMLNotSupported as exc:
        return f"{exc}\n(fix the entry point {backend!r} of the group {ENTRY_POINT_GROUP!r})"
    if found is not None:
        return ""
    elsewhere = sorted(
        f"{ep.group}: {ep.name} = {ep.value}"
        for dist in metadata.distributions()
        for ep in dist.entry_points
        if ep.group != ENTRY_POINT_GROUP and ep.name == backend and "aml" in ep.group.lower()
    )
    hint = f" Found in another group (misspelt?): {'; '.join(elsewhere)}." if elsewhere else ""
    return (
        f"backend {backend!r} is not discoverable: no entry point of the group {ENTRY_POINT_GROUP!r} "
        f"declares it, so aml info and aml_core.area(backend={backend!r}) cannot find it.{hint} "
        f"Declare the module with the @aml_core.hookimpl aml_backends hook in pyproject.toml:\n"
        f'    [project.entry-points."{ENTRY_POINT_GROUP}"]\n'
        f'    {backend} = "<your_package>.plugin"\n'
        f"and install the distribution (pip install -e .)."
    )


_IPC_CHILD = """
import base64, importlib, json, pickle, sys
request = json.loads(sys.stdin.read())
import aml_core
if request["plugin"]:
    aml_core.register(importlib.import_module(request["plugin"]), name=request["backend"])
handle = pickle.loads(base64.b64decode(request["handle"]))
buf = aml_core.ipc_open(handle)
n = len(bytes.fromhex(request["write"]))
if buf.host_accessible:
    with memoryview(buf) as view:
        seen = bytes(view[:n])
        view[:n] = bytes.fromhex(request["write"])
else:
    seen = buf.area.read(buf, n)
    buf.area.write(buf, bytes.fromhex(request["write"]))
report = {"seen": seen.hex(), "size": buf.size, "backend": buf.area.backend}
buf.area.munmap(buf)
report["closed"] = buf.freed
print(json.dumps(report))
"""


class IpcConformance(_DataAccess):
    """The IPC contract (docs/backend-authoring.md#ipc), for any backend that declares
    :attr:`~aml_core.specs.Capability.IPC`: needs a fixture ``area`` yielding an open
    area with ``ipc_export``. A child process opens the handle with
    ``aml_core.ipc_open``, reads what the parent wrote and writes back.

    The child finds the backend by ``handle.backend`` in the registry: set
    :attr:`plugin` to the plugin module to register there when the backend is not
    installed as an entry point, and override :meth:`child_env` if the child needs
    another environment."""

    #: Bytes shared by the tests.
    size: ClassVar[int] = 1 << 16
    #: The plugin module the child registers (``aml_core.register``), or None when the
    #: backend is installed (found through its entry point).
    plugin: ClassVar[str | None] = None

    def child_env(self, area: Area) -> dict[str, str]:
        """The child process's environment (default: this process's)."""
        return dict(os.environ)

    def _area(self, area: Area) -> Any:
        if not area.capabilities & Capability.IPC or not hasattr(area, "ipc_export"):
            pytest.skip("the area does not declare IPC")
        return area

    def test_handle(self, area: Area) -> None:
        from ..ipc import IpcExport, IpcHandle

        ipc = self._area(area)
        buf = area.mmap(self.size)
        export = ipc.ipc_export(buf)
        assert isinstance(export, IpcExport)
        handle = export.handle
        assert isinstance(handle, IpcHandle)
        assert handle.backend == area.backend
        assert handle.size == buf.size
        assert handle.pid == os.getpid()
        assert pickle.loads(pickle.dumps(handle)) == handle
        area.munmap(buf)
        with pytest.raises(AMLValueError):
            export.handle  # noqa: B018 - the buffer was freed: the export says so

    def test_export_bad_input(self, area: Area) -> None:
        ipc = self._area(area)
        buf = area.mmap(4096)
        with pytest.raises(AMLValueError):
            ipc.ipc_export(buf.ptr + (1 << 40))
        area.munmap(buf)
        with pytest.raises(AMLValueError):
            ipc.ipc_export(buf)
        import aml_core

        with pytest.raises(AMLTypeError):
            aml_core.ipc_open(object())  # type: ignore[arg-type]

    def test_share_with_a_child_process(self, area: Area) -> None:
        ipc = self._area(area)
        buf = area.mmap(self.size)
        parent, child = _pattern(64), _pattern(64)
        self.write(area, buf, parent)
        handle = ipc.ipc_export(buf).handle
        request = {
            "handle": base64.b64encode(pickle.dumps(handle)).decode(),
            "plugin": self.plugin,
            "backend": area.backend,
            "write": child.hex(),
        }
        proc = subprocess.run(
            [sys.executable, "-c", _IPC_CHILD],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=self.child_env(area),
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        assert bytes.fromhex(report["seen"]) == parent, "the child did not see the parent's bytes"
        assert report["size"] == self.size
        assert report["backend"] == area.backend, "the imported buffer is not in the backend's import area"
        assert report["closed"], "buf.area.munmap(buf) did not close the imported buffer"
        assert self.read(area, buf, 64) == child, "the parent did not see the child's bytes"
        area.munmap(buf)


class ManagedConformance:
    """Managed (unified) memory: needs a fixture ``area`` of managed memory with the
    GPU area methods (prefetch, advise, range_attribute(s), attach) and at least one
    device (device 0)."""

    size: ClassVar[int] = 1 << 21

    @pytest.fixture
    def buf(self, area: Any) -> Iterator[Buffer]:
        if not area.capabilities & Capability.MANAGED:
            pytest.skip("the area does not declare MANAGED")
        buf = area.mmap(self.size)
        yield buf
        if not buf.freed:
            area.munmap(buf)

    def test_host_access(self, area: Any, buf: Buffer) -> None:
        with memoryview(buf) as view:
            view[:5] = b"hello"
            assert bytes(view[:5]) == b"hello"

    def test_prefetch_records_location(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import CPU, RangeAttribute

        area.prefetch(buf, 0)
        area.runtime.synchronize()
        assert area.range_attribute(buf, RangeAttribute.LAST_PREFETCH_LOCATION) == 0
        area.prefetch(buf, "host")
        area.runtime.synchronize()
        assert area.range_attribute(buf, RangeAttribute.LAST_PREFETCH_LOCATION) == CPU

    def test_read_mostly_advice(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import Advice, RangeAttribute

        area.advise(buf, Advice.SET_READ_MOSTLY, 0)
        assert area.range_attribute(buf, RangeAttribute.READ_MOSTLY) is True
        area.advise(buf, Advice.UNSET_READ_MOSTLY, 0)
        assert area.range_attribute(buf, RangeAttribute.READ_MOSTLY) is False

    def test_preferred_location_advice(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import CPU, INVALID, Advice, RangeAttribute

        area.advise(buf, Advice.SET_PREFERRED_LOCATION, 0)
        assert area.range_attribute(buf, RangeAttribute.PREFERRED_LOCATION) == 0
        area.advise(buf, Advice.SET_PREFERRED_LOCATION, "host")
        assert area.range_attribute(buf, RangeAttribute.PREFERRED_LOCATION) == CPU
        area.advise(buf, Advice.UNSET_PREFERRED_LOCATION, 0)
        assert area.range_attribute(buf, RangeAttribute.PREFERRED_LOCATION) == INVALID

    def test_accessed_by_advice(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import Advice, RangeAttribute

        area.advise(buf, Advice.SET_ACCESSED_BY, 0)
        assert 0 in area.range_attribute(buf, RangeAttribute.ACCESSED_BY)
        area.advise(buf, Advice.UNSET_ACCESSED_BY, 0)
        assert 0 not in area.range_attribute(buf, RangeAttribute.ACCESSED_BY)

    def test_range_attributes_in_one_call(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import Advice, RangeAttribute

        area.advise(buf, Advice.SET_READ_MOSTLY, 0)
        got = area.range_attributes(buf, [RangeAttribute.READ_MOSTLY, RangeAttribute.ACCESSED_BY])
        assert got[RangeAttribute.READ_MOSTLY] is True
        assert isinstance(got[RangeAttribute.ACCESSED_BY], tuple)

    def test_sub_range(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import Advice, RangeAttribute

        half = self.size // 2
        area.advise(buf, Advice.SET_READ_MOSTLY, 0, offset=0, size=half)
        assert area.range_attribute(buf, RangeAttribute.READ_MOSTLY, offset=0, size=half) is True
        assert area.range_attribute(buf, RangeAttribute.READ_MOSTLY, offset=half, size=half) is False

    def test_bad_ranges_and_values(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import Advice, RangeAttribute

        with pytest.raises(AMLValueError):
            area.prefetch(buf, 0, offset=self.size + 1)
        with pytest.raises(AMLValueError):
            area.prefetch(buf, 0, offset=0, size=self.size + 4096)
        with pytest.raises(AMLValueError):
            area.advise(buf, 12345, 0)
        with pytest.raises(AMLValueError):
            area.range_attribute(buf, 12345)
        with pytest.raises(AMLValueError):
            area.prefetch(buf, 1 << 20)
        with pytest.raises(AMLTypeError):
            area.advise(buf, Advice.SET_READ_MOSTLY, 1.5)
        with pytest.raises(AMLValueError):
            area.range_attributes(buf, [])
        area.munmap(buf)
        with pytest.raises(AMLValueError):
            area.range_attribute(buf, RangeAttribute.READ_MOSTLY)

    def test_stream_attach(self, area: Any, buf: Buffer) -> None:
        from ..gpu.managed import AttachFlags
        from ..gpu.stream import Stream

        with Stream(area.runtime) as stream:
            area.attach(buf, stream, AttachFlags.SINGLE)
            stream.synchronize()
            area.attach(buf, stream, AttachFlags.GLOBAL)
            stream.synchronize()
        with pytest.raises(AMLValueError):
            area.attach(buf, 0, 3)


class VirtualMemoryConformance:
    """Virtual memory (docs/aml-contract.md#hsa-virtual-memory): needs a fixture ``vm`` yielding an open
    :class:`~aml_core.gpu.vmm.VirtualMemory` of device 0."""

    def test_granularity(self, vm: Any) -> None:
        g = vm.granularity()
        assert g > 0
        assert g & (g - 1) == 0
        assert vm.granularity(recommended=True) >= g

    def test_reserve_create_map_access(self, vm: Any) -> None:
        from ..gpu.vmm import Access

        g = vm.granularity()
        res = vm.reserve(4 * g)
        phys = vm.create(2 * g)
        vm.map(res.ptr + g, 2 * g, phys)
        vm.set_access(res.ptr + g, 2 * g, Access.READWRITE)
        assert vm.get_access(res.ptr + g) is Access.READWRITE
        props = vm.properties(phys)
        assert props.type == 1
        assert props.location_device == 0
        with pytest.raises(AMLBusyError):
            vm.address_free(res)
        vm.unmap(res.ptr + g, 2 * g)
        vm.release(phys)
        vm.address_free(res)

    def test_retain(self, vm: Any) -> None:
        g = vm.granularity()
        res = vm.reserve(g)
        phys = vm.create(g)
        vm.map(res.ptr, g, phys)
        again = vm.retain(res.ptr)
        assert again is phys
        vm.release(again)
        vm.unmap(res.ptr, g)
        vm.release(phys)
        vm.address_free(res)

    def test_bad_input(self, vm: Any) -> None:
        g = vm.granularity()
        with pytest.raises(AMLValueError, match="granularity"):
            vm.reserve(g + 1)
        with pytest.raises(AMLValueError):
            vm.create(0)
        res = vm.reserve(2 * g)
        phys = vm.create(g)
        with pytest.raises(AMLValueError, match="reservation"):
            vm.map(res.ptr + 2 * g, g, phys)
        vm.map(res.ptr, g, phys)
        with pytest.raises(AMLValueError, match="overlaps"):
            vm.map(res.ptr, g, phys)
        with pytest.raises(AMLValueError):
            vm.unmap(res.ptr + g, g)
        with pytest.raises(AMLValueError):
            vm.unmap(res.ptr, 2 * g)
        vm.unmap(res.ptr, g)
        vm.release(phys)
        with pytest.raises(AMLValueError):
            vm.release(phys)
        vm.address_free(res)
        with pytest.raises(AMLValueError):
            vm.address_free(res)

    def test_mmap_buffer(self, vm: Any) -> None:
        buf = vm.mmap(12345)
        assert buf.size == 12345
        assert buf.ptr % vm.granularity() == 0
        vm.munmap(buf)
        assert buf.freed

    def test_dropped_buffers_are_freed(self, vm: Any) -> None:
        """VMM buffers (mmap's and growable ones) dropped without munmap are unmapped and
        their reservations freed when garbage collected."""
        g = vm.granularity()
        before = vm.stats
        buf = vm.mmap(g)
        grow = vm.growable(4 * g, g)
        grow.grow(2 * g)
        _Cycle(vm.mmap(2 * g))
        del buf, grow
        collect()
        after = vm.stats
        assert (after.live_mappings, after.bytes_in_use) == (before.live_mappings, before.bytes_in_use)
        assert after.total_unmaps - before.total_unmaps == 3

    def test_growable_keeps_address(self, vm: Any) -> None:
        g = vm.granularity()
        buf = vm.growable(8 * g, g)
        ptr = buf.ptr
        assert buf.capacity == 8 * g
        buf.grow(3 * g + 1)
        assert buf.ptr == ptr
        assert buf.size == 3 * g + 1
        assert buf.mapped == 4 * g
        with pytest.raises(AMLValueError):
            buf.grow(9 * g)
        with pytest.raises(AMLValueError):
            buf.grow(g)
        vm.munmap(buf)

    def test_export_import_in_process(self, vm: Any) -> None:
        g = vm.granularity()
        phys = vm.create(g, exportable=True)
        try:
            fd = vm.export_fd(phys)
        except AMLNotSupported as exc:
            vm.release(phys)
            pytest.skip(f"shareable handles are not supported here: {exc}")
        try:
            other = vm.import_fd(fd, g)
            vm.release(other)
        finally:
            os.close(fd)
        if not phys.released:
            vm.release(phys)
