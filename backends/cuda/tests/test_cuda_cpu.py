"""CPU-only tests of aml-cuda (they run in CI, where cuda-bindings is installed and
there is no driver): the plugin and the registry, the unavailable paths of the probe,
the error tables, the public API and the shared device-selection logic."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from typing import Any

import aml_cuda
import pytest
from cuda_helpers import child_env, gpu_available

import aml_core
from aml_core.errors import (
    AMLBusyError,
    AMLFailure,
    AMLMemoryError,
    AMLNotSupported,
    AMLPermissionError,
    AMLTypeError,
    AMLValueError,
    ErrorCode,
)
from aml_core.gpu import GpuBackend, GpuFlags
from aml_core.specs import Capability, Kind

rt_mod = pytest.importorskip("cuda.bindings.runtime")
drv_mod = pytest.importorskip("cuda.bindings.driver")

from aml_cuda import errors as cuda_errors  # noqa: E402  (after the importorskip)

E = rt_mod.cudaError_t
R = drv_mod.CUresult


def _installed() -> bool:
    try:
        metadata.distribution("aml-cuda")
    except metadata.PackageNotFoundError:
        return False
    return True


# -- plugin and registry -------------------------------------------------------------------
def test_plugin_import_is_cheap() -> None:
    code = (
        "import sys, aml_cuda.plugin\n"
        "print(sorted(m for m in sys.modules if m.startswith(('cuda', 'aml_core.gpu', 'aml_cuda'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        env=child_env(),
        check=True,
    )
    loaded = json.loads(out.stdout.strip().replace("'", '"'))
    assert "aml_cuda.plugin" in loaded
    assert not [m for m in loaded if m.startswith("cuda")], loaded
    # Only the lazy package, its plugin helper and the group names the declared
    # capabilities derive from: no runtime, area, IPC, VMM or native code.
    assert [m for m in loaded if m.startswith("aml_core.gpu")] == [
        "aml_core.gpu",
        "aml_core.gpu.groups",
        "aml_core.gpu.plugin",
    ]
    assert "aml_cuda.api" not in loaded
    # Self time of aml-cuda's own modules (the rest is aml_core, imported anyway).
    own = 0
    for line in out.stderr.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2].strip().startswith("aml_cuda"):
            own += int(parts[0].split(":")[-1])
    assert own < 20_000, f"aml_cuda modules took {own} us to import"


def test_plugin_descriptor() -> None:
    from aml_cuda import plugin

    (desc,) = plugin.aml_backends()
    assert desc.name == "cuda"
    assert desc.priority == 100
    assert desc.kinds == frozenset(Kind)
    for cap in (Capability.MANAGED, Capability.VIRTUAL_MEMORY, Capability.IPC, Capability.DLPACK):
        assert cap in desc.capabilities
    assert desc.ipc_open is not None


@pytest.mark.skipif(not _installed(), reason="aml-cuda is not installed (entry points need a distribution)")
def test_registry_lists_cuda() -> None:
    aml_core.registry.reset()
    statuses = {s.name: s for s in aml_core.backends()}
    st = statuses["cuda"]
    assert st.distribution == "aml-cuda"
    assert st.priority == 100
    if st.available:
        assert st.detail
        assert not st.reason
    else:
        assert st.reason
        assert not st.devices


@pytest.mark.skipif(not _installed(), reason="aml-cuda is not installed (entry points need a distribution)")
def test_aml_info_lists_cuda() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "aml_core", "info", "--json"],
        capture_output=True,
        text=True,
        env=child_env(),
        check=True,
    )
    data = json.loads(out.stdout)
    (cuda,) = [b for b in data["backends"] if b["name"] == "cuda"]
    assert cuda["distribution"] == "aml-cuda"
    assert cuda["priority"] == 100
    if gpu_available():
        assert cuda["reason"] is None
        assert cuda["detail"]
        assert cuda["available"] is True
        assert cuda["devices"][0]["details"]["compute_capability"]
        assert data["chosen"]["device"]["backend"] == "cuda"
    else:
        assert cuda["reason"]
        assert cuda["available"] is False
    text = subprocess.run(
        [sys.executable, "-m", "aml_core", "info"],
        capture_output=True,
        text=True,
        env=child_env(),
        check=True,
    ).stdout
    assert "cuda  (aml-cuda" in text


# -- the probe's unavailable paths ------------------------------------------------------------
@pytest.mark.skipif(gpu_available(), reason="a CUDA GPU is present: the no-driver path is not reachable")
def test_probe_without_driver() -> None:
    """This machine (and CI) has cuda-bindings and no NVIDIA driver."""
    result = aml_cuda.probe()
    assert result.available is False
    # The probe's precheck finds no libcuda.so.1 before cuda-bindings is imported.
    assert result.reason.startswith("no NVIDIA driver: libcuda.so.1 cannot be loaded")
    assert result.devices == ()
    # Past the precheck, the runtime says the same through cudaGetDeviceCount.
    assert aml_cuda.plugin.precheck() == result.reason
    with pytest.raises(AMLNotSupported) as count:
        aml_cuda.get_runtime().device_count()
    assert count.value.native is not None
    assert count.value.native.name in ("cudaErrorInsufficientDriver", "cudaErrorNoDevice")
    # Creating an area, a default area, virtual memory or a stream says why, with one
    # error and one wording; it never crashes.
    for entry in (
        lambda: aml_cuda.create(0),
        aml_cuda.default_area,
        aml_cuda.unified_area,
        lambda: aml_cuda.virtual_memory(0),
        aml_cuda.stream,
    ):
        with pytest.raises(AMLNotSupported, match=r"^no usable cuda device: ") as info:
            entry()
        assert info.value.native is not None
        assert info.value.native.function == "cudaGetDeviceCount"
        assert info.value.native.name in ("cudaErrorInsufficientDriver", "cudaErrorNoDevice")
    with pytest.raises(AMLNotSupported):
        aml_core.area(kind="device", backend="cuda")


@pytest.mark.skipif(gpu_available(), reason="a CUDA GPU is present: the no-driver path is not reachable")
def test_driver_api_without_driver() -> None:
    """cuda.bindings.driver raises a cuda.pathfinder error on its first call when
    libcuda.so.1 is missing: aml turns it into ENOTSUP."""
    from aml_cuda.runtime import CudaRuntime

    rt = CudaRuntime()
    with pytest.raises(AMLNotSupported, match=r"libcuda\.so\.1"):
        rt.device_info(0)
    with pytest.raises(AMLNotSupported):
        rt.vmm_granularity(0, False)


class _Proxy:
    """A module stand-in: the named functions replaced, the rest from the real one."""

    def __init__(self, real: Any, **replaced: Any) -> None:
        self._real = real
        self.__dict__.update(replaced)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (E.cudaErrorInsufficientDriver, "no usable NVIDIA driver"),
        (E.cudaErrorNoDevice, "no CUDA device"),
        (E.cudaErrorUnknown, "cudaErrorUnknown"),
    ],
)
def test_probe_reasons(monkeypatch: pytest.MonkeyPatch, code: Any, words: str) -> None:
    from aml_cuda import calls as calls_mod

    monkeypatch.setattr(calls_mod, "_rt", _Proxy(rt_mod, cudaGetDeviceCount=lambda: (code, None)))
    backend = GpuBackend("cuda", aml_cuda.load_runtime)
    result = backend.probe()
    assert result.available is False
    assert words in result.reason
    assert code.name in result.reason


def test_probe_no_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    from aml_cuda import calls as calls_mod

    monkeypatch.setattr(calls_mod, "_rt", _Proxy(rt_mod, cudaGetDeviceCount=lambda: (E.cudaSuccess, 0)))
    result = GpuBackend("cuda", aml_cuda.load_runtime).probe()
    assert result.available is False
    assert "no cuda device" in result.reason


def test_probe_missing_driver_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver library missing while the runtime reports devices (the driver API's
    own failure mode): device_info is ENOTSUP and the probe says why."""
    from aml_cuda import calls as calls_mod

    class DynamicLibNotFoundError(RuntimeError):
        pass

    def no_lib(*args: Any) -> Any:
        raise DynamicLibNotFoundError(
            '"cuda" is an NVIDIA driver library and can only be found via system search'
        )

    monkeypatch.setattr(calls_mod, "_rt", _Proxy(rt_mod, cudaGetDeviceCount=lambda: (E.cudaSuccess, 1)))
    monkeypatch.setattr(calls_mod, "_drv", _Proxy(drv_mod, cuInit=no_lib))
    result = GpuBackend("cuda", aml_cuda.load_runtime).probe()
    assert result.available is False
    assert "libcuda.so.1" in result.reason
    assert "DynamicLibNotFoundError" in result.reason


