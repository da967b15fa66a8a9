"""The protocols a pool asks its area through (aml_core.protocols): which areas implement
which, and that the pool offers a feature exactly when its area's protocol is there (with
the messages it gave when it tested for GPU types). The GPU virtual-memory area and a real
runtime's stream operations are tried on the HIP double (backends/hip/tests/test_hip_pool.py)."""

from __future__ import annotations

import pytest

import aml_core
from aml_core.errors import AMLNotSupported
from aml_core.gpu import GpuArea, GpuFlags
from aml_core.host import HostArea
from aml_core.protocols import (
    CudaArrayInterfaceArea,
    DeviceCopies,
    DmabufExporter,
    GrowableMemory,
    IpcExporter,
    PoolBinding,
    StreamOrderedArea,
)

from .test_groups import HostAllocation

ALL = (
    CudaArrayInterfaceArea,
    DeviceCopies,
    DmabufExporter,
    GrowableMemory,
    IpcExporter,
    PoolBinding,
    StreamOrderedArea,
)


def _implemented(area: object) -> set[type]:
    return {p for p in ALL if isinstance(area, p)}


def test_a_gpu_area_implements_what_a_pool_uses() -> None:
    with GpuArea(HostAllocation(), 0, GpuFlags.DEFAULT) as area:
        assert _implemented(area) == {
            CudaArrayInterfaceArea,
            DeviceCopies,
            DmabufExporter,
            IpcExporter,
            PoolBinding,
            StreamOrderedArea,
        }
        # A runtime without the STREAMS group: the protocol is there, the operations are
        # not, and the runtime says why (so for IPC, which dma-buf export is a part of).
        with pytest.raises(AMLNotSupported):
            area.stream_ordering()
        buf = area.mmap(64)
        with pytest.raises(AMLNotSupported, match="no ipc operations"):
            area.export_dmabuf(buf)
        area.munmap(buf)


def test_a_host_area_implements_ipc_exporter_only() -> None:
    """Every host area has ipc_export; only an ipc area's buffers can be exported."""
    with HostArea() as area:
        assert _implemented(area) == {IpcExporter}
        with pytest.raises(AMLNotSupported, match="ipc=True"):
            area.ipc_export(area.mmap(64))


def test_a_pool_is_device_copies_and_ipc_exporter_itself() -> None:
    with HostArea() as host, aml_core.pool(host) as pool:
        assert _implemented(pool) == {CudaArrayInterfaceArea, DeviceCopies, DmabufExporter, IpcExporter}
        # ... but offers them only where its area does
        buf = pool.mmap(64)
        assert not hasattr(buf, "__cuda_array_interface__")
        with pytest.raises(AMLNotSupported, match="has no write"):
            pool.write(buf, b"x")
        with pytest.raises(AMLNotSupported, match="ipc=True"):
            pool.ipc_export(buf)
        with pytest.raises(AMLNotSupported, match="cannot be exported as a dma-buf"):
            pool.export_dmabuf(buf)
        with pytest.raises(AMLNotSupported, match=r"HostArea \(host backend, host memory\) cannot export"):
            aml_core.export_dmabuf(host.mmap(64))
        with pytest.raises(AMLNotSupported, match="no runtime"):
            pool.mmap(64, stream=1)
        pool.munmap(buf)


def test_a_pool_over_a_gpu_area_copies_through_it() -> None:
    with GpuArea(HostAllocation(), 0, GpuFlags.DEFAULT) as area, aml_core.pool(area) as pool:
        a, b = pool.mmap(100), pool.mmap(100)
        assert b.__cuda_array_interface__["data"] == (b.device_ptr, False)
        pool.write(a, b"first!", 10)
        pool.write(b, b"pooled", 10)
        assert (pool.read(a, 6, 10), pool.read(b, 6, 10)) == (b"first!", b"pooled")
        slab, offset = pool.slab_of(b)
        assert slab is not None
        assert area.read(slab, 6, offset + 10) == b"pooled"  # the bytes are in the area's slab
        pool.munmap(a)
        pool.munmap(b)


def test_a_pool_binds_to_the_device_its_area_names() -> None:
    with GpuArea(HostAllocation(), -1, GpuFlags.DEFAULT) as area, aml_core.pool(area) as pool:
        assert area.device == -1
        assert pool.device == 0  # the current device when the pool was made
    with HostArea() as host, aml_core.pool(host) as plain:
        assert plain.device == host.device
