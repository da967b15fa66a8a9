"""The host backend: NUMA policy read back from the kernel, page placement, files,
huge pages, alignment, read-only mappings and deferred frees."""

from __future__ import annotations

import gc
import mmap
import os
import warnings
import weakref
from pathlib import Path
from typing import Any

import pytest

import aml_core
from aml_core import _os
from aml_core.errors import AMLDomainError, AMLFailure, AMLMemoryError, AMLTypeError, AMLValueError
from aml_core.host import HostArea, Policy, allowed_nodes, online_nodes
from aml_core.host.plugin import transparent_huge_pages
from tests.support.smaps import vm_flags

NODES = sorted(allowed_nodes())
PAGE = mmap.PAGESIZE


def _touch(buf: aml_core.Buffer) -> None:
    with memoryview(buf) as view:
        for off in range(0, buf.size, PAGE):
            view[off] = 0xA5


@pytest.mark.parametrize(
    ("policy", "nodes"),
    [
        (Policy.BIND, NODES[:1]),
        (Policy.PREFERRED, NODES[:1]),
        (Policy.INTERLEAVE, NODES),
        (Policy.BIND, NODES),
    ],
)
def test_policy_is_what_the_kernel_holds(policy: Policy, nodes: list[int]) -> None:
    with HostArea(policy, nodes) as area:
        buf = area.mmap(16 * PAGE)
        mode, kernel_nodes = area.policy_of(buf)
        assert mode is policy
        assert list(kernel_nodes) == nodes
        _touch(buf)
        placed = area.page_nodes(buf)
        assert len(placed) == 16
        assert all(node in nodes for node in placed), placed


def test_default_policy_has_no_nodes() -> None:
    with HostArea() as area:
        buf = area.mmap(PAGE)
        assert area.policy_of(buf) == (Policy.DEFAULT, ())
        _touch(buf)
        assert area.page_nodes(buf)[0] in online_nodes()


def test_untouched_pages_report_no_node() -> None:
    with HostArea() as area:
        buf = area.mmap(4 * PAGE)
        assert all(n < 0 for n in area.page_nodes(buf))


@pytest.mark.numa
def test_interleave_spreads_pages_over_nodes() -> None:
    if len(NODES) < 2:
        pytest.skip(f"needs two NUMA nodes, this machine allows {NODES}")
    with HostArea("interleave", NODES[:2]) as area:
        buf = area.mmap(64 * PAGE)
        _touch(buf)
        placed = area.page_nodes(buf)
        assert set(placed) == set(NODES[:2])


@pytest.mark.numa
def test_bind_to_each_node() -> None:
    if len(NODES) < 2:
        pytest.skip(f"needs two NUMA nodes, this machine allows {NODES}")
    for node in NODES:
        with HostArea("bind", [node]) as area:
            buf = area.mmap(8 * PAGE)
            _touch(buf)
            assert set(area.page_nodes(buf)) == {node}


def test_area_function_device_binds_to_that_node() -> None:
    area = aml_core.area("host", device=NODES[0], backend="host")
    assert isinstance(area, HostArea)
    assert area.policy is Policy.BIND
    assert area.nodes == (NODES[0],)
    area.close()
    area = aml_core.area("host", policy="interleave", nodes=NODES, backend="host")
    assert isinstance(area, HostArea)
    assert area.policy is Policy.INTERLEAVE
    area.close()


def test_node_outside_the_allowed_set_is_edom() -> None:
    outside = max(NODES) + 1
    with pytest.raises(AMLDomainError, match="outside"):
        HostArea("bind", [outside])
    with pytest.raises(AMLDomainError):
        aml_core.area("host", nodes=[outside], backend="host")
    # As a device index too: a node outside the allowed set is EDOM (issue 9).
    with pytest.raises(AMLDomainError, match=f"has no device {outside}"):
        aml_core.area("host", device=outside, backend="host")
    with pytest.raises(AMLDomainError, match=f"has no device {outside}"):
        aml_core.area("host", device=outside)


def test_shared_file_mapping(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"\0" * (3 * PAGE))
    with open(path, "r+b") as f, HostArea() as area:
        buf = area.mmap(PAGE, {"fd": f.fileno(), "offset": PAGE})
        with memoryview(buf) as view:
            view[:5] = b"hello"
        area.munmap(buf)
    assert path.read_bytes()[PAGE : PAGE + 5] == b"hello"
    assert path.read_bytes()[:5] == b"\0" * 5