def test_probe_without_cuda_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    result = GpuBackend("cuda", aml_cuda.load_runtime).probe()
    assert result.available is False
    assert "cuda-bindings is not installed" in result.reason


def test_probe_with_old_cuda_bindings(monkeypatch: pytest.MonkeyPatch) -> None:
    import cuda.bindings

    monkeypatch.setattr(cuda.bindings, "__version__", "12.9.2")
    result = GpuBackend("cuda", aml_cuda.load_runtime).probe()
    assert result.available is False
    assert "cuda-bindings>=13" in result.reason
    assert "12.9.2" in result.reason


def test_probe_without_cuda_bindings_in_a_fresh_process() -> None:
    code = (
        "import sys; sys.modules['cuda.bindings'] = None\n"
        "import aml_core, aml_cuda, aml_cuda.api\n"
        "aml_cuda.api.BACKEND._precheck = None  # as on a machine with a driver\n"
        "r = aml_cuda.probe(); print(r.available, r.reason)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), check=True
    )
    assert out.stdout.startswith("False cuda-bindings is not installed")


# -- error tables ----------------------------------------------------------------------------
RUNTIME_ROWS = [
    (E.cudaErrorInsufficientDriver, ErrorCode.ENOTSUP, AMLNotSupported),
    (E.cudaErrorNoDevice, ErrorCode.ENOTSUP, AMLNotSupported),
    (E.cudaErrorMemoryAllocation, ErrorCode.ENOMEM, AMLMemoryError),
    (E.cudaErrorInvalidValue, ErrorCode.EINVAL, AMLValueError),
    (E.cudaErrorInvalidDevice, ErrorCode.EINVAL, AMLValueError),
    (E.cudaErrorDeviceAlreadyInUse, ErrorCode.EBUSY, AMLBusyError),
    (E.cudaErrorDevicesUnavailable, ErrorCode.EBUSY, AMLBusyError),
    (E.cudaErrorInitializationError, ErrorCode.FAILURE, AMLFailure),
    (E.cudaErrorNotSupported, ErrorCode.ENOTSUP, AMLNotSupported),
    (E.cudaErrorPeerAccessUnsupported, ErrorCode.ENOTSUP, AMLNotSupported),
    (E.cudaErrorNotPermitted, ErrorCode.EPERM, AMLPermissionError),
    # the peer calls' "already enabled" / "not enabled" are answers of the idempotent
    # enable/disable, not in the table: any other call meeting them is FAILURE
    (E.cudaErrorPeerAccessAlreadyEnabled, ErrorCode.FAILURE, AMLFailure),
    (E.cudaErrorPeerAccessNotEnabled, ErrorCode.FAILURE, AMLFailure),
    (E.cudaErrorUnknown, ErrorCode.FAILURE, AMLFailure),
    (E.cudaErrorIllegalAddress, ErrorCode.FAILURE, AMLFailure),
    (E.cudaErrorInvalidResourceHandle, ErrorCode.FAILURE, AMLFailure),
]


