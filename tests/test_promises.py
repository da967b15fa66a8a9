"""The API's promises (issue: "an API that keeps its promises", section 3): a buffer's
``with`` block, strerror outside AML's codes, reprs for people, page_nodes summaries and
help() on the public constructors."""

from __future__ import annotations

import gc
import inspect
import mmap
import pydoc
import warnings

import attrs
import numpy as np
import pytest

import aml_core
from aml_core.errors import AMLValueError
from aml_core.host import NOT_TOUCHED, HostArea
from aml_core.specs import AreaStats, format_size

PAGE = mmap.PAGESIZE


# -- a buffer's with block ------------------------------------------------------------
def test_buffer_with_block_detaches_a_viewed_buffer() -> None:
    with HostArea() as area:
        with area.mmap(4 * PAGE) as buf:
            arr = np.frombuffer(buf, np.uint8)
            arr_w = np.frombuffer(memoryview(buf).cast("B"), np.uint8)
        # no AMLBusyError: the buffer left the area's live mappings, the memory did not go
        assert area.stats.live_mappings == 0
        assert area.stats.bytes_in_use == 0
        assert area.stats.total_unmaps == 1
        assert not buf.freed
        assert arr.size == 4 * PAGE
        # the memory is still there and readable through the views
        assert int(arr[PAGE]) == int(arr_w[PAGE])
        with pytest.raises(AMLValueError):
            area.munmap(buf)  # no longer live in the area
        ptr = buf.ptr
        assert ptr in area._orphans
        del arr, arr_w
        gc.collect()
        assert ptr in area._orphans  # the views are gone, the buffer object is not
        del buf
        gc.collect()
        assert ptr not in area._orphans  # released with the last view and the buffer object


def test_buffer_with_block_unmaps_an_unviewed_buffer() -> None:
    with HostArea() as area:
        with area.mmap(PAGE) as buf:
            pass
        assert buf.freed
        assert area.stats.live_mappings == 0
        assert not area._orphans


def _raise_inside_with(area: HostArea, keep: list[object]) -> None:
    with area.mmap(PAGE) as buf:
        keep.append(np.frombuffer(buf, np.uint8))
        raise KeyError("mine")


def test_buffer_with_block_never_masks_the_users_exception() -> None:
    keep: list[object] = []
    with HostArea() as area:
        with pytest.raises(KeyError) as info:
            _raise_inside_with(area, keep)
        assert info.value.__context__ is None
        assert area.stats.live_mappings == 0
        keep.clear()


def _raise_with_failing_free(area: HostArea, keep: list[aml_core.Buffer]) -> None:
    with area.mmap(PAGE) as buf:
        keep.append(buf)
        area._free = _failing_free  # type: ignore[method-assign]
        raise KeyError("mine")


def test_buffer_with_block_keeps_the_users_exception_when_the_unmap_fails() -> None:
    area = HostArea()
    keep: list[aml_core.Buffer] = []
    with pytest.warns(ResourceWarning, match="KeyError"), pytest.raises(KeyError) as info:
        _raise_with_failing_free(area, keep)
    assert info.value.__context__ is None
    del area._free
    area.close()
    assert keep[0].freed


def _failing_free(buffer: aml_core.Buffer) -> None:
    raise aml_core.AMLFailure("native free failed")


def test_buffer_with_block_after_the_area_closed() -> None:
    area = HostArea()
    with area.mmap(PAGE) as buf:
        area.close()
    assert buf.freed


def test_area_close_still_detaches_viewed_buffers() -> None:
    area = HostArea()
    buf = area.mmap(PAGE)
    view = memoryview(buf)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        area.close()
    assert any(issubclass(w.category, ResourceWarning) for w in caught)
    assert buf.ptr in area._orphans
    view.release()
    del buf, view
    gc.collect()
    assert not area._orphans


# -- strerror, reprs, sizes ------------------------------------------------------------
@pytest.mark.parametrize("code", [8, 22, -22, 1 << 40])
def test_strerror_says_a_value_is_not_an_aml_code(code: int) -> None:
    text = aml_core.strerror(code)
    assert text.startswith("Unknown error")
    assert f"{abs(code)} is not an AML error code (0..7)" in text