def test_private_file_mapping_does_not_write_back(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"x" * PAGE)
    with open(path, "r+b") as f, HostArea() as area:
        buf = area.mmap(PAGE, {"fd": f.fileno(), "shared": False})
        with memoryview(buf) as view:
            assert bytes(view[:1]) == b"x"
            view[:1] = b"y"
        area.munmap(buf)
    assert path.read_bytes()[:1] == b"x"


def test_file_mapping_checks(tmp_path: Path) -> None:
    path = tmp_path / "small.bin"
    path.write_bytes(b"\0" * PAGE)
    with open(path, "r+b") as f, HostArea() as area:
        with pytest.raises(AMLValueError, match="pass its end"):
            area.mmap(2 * PAGE, {"fd": f.fileno()})
        with pytest.raises(AMLValueError, match="multiple of the page size"):
            area.mmap(16, {"fd": f.fileno(), "offset": 3})
    with HostArea() as area:
        with pytest.raises(AMLValueError, match="not an open file descriptor"):
            area.mmap(PAGE, {"fd": 987654})
        with pytest.raises(AMLValueError, match="only meaningful with fd"):
            area.mmap(PAGE, {"offset": PAGE})


def _free_huge_pages() -> int:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("HugePages_Free:"):
            return int(line.split()[1])
    return 0


def test_huge_pages() -> None:
    area = HostArea(huge_pages=True)
    if _free_huge_pages() == 0:
        with pytest.raises(AMLMemoryError) as info:
            area.mmap(1 << 20)
        assert "nr_hugepages" in str(info.value)
        assert info.value.native is not None
        assert info.value.native.name in ("ENOMEM", "EINVAL")
    else:
        buf = area.mmap(1 << 20)
        assert buf.ptr % area.huge_page_size == 0
        _touch(buf)
        area.munmap(buf)
    area.close()


def test_transparent_huge_page_advice_and_alignment() -> None:
    with HostArea(alignment=1 << 21, transparent_huge_pages=True) as area:
        bufs = [area.mmap(3 << 20) for _ in range(3)]
        assert all(b.ptr % (1 << 21) == 0 for b in bufs)
        buf = area.mmap(100, {"alignment": 1 << 16})
        assert buf.ptr % (1 << 16) == 0


THP = transparent_huge_pages() is not None  # the kernel has them (in whatever mode)


def _advised(ptr: int) -> bool:
    """Whether the mapping holding ``ptr`` carries MADV_HUGEPAGE (``hg`` in its VmFlags)."""
    return "hg" in vm_flags(ptr)


@pytest.mark.skipif(not THP, reason="this kernel has no transparent huge pages")
def test_large_mappings_are_advised_huge_pages_by_default_as_numpy_does() -> None:
    """ "auto": 4 MiB and more get MADV_HUGEPAGE (NumPy's rule for its arrays), smaller
    mappings do not, on the fast path (no policy) and the option path (a policy, options)."""
    from aml_core.host.area import THP_AUTO_MIN

    assert THP_AUTO_MIN == 4 << 20
    with HostArea() as area, HostArea(Policy.BIND, [min(allowed_nodes())]) as bound:
        assert area.transparent_huge_pages == "auto"
        for where in (area, bound):
            big, small = where.mmap(THP_AUTO_MIN), where.mmap(THP_AUTO_MIN - PAGE)
            with_options = where.mmap(8 << 20, {"alignment": 1 << 16})
            assert _advised(big.ptr)
            assert _advised(with_options.ptr)
            assert not _advised(small.ptr)
            memoryview(big)[-1] = 1  # the advice changes nothing of the bytes
            assert memoryview(big)[-1] == 1
            for buf in (big, small, with_options):
                where.munmap(buf)