@pytest.mark.parametrize(("native", "code", "cls"), RUNTIME_ROWS, ids=lambda v: getattr(v, "name", None))
def test_runtime_table(native: Any, code: ErrorCode, cls: type[Exception]) -> None:
    table = cuda_errors.RUNTIME_ERRORS
    assert table.translate(int(native)) is code
    err = table.error("cudaMalloc", int(native))
    assert type(err) is cls
    assert err.code is code
    assert err.native is not None
    assert err.native.backend == "cuda"
    assert err.native.function == "cudaMalloc"
    assert err.native.code == int(native)
    assert err.native.name == native.name  # from cudaGetErrorName
    with pytest.raises(cls):
        table.check("cudaMalloc", int(native))
    table.check("cudaMalloc", 0)  # success does not raise


def test_runtime_table_numbers() -> None:
    """docs/aml-contract.md#cuda-area's rows, by number as well as by name (the bindings' enum values)."""
    assert {k: v.name for k, v in cuda_errors.RUNTIME_MAPPING.items()} == {
        35: "ENOTSUP",
        100: "ENOTSUP",
        2: "ENOMEM",
        1: "EINVAL",
        101: "EINVAL",
        216: "EBUSY",
        46: "EBUSY",
        3: "FAILURE",
        801: "ENOTSUP",
        217: "ENOTSUP",
        800: "EPERM",
    }


