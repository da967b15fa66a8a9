"""The guide's third-party GPU backend (docs/backend-authoring.md, ``aml_cxl/api.py``) derives
from :class:`aml_core.gpu.backend.BackendBase` and works as the guide says: its areas by
kind, the probe, IPC and virtual memory from the base (ENOTSUP where its runtime lacks the
group), and no CUDA/HIP method it could not honour."""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from aml_core.errors import AMLNotSupported, AMLTypeError
from aml_core.gpu.backend import BackendBase, GpuBackend
from aml_core.specs import Kind

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "backend-authoring.md"
BLOCK = re.compile(r"```python\n# aml_cxl/api\.py[^\n]*\n(.*?)```", re.S)

#: The two modules the guide's block imports, written for the test.
RUNTIME = """
from aml_core.buffer import DLDeviceType
from aml_core.errors import ErrorTable
from aml_core.gpu.runtime import Runtime, RuntimeTraits
from aml_core.specs import Capability, DeviceInfo


class CxlRuntime(Runtime):
    traits = RuntimeTraits("cxl", DLDeviceType.CPU, DLDeviceType.CPU, DLDeviceType.CPU, versions={"cxl": "1"})
    errors = ErrorTable("cxl", {})

    def device_count(self) -> int:
        return 2

    def get_device(self) -> int:
        return 0

    def synchronize(self) -> None:
        pass

    def _set_device(self, device: int) -> None:
        pass

    def _device_info(self, device: int) -> DeviceInfo:
        return DeviceInfo(index=device, name=f"expander {device}", capabilities=Capability.DLPACK)
"""
AREA = """
from aml_core.host import HostArea


class CxlArea(HostArea):
    def __init__(self, runtime: object, device: int) -> None:
        super().__init__()
        self.cxl_device = device
"""


@pytest.fixture
def cxl(tmp_path: Path) -> Iterator[ModuleType]:
    (block,) = BLOCK.findall(GUIDE.read_text())
    package = tmp_path / "aml_cxl"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "runtime.py").write_text(textwrap.dedent(RUNTIME))
    (package / "area.py").write_text(textwrap.dedent(AREA))
    (package / "api.py").write_text(block)
    sys.path.insert(0, str(tmp_path))
    try:
        import aml_cxl.api

        yield aml_cxl.api
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "aml_cxl" or m.startswith("aml_cxl.")]:
            del sys.modules[name]


def test_the_guide_s_gpu_backend_derives_from_the_base(cxl: ModuleType) -> None:
    backend = cxl.BACKEND
    assert isinstance(backend, BackendBase)
    assert not isinstance(backend, GpuBackend)
    for cuda_only in ("create", "stream", "unified_area", "copy_peer", "enable_peer_access"):
        assert not hasattr(backend, cuda_only), cuda_only
    probe = backend.probe()
    assert probe.available
    assert [d.name for d in probe.devices] == ["expander 0", "expander 1"]
    with backend.create_area(Kind.DEVICE, 1) as area:
        assert area.cxl_device == 1
        area.munmap(area.mmap(4096))
    with pytest.raises(AMLNotSupported, match="cxl provides device memory, not host"):
        backend.create_area(Kind.HOST)
    with pytest.raises(AMLTypeError, match="unknown cxl area options"):
        backend.create_area(Kind.DEVICE, colour="blue")
    with pytest.raises(AMLNotSupported, match="cxl has no ipc operations"):
        backend.ipc_open(object())
    with pytest.raises(AMLNotSupported, match="cxl has no virtual memory operations"):
        backend.virtual_memory(0)