@pytest.mark.skipif(not THP, reason="this kernel has no transparent huge pages")
def test_huge_page_advice_off_on_and_where_auto_does_not_apply() -> None:
    """False never advises; True advises every mapping; "auto" leaves file mappings, an
    ipc area's memfds and MAP_NORESERVE reservations alone (and raises nothing for them)."""
    with HostArea(transparent_huge_pages=False) as never, HostArea(transparent_huge_pages=True) as always:
        big = never.mmap(8 << 20)
        assert not _advised(big.ptr)
        never.munmap(big)
        page = always.mmap(PAGE)
        assert _advised(page.ptr)
        always.munmap(page)
    fd = os.memfd_create("aml-thp-test")
    try:
        os.ftruncate(fd, 8 << 20)
        with HostArea() as area, HostArea(ipc=True) as ipc:
            mapped = area.mmap(8 << 20, {"fd": fd})
            assert not _advised(mapped.ptr)
            area.munmap(mapped)
            sparse = area.mmap(8 << 20, {"flags": 0x4000})  # MAP_NORESERVE, <sys/mman.h>
            assert not _advised(sparse.ptr)
            area.munmap(sparse)
            shared = ipc.mmap(8 << 20)
            assert not _advised(shared.ptr)
            ipc.munmap(shared)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("value", "error"), [("yes", AMLValueError), (1, AMLTypeError), (None, AMLTypeError)]
)
def test_transparent_huge_pages_takes_a_bool_or_auto(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="transparent_huge_pages"):
        HostArea(transparent_huge_pages=value)  # type: ignore[arg-type]


def test_read_only_mapping() -> None:
    np = pytest.importorskip("numpy")
    with HostArea() as area:
        buf = area.mmap(PAGE, {"prot": mmap.PROT_READ})
        assert buf.readonly
        view = memoryview(buf)
        assert view.readonly
        arr = np.frombuffer(buf, dtype=np.uint8)
        assert not arr.flags.writeable
        assert arr[0] == 0
        del view, arr


def test_numpy_from_dlpack_on_host_memory() -> None:
    np = pytest.importorskip("numpy")
    with HostArea() as area:
        buf = area.mmap(1024)
        assert buf.__dlpack_device__() == (1, 0)
        arr = np.from_dlpack(buf)
        assert arr.ctypes.data == buf.ptr
        arr[:] = 7
        with memoryview(buf) as view:
            assert bytes(view[:3]) == b"\x07\x07\x07"
        del arr
        area.munmap(buf)


def test_close_defers_the_free_of_viewed_buffers() -> None:
    area = HostArea()
    buf = area.mmap(PAGE)
    view = memoryview(buf)
    view[0] = 9
    ptr = buf.ptr
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        area.close()
    assert any(issubclass(w.category, ResourceWarning) for w in caught)
    assert area.stats.live_mappings == 0
    assert view[0] == 9  # still mapped: the view keeps it alive
    assert ptr in area._orphans
    del buf
    view.release()
    del view
    gc.collect()
    assert ptr not in area._orphans


def test_an_unclosed_area_lives_as_long_as_its_buffers() -> None:
    """A buffer keeps its area alive; dropping both frees the mapping (the buffer's
    finalizer) and then the area, with nothing left to warn about."""
    area = HostArea()
    buf = area.mmap(PAGE)
    area_ref = weakref.ref(area)
    del area
    gc.collect()
    assert area_ref() is not None
    memoryview(buf)[0] = 7  # the memory is still mapped
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del buf
        gc.collect()
    assert area_ref() is None
    assert not caught


def test_unclosed_area_is_closed_by_the_collector() -> None:
    """An unclosed area still holding a mapping (its free failed once, so it keeps it for
    a retry) is collected when dropped, and the mapping freed (by the area's close() or
    the buffer's finalizer, whichever the collector runs first)."""
    area = HostArea()
    buf = area.mmap(PAGE)
    calls: list[int] = []

    def fail_once(buffer: Any) -> None:
        calls.append(buffer.ptr)
        if len(calls) == 1:
            raise AMLFailure("the native free failed")
        HostArea._free(buffer.area, buffer)

    area._free = fail_once  # type: ignore[method-assign]
    with pytest.raises(AMLFailure, match="the native free failed"):
        area.munmap(buf)
    ptr = buf.ptr
    del buf
    assert area.stats.live_mappings == 1  # kept for a retry although nothing references it
    area_ref = weakref.ref(area)
    del area
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # "unclosed", if the area goes first
        gc.collect()
    assert area_ref() is None
    assert calls == [ptr, ptr]


def test_os_module_errors_are_oserrors() -> None:
    with pytest.raises(OSError, match="munmap"):
        _os.munmap(3, 5)
    with pytest.raises(ValueError, match="outside"):
        _os.mbind(0, PAGE, 2, [5000], 0)
    assert os.sysconf("SC_PAGE_SIZE") == _os.PAGE_SIZE