DRIVER_ROWS = [
    (R.CUDA_ERROR_NO_DEVICE, ErrorCode.ENOTSUP),
    (R.CUDA_ERROR_STUB_LIBRARY, ErrorCode.ENOTSUP),
    (R.CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, ErrorCode.ENOTSUP),
    (R.CUDA_ERROR_OUT_OF_MEMORY, ErrorCode.ENOMEM),
    (R.CUDA_ERROR_INVALID_VALUE, ErrorCode.EINVAL),
    (R.CUDA_ERROR_INVALID_DEVICE, ErrorCode.EINVAL),
    (R.CUDA_ERROR_CONTEXT_ALREADY_IN_USE, ErrorCode.EBUSY),
    (R.CUDA_ERROR_DEVICE_UNAVAILABLE, ErrorCode.EBUSY),
    (R.CUDA_ERROR_NOT_INITIALIZED, ErrorCode.FAILURE),
    (R.CUDA_ERROR_NOT_SUPPORTED, ErrorCode.ENOTSUP),
    (R.CUDA_ERROR_NOT_PERMITTED, ErrorCode.EPERM),
    (R.CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, ErrorCode.ENOTSUP),
    (R.CUDA_ERROR_NOT_MAPPED, ErrorCode.FAILURE),
    (R.CUDA_ERROR_UNKNOWN, ErrorCode.FAILURE),
]


@pytest.mark.parametrize(("native", "code"), DRIVER_ROWS, ids=lambda v: getattr(v, "name", None))
def test_driver_table(native: Any, code: ErrorCode) -> None:
    table = cuda_errors.DRIVER_ERRORS
    assert table.translate(int(native)) is code
    err = table.error("cuMemCreate", int(native))
    assert err.code is code
    assert err.native is not None
    assert err.native.name == native.name  # cuGetErrorName, or the enum's name without a driver


@pytest.mark.parametrize(
    "table", [cuda_errors.RUNTIME_ERRORS, cuda_errors.DRIVER_ERRORS], ids=["runtime", "driver"]
)
@pytest.mark.parametrize("code", [12345, 999_999, -7, 1 << 40])
def test_unknown_code_is_failure(table: Any, code: int) -> None:
    assert table.translate(code) is ErrorCode.FAILURE
    err = table.error("cudaSomething", code)
    assert isinstance(err, AMLFailure)
    assert err.native is not None
    assert isinstance(err.native.name, str)  # a name, never an exception