def test_closed_area_says_closed() -> None:
    area = HostArea()
    area.close()
    assert repr(area).endswith(" closed>")
    with pytest.raises(AMLValueError, match=r"^this host area \(host memory\) is closed$"):
        area.mmap(PAGE)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (4096, "4.0 KiB"),
        (64 << 20, "64.0 MiB"),
        (3 << 29, "1.5 GiB"),
        (5 << 40, "5.0 TiB"),
    ],
)
def test_format_size(n: int, text: str) -> None:
    assert format_size(n) == text


def test_reprs_and_stats_are_human_readable_fields_exact() -> None:
    with HostArea() as area:
        buf = area.mmap(64 << 20)
        assert "64.0 MiB" in repr(area)
        assert "size=64.0 MiB" in repr(buf)
        stats = area.stats
        assert stats.bytes_in_use == 64 << 20
        assert str(stats) == "64.0 MiB in use (peak 64.0 MiB), 1 live mappings, 1 maps, 0 unmaps"
        area.munmap(buf)
    assert AreaStats(peak_bytes=3 << 30).summary().startswith("0 B in use (peak 3.0 GiB)")


# -- page_nodes ------------------------------------------------------------------------
def test_page_nodes_summary_counts_pages_per_node() -> None:
    with HostArea() as area:
        buf = area.mmap(8 * PAGE)
        assert area.page_nodes(buf, summary=True) == {NOT_TOUCHED: 8}
        assert NOT_TOUCHED == -2
        with memoryview(buf) as view:
            for off in range(0, 3 * PAGE, PAGE):
                view[off] = 1
        per_page = area.page_nodes(buf)
        summary = area.page_nodes(buf, summary=True)
        assert summary[NOT_TOUCHED] == 5
        assert sum(summary.values()) == 8
        assert {n: per_page.count(n) for n in set(per_page)} == summary
        assert all(node >= 0 for node in per_page[:3])
        area.munmap(buf)


# -- help() ----------------------------------------------------------------------------
def _public_classes() -> list[type]:
    import aml_core.gpu
    import aml_core.host
    import aml_core.ipc

    classes = [
        obj
        for module in (aml_core, aml_core.host, aml_core.ipc)
        for obj in (getattr(module, name) for name in module.__all__)
        if inspect.isclass(obj)
    ]
    for name in ("GpuArea", "GpuBackend", "Stream", "VirtualMemory", "IpcImportArea", "GpuMmapOptions"):
        classes.append(getattr(aml_core.gpu, name))
    return classes


@pytest.mark.parametrize("cls", _public_classes(), ids=lambda c: c.__name__)
def test_help_explains_the_constructor(cls: type) -> None:
    init = cls.__dict__.get("__init__")
    if init is not None and not attrs.has(cls):  # attrs classes document their fields
        doc = inspect.getdoc(init) or ""
        params = [p for p in inspect.signature(init).parameters if p not in ("self", "args", "kwargs")]
        missing = [p for p in params if p not in doc]
        assert not missing, f"{cls.__name__}.__init__'s docstring does not explain {missing}"
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert "Initialize self.  See help(type(self))" not in text.split("Methods inherited")[0]
    assert cls.__doc__
    assert len(cls.__doc__.strip()) > 20


# -- the generic IPC types ---------------------------------------------------------------
def test_ipc_types_live_in_aml_core_ipc_and_stay_reachable_from_gpu() -> None:
    import pickle

    import aml_core.gpu
    import aml_core.gpu.ipc
    import aml_core.ipc

    for name in ("IpcHandle", "IpcExport"):
        cls = getattr(aml_core.ipc, name)
        assert cls.__module__ == "aml_core.ipc"
        assert getattr(aml_core, name) is cls
        assert getattr(aml_core.gpu, name) is cls  # every backend's import keeps working
        assert getattr(aml_core.gpu.ipc, name) is cls
    handle = aml_core.ipc.IpcHandle(backend="memfd", device=0, size=4096, data=b"/proc/1/fd/3", pid=1)
    assert pickle.loads(pickle.dumps(handle)) == handle
    with pytest.raises(aml_core.AMLTypeError):
        aml_core.ipc_open(object())  # type: ignore[arg-type]