def test_error_names_never_raise() -> None:
    for name_of in (cuda_errors.runtime_error_name, cuda_errors.driver_error_name):
        for code in (0, 2, 35, 12345, -1, 1 << 40):
            assert isinstance(name_of(code), str)
    assert cuda_errors.runtime_error_name(2) == "cudaErrorMemoryAllocation"
    assert cuda_errors.driver_error_name(2) == "CUDA_ERROR_OUT_OF_MEMORY"


def test_no_native_code_maps_to_success() -> None:
    for table in (cuda_errors.RUNTIME_ERRORS, cuda_errors.DRIVER_ERRORS):
        assert ErrorCode.SUCCESS not in set(table.mapping.values())


# -- public API ------------------------------------------------------------------------------
def test_public_api() -> None:
    for name in aml_cuda.__all__:
        assert getattr(aml_cuda, name) is not None, name
    assert set(aml_cuda.__all__) <= set(dir(aml_cuda))
    assert aml_cuda.CudaFlags is GpuFlags
    F = aml_cuda.CudaFlags
    assert (F.DEFAULT, F.ALLOC_HOST, F.ALLOC_UNIFIED, F.ALLOC_MAPPED, F.ALLOC_GLOBAL) == (0, 1, 2, 4, 8)
    assert aml_cuda.BACKEND.name == "cuda"
    assert isinstance(aml_cuda.BACKEND, GpuBackend)
    with pytest.raises(AttributeError):
        aml_cuda.no_such_name  # noqa: B018


@pytest.mark.parametrize("flags", [16, 1 << 10, -1, 0x1F])
def test_bad_flags_are_einval(flags: int) -> None:
    """Flags are checked before anything native: EINVAL with or without a GPU."""
    with pytest.raises(AMLValueError, match="flag"):
        aml_cuda.create(0, flags)


@pytest.mark.parametrize("flags", [1.5, "0", None, True])
def test_flags_of_the_wrong_type(flags: Any) -> None:
    with pytest.raises(AMLTypeError):
        aml_cuda.create(0, flags)


@pytest.mark.parametrize("device", [1.0, "0", None, True])
def test_device_of_the_wrong_type(device: Any) -> None:
    with pytest.raises(AMLTypeError):
        aml_cuda.create(device, 0)


def test_runtime_traits() -> None:
    from aml_cuda.runtime import CudaRuntime

    rt = CudaRuntime()
    t = rt.traits
    assert (t.name, t.dl_device, t.dl_host, t.dl_managed) == ("cuda", 2, 3, 13)
    assert t.advices == frozenset(range(1, 7))
    assert t.range_attributes == frozenset(range(1, 9))
    assert "cuda-bindings" in t.version
    assert isinstance(rt, aml_core.gpu.Runtime)
    assert rt.groups() == frozenset(aml_core.gpu.Group)


# -- the shared device-selection logic, over a recording runtime --------------------------------
def _recorder(fail: bool) -> Any:
    """A CudaRuntime whose devices and device allocation are recorded: two devices, the
    caller on device 1, an allocation that fails on demand."""
    from aml_cuda.runtime import CudaRuntime

    class Recorder(CudaRuntime):
        def __init__(self) -> None:
            super().__init__()
            self.current = 1
            self.calls: list[tuple[str, int]] = []
            self.fail = fail

        def device_count(self) -> int:
            return 2

        def get_device(self) -> int:
            return self.current

        def _set_device(self, device: int) -> None:
            self.calls.append(("set_device", device))
            self.current = device

        def _malloc(self, size: int) -> int:
            self.calls.append(("malloc", self.current))
            if self.fail:
                raise self.errors.error("cudaMalloc", int(E.cudaErrorMemoryAllocation))
            # A new address each time: aml refuses a "successful" allocation that hands
            # out an address already live in the area (issue 9).
            self.next_ptr = getattr(self, "next_ptr", 0x7000_0000) + 0x10_0000
            return self.next_ptr

        def _free(self, ptr: int) -> None:
            self.calls.append(("free", self.current))

    return Recorder()


@pytest.mark.parametrize("fail", [False, True], ids=["ok", "oom"])
def test_device_selection_is_restored(fail: bool) -> None:
    from aml_core.gpu import GpuArea

    rec = _recorder(fail)
    area = GpuArea(rec, 0, GpuFlags.DEFAULT)
    if fail:
        with pytest.raises(AMLMemoryError) as info:
            area.mmap(1 << 20)
        assert isinstance(info.value, MemoryError)
        assert info.value.native is not None
        assert info.value.native.name == "cudaErrorMemoryAllocation"
    else:
        buf = area.mmap(1 << 20)
        assert buf.device == 0
        assert buf.__dlpack_device__() == (2, 0)
    assert rec.calls[:3] == [("set_device", 0), ("malloc", 0), ("set_device", 1)]
    assert rec.current == 1
    # options.device overrides the area's device; -1 means the current one.
    rec.calls.clear()
    rec.fail = False
    buf2 = area.mmap(4096, {"device": -1})
    assert buf2.device == 1
    assert rec.calls == [("malloc", 1)]
    with pytest.raises(AMLValueError):
        area.mmap(4096, {"device": 2})
    area.close()


def test_free_memory_without_nvml_is_not_known(monkeypatch: pytest.MonkeyPatch) -> None:
    """No NVML (here: cuda-bindings without its NVML module): free memory is None, the
    reason is kept, and the failed load is not retried."""
    import sys

    from aml_cuda import nvml

    monkeypatch.setattr(nvml, "_nvml", None)
    monkeypatch.setattr(nvml, "_why_not", None)
    import cuda.bindings

    # import raises ImportError (the package attribute too: a probe may have imported it)
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvml", None)
    monkeypatch.delattr(cuda.bindings, "nvml", raising=False)
    assert nvml.free_memory("0000:00:00.0") is None
    reason = nvml.unavailable_reason()
    assert reason is not None
    assert "no NVML module" in reason
    monkeypatch.delitem(sys.modules, "cuda.bindings.nvml")
    assert nvml.free_memory("0000:00:00.0") is None  # not retried
    assert nvml.unavailable_reason() == reason


class _FakeNvml:
    """cuda.bindings.nvml's calls, answering what a test sets."""

    class NvmlError(Exception):
        pass

    def __init__(self, free: int, total: int, fail: bool = False) -> None:
        self.free, self.total, self.fail = free, total, fail
        self.asked: list[str] = []

    def device_get_handle_by_pci_bus_id_v2(self, bus: str) -> int:
        self.asked.append(bus)
        if self.fail:
            raise self.NvmlError("NotSupported")
        return 7

    def device_get_memory_info_v2(self, handle: int) -> Any:
        assert handle == 7
        return type("Memory_v2", (), {"free": self.free, "total": self.total})()


@pytest.mark.parametrize(
    ("free", "total", "fail", "expected"),
    [
        (5 << 30, 80 << 30, False, 5 << 30),
        (90 << 30, 80 << 30, False, None),
        (-1, 80 << 30, False, None),
        (1, 2, True, None),
    ],
    ids=["answer", "more-free-than-total", "negative", "driver-refuses"],
)
def test_free_memory_checks_what_nvml_says(
    monkeypatch: pytest.MonkeyPatch, free: int, total: int, fail: bool, expected: int | None
) -> None:
    from aml_cuda import nvml

    fake = _FakeNvml(free, total, fail)
    monkeypatch.setattr(nvml, "_nvml", fake)
    assert nvml.free_memory("0000:19:00.0") == expected
    assert fake.asked == ["0000:19:00.0"]


# -- peer access: the translation of CUDA's answers (docs/aml-contract.md#peer-access) ----------
class _PeerRuntime:
    """cuda.bindings.runtime's peer calls, answering as CUDA does, recorded."""

    def __init__(self, enable: Any = 0, disable: Any = 0, can: int = 1, copy: Any = 0) -> None:
        self.answers = {"enable": enable, "disable": disable, "copy": copy}
        self.can = can
        self.calls: list[tuple[Any, ...]] = []

    def cudaDeviceCanAccessPeer(self, device: int, peer: int) -> tuple[Any, int]:
        self.calls.append(("cudaDeviceCanAccessPeer", device, peer))
        return E.cudaSuccess, self.can

    def cudaDeviceEnablePeerAccess(self, peer: int, flags: int) -> tuple[Any]:
        self.calls.append(("cudaDeviceEnablePeerAccess", peer, flags))
        return (E(self.answers["enable"]),)

    def cudaDeviceDisablePeerAccess(self, peer: int) -> tuple[Any]:
        self.calls.append(("cudaDeviceDisablePeerAccess", peer))
        return (E(self.answers["disable"]),)

    def cudaMemcpyPeer(self, dst: int, dst_device: int, src: int, src_device: int, size: int) -> tuple[Any]:
        self.calls.append(("cudaMemcpyPeer", dst, dst_device, src, src_device, size))
        return (E(self.answers["copy"]),)

    def cudaStreamSynchronize(self, stream: int) -> tuple[Any]:
        self.calls.append(("cudaStreamSynchronize", stream))
        return (E.cudaSuccess,)


def _peer_runtime(monkeypatch: pytest.MonkeyPatch, fake: _PeerRuntime) -> Any:
    from aml_cuda import calls as calls_mod

    cleared: list[int] = []
    monkeypatch.setattr(
        calls_mod,
        "_rt",
        _Proxy(
            rt_mod,
            **{
                name: getattr(fake, name)
                for name in (
                    "cudaDeviceCanAccessPeer",
                    "cudaDeviceEnablePeerAccess",
                    "cudaDeviceDisablePeerAccess",
                    "cudaMemcpyPeer",
                    "cudaStreamSynchronize",
                )
            },
        ),
    )
    monkeypatch.setattr(calls_mod, "_cudaGetLastError", lambda: cleared.append(1) or (E.cudaSuccess,))
    rec = _recorder(False)  # two devices, the caller on device 1
    rec.cleared = cleared
    return rec


@pytest.mark.parametrize(
    ("answer", "result"),
    [(E.cudaSuccess, True), (E.cudaErrorPeerAccessAlreadyEnabled, False)],
    ids=["enabled", "already"],
)
def test_enable_peer_access_is_idempotent(monkeypatch: pytest.MonkeyPatch, answer: Any, result: bool) -> None:
    fake = _PeerRuntime(enable=answer)
    rec = _peer_runtime(monkeypatch, fake)
    assert rec.enable_peer_access(1, device=0) is result
    assert fake.calls == [("cudaDeviceCanAccessPeer", 0, 1), ("cudaDeviceEnablePeerAccess", 1, 0)]
    assert rec.calls == [("set_device", 0), ("set_device", 1)]  # device 0 selected, 1 restored
    assert rec.cleared == ([] if result else [1])  # "already enabled" leaves no last error


@pytest.mark.parametrize(
    ("answer", "result"),
    [(E.cudaSuccess, True), (E.cudaErrorPeerAccessNotEnabled, False)],
    ids=["disabled", "not-enabled"],
)
def test_disable_peer_access_is_idempotent(
    monkeypatch: pytest.MonkeyPatch, answer: Any, result: bool
) -> None:
    fake = _PeerRuntime(disable=answer)
    rec = _peer_runtime(monkeypatch, fake)
    assert rec.disable_peer_access(0) is result  # from the current device, 1
    assert fake.calls[-1] == ("cudaDeviceDisablePeerAccess", 0)
    assert rec.calls == []
    assert rec.cleared == ([] if result else [1])


@pytest.mark.parametrize(
    ("answer", "cls"),
    [
        (E.cudaErrorInvalidDevice, AMLValueError),
        (E.cudaErrorPeerAccessUnsupported, AMLNotSupported),
        (E.cudaErrorTooManyPeers, AMLFailure),
        (E.cudaErrorPeerAccessNotEnabled, AMLFailure),  # not an answer of enable
    ],
)
def test_enable_peer_access_errors(
    monkeypatch: pytest.MonkeyPatch, answer: Any, cls: type[Exception]
) -> None:
    rec = _peer_runtime(monkeypatch, _PeerRuntime(enable=answer))
    with pytest.raises(cls) as info:
        rec.enable_peer_access(1, device=0)
    assert info.value.native.function == "cudaDeviceEnablePeerAccess"  # type: ignore[attr-defined]
    assert info.value.native.code == int(answer)  # type: ignore[attr-defined]
    assert rec.current == 1  # restored after the failure
    assert rec.cleared == [1]  # _fail clears the runtime's last error


def test_enable_without_a_peer_path_makes_no_enable_call(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _PeerRuntime(can=0)
    rec = _peer_runtime(monkeypatch, fake)
    with pytest.raises(AMLNotSupported, match="cannot access device 0's memory directly"):
        rec.enable_peer_access(0)
    assert rec.disable_peer_access(0) is False
    assert [c[0] for c in fake.calls] == ["cudaDeviceCanAccessPeer", "cudaDeviceCanAccessPeer"]
    assert rec.can_access_peer(1, 1) is False  # not its own peer: no call
    assert len(fake.calls) == 2


def test_memcpy_peer_waits_for_the_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _PeerRuntime()
    rec = _peer_runtime(monkeypatch, fake)
    rec.memcpy_peer(0x1000, 1, 0x2000, 0, 64)
    assert fake.calls == [("cudaMemcpyPeer", 0x1000, 1, 0x2000, 0, 64), ("cudaStreamSynchronize", 0)]
    fake.answers["copy"] = E.cudaErrorInvalidValue
    with pytest.raises(AMLValueError, match="from device 0 to device 1") as info:
        rec.memcpy_peer(0x1000, 1, 0x2000, 0, 64)
    assert info.value.native is not None
    assert info.value.native.name == "cudaErrorInvalidValue"
    assert fake.calls[-1][0] == "cudaMemcpyPeer"  # no synchronization after a failed copy


def test_the_ipc_conformance_class_is_wired() -> None:
    """aml-cuda adopts the kit's pooled IPC class (test_cuda_ipc.TestCudaIpcConformance):
    it imports on a machine without a GPU, runs every test of PooledIpcConformance (the
    pooled block's offset among them) over an area fixture of its own, and is marked
    ``gpu``, so that off-GPU it is collected and skipped with the probe's reason."""
    from test_cuda_ipc import TestCudaIpcConformance

    from aml_core.testing import IpcConformance, PooledIpcConformance

    assert issubclass(TestCudaIpcConformance, PooledIpcConformance)
    kit = {name for name in dir(PooledIpcConformance) if name.startswith("test_")}
    assert "test_a_pooled_block_is_opened_at_its_offset" in kit
    assert kit >= {name for name in dir(IpcConformance) if name.startswith("test_")}
    assert {name for name in dir(TestCudaIpcConformance) if name.startswith("test_")} == kit
    assert "area" in vars(TestCudaIpcConformance)
    assert "child_env" in vars(TestCudaIpcConformance)
    marks = sys.modules[TestCudaIpcConformance.__module__].pytestmark
    assert "gpu" in {mark.name for mark in (marks if isinstance(marks, list) else [marks])}
