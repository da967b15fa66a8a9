"""The plugin, the registry and ``aml info``: with Debian's real ``libamdhip64.so.5`` and
no AMD GPU the backend is reported unavailable cleanly (docs/native-abi.md#hip-without-a-device);
with the driver double it is available and chosen for device memory."""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import aml_hip
import pytest
from aml_hip import plugin
from hip_helpers import BACKEND_ROOT, HipDouble, child_env

import aml_core
import aml_core.registry
from aml_core.errors import AMLNotSupported
from aml_core.gpu.plugin import GPU_CAPABILITIES
from aml_core.specs import Kind


def _installed() -> bool:
    try:
        dist = importlib.metadata.distribution("aml-hip")
    except importlib.metadata.PackageNotFoundError:
        return False
    return any(ep.group == "aml.backends" and ep.name == "hip" for ep in dist.entry_points)


@pytest.fixture(scope="module")
def entry_point_path(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """A directory to put on sys.path that registers aml-hip's entry point when aml-hip
    is not installed (the test then runs from a checkout); None when it is installed."""
    if _installed():
        return None
    site = tmp_path_factory.mktemp("site")
    info = site / "aml_hip-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: aml-hip\nVersion: 0.1.0\n")
    entry = BACKEND_ROOT / "pyproject.toml"
    assert 'hip = "aml_hip.plugin"' in entry.read_text()
    (info / "entry_points.txt").write_text("[aml.backends]\nhip = aml_hip.plugin\n")
    return site


def _others() -> str:
    """Other installed backends (aml-cuda ties with hip at priority 100 and wins by name):
    disabled, so that these tests see host and hip only."""
    names = {ep.name for ep in importlib.metadata.entry_points(group="aml.backends")}
    return ",".join(sorted(names - {"host", "hip"}))


@pytest.fixture
def registry(entry_point_path: Path | None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if entry_point_path is not None:
        monkeypatch.syspath_prepend(str(entry_point_path))
    monkeypatch.delenv("AML_BACKEND", raising=False)
    monkeypatch.setenv("AML_DISABLE_BACKENDS", _others())
    aml_core.registry.reset()
    aml_hip.BACKEND.reset()
    yield
    aml_core.registry.reset()
    aml_hip.BACKEND.reset()


def _cli(entry_point_path: Path | None, **env: str) -> dict[str, object]:
    extra = [str(entry_point_path)] if entry_point_path else []
    environment = child_env(AML_DISABLE_BACKENDS=_others(), **env)
    environment.pop("AML_BACKEND", None)
    environment["PYTHONPATH"] = ":".join([*extra, environment["PYTHONPATH"]])
    proc = subprocess.run(
        [sys.executable, "-m", "aml_core", "info", "--json"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data: dict[str, object] = json.loads(proc.stdout)
    return data


def _hip_entry(data: dict[str, object]) -> dict[str, object]:
    backends = data["backends"]
    assert isinstance(backends, list)
    found = [b for b in backends if b["name"] == "hip"]
    assert len(found) == 1, backends
    entry: dict[str, object] = found[0]
    return entry


# -- plugin ----------------------------------------------------------------------------------
def test_plugin_is_cheap() -> None:
    """Importing the plugin and running its hook loads no native library."""
    code = textwrap.dedent(
        """
        import sys
        import aml_hip.plugin as p
        [d] = p.aml_backends()
        import aml_hip
        assert aml_hip.BACKEND._runtime is None
        assert "aml_hip.native" not in sys.modules and "aml_hip.runtime" not in sys.modules
        maps = open("/proc/self/maps").read()
        assert "libamdhip64" not in maps, "a HIP library was loaded"
        print(d.name, d.priority, sorted(k.value for k in d.kinds))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["hip", "100", "['device',", "'host',", "'managed',", "'mapped']"]


def test_descriptor() -> None:
    [desc] = plugin.aml_backends()
    assert (desc.name, desc.priority) == ("hip", 100)
    assert desc.kinds == frozenset(Kind)
    assert desc.capabilities == GPU_CAPABILITIES
    assert desc.ipc_open is not None


# -- (b) the real Debian library, no device ---------------------------------------------------------
def _system_hip() -> str | None:
    """The absolute path of the system's libamdhip64.so.5. By path, not by name: a test
    double with the same soname may already be loaded in this process, and the dynamic
    loader hands an already-loaded soname back to a by-name dlopen."""
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return None
    for line in out.splitlines():
        if line.strip().startswith("libamdhip64.so.5 ") and "=>" in line:
            return line.split("=>", 1)[1].strip()
    return None


@pytest.fixture
def debian_hip(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    path = _system_hip()
    if path is None:
        pytest.skip("the system's libamdhip64.so.5 is not installed (apt-get install libamdhip64-5)")
    try:
        ctypes.CDLL(path)
    except OSError as exc:
        pytest.skip(f"{path} does not load: {exc}")
    if Path("/dev/kfd").exists():
        pytest.skip("/dev/kfd exists: this machine may have an AMD GPU")
    monkeypatch.setenv("AML_HIP_LIBRARY", path)
    aml_hip.BACKEND.reset()
    yield
    aml_hip.BACKEND.reset()


def test_real_library_without_device(debian_hip: None) -> None:
    rt = aml_hip.get_runtime()
    # Debian's library is 5.2.21153; other machines may carry another 5.x (the GPU machine
    # has a 5.7 libamdhip64.so.5): the no-device behaviour must be the same.
    assert 50000000 <= rt.version < 60000000
    if rt.version == 50221153:
        assert rt.abi.label == "5.2"
    result = aml_hip.probe()
    assert not result.available
    assert result.reason.startswith("no HIP device found")
    assert "hipGetDeviceCount returned hipErrorNoDevice (100)" in result.reason
    with pytest.raises(AMLNotSupported, match=r"^no usable hip device: "):  # aml differs: ENOTSUP
        aml_hip.create(0)
    with pytest.raises(AMLNotSupported):  # hipGetDeviceCount: hipErrorNoDevice
        aml_hip.virtual_memory(0)


def test_real_library_calls_fail_cleanly(debian_hip: None) -> None:
    """Direct runtime calls on the GPU-less machine raise; they never crash
    (docs/native-abi.md#hip-without-a-device: hipMalloc -> hipErrorInvalidDevice)."""
    rt = aml_hip.get_runtime()
    with pytest.raises(aml_core.AMLError) as info:
        rt.malloc(4096)
    assert info.value.native is not None
    # Debian's 5.2 answers hipErrorInvalidDevice (docs/native-abi.md#hip-without-a-device); the 5.7 library on
    # the GPU machine answers hipErrorNoDevice. Either is a clean error, never a crash.
    expected = (
        {"hipErrorInvalidDevice"} if rt.version == 50221153 else {"hipErrorInvalidDevice", "hipErrorNoDevice"}
    )
    assert info.value.native.name in expected
    with pytest.raises(aml_core.AMLError):
        rt.get_device()


def test_registry_reports_hip_unavailable(debian_hip: None, registry: None) -> None:
    statuses = {s.name: s for s in aml_core.backends()}
    assert "hip" in statuses, [s.name for s in statuses.values()]
    hip = statuses["hip"]
    assert not hip.available
    assert "no HIP device found" in hip.reason
    assert hip.distribution == "aml-hip"
    assert aml_core.choose(Kind.DEVICE).backend != "hip"


def test_aml_info_reports_hip_unavailable(debian_hip: None, entry_point_path: Path | None) -> None:
    data = _cli(entry_point_path, AML_HIP_LIBRARY="libamdhip64.so.5")
    hip = _hip_entry(data)
    assert hip["available"] is False
    assert "no HIP device found" in str(hip["reason"])
    assert hip["priority"] == 100


# -- the double: available and chosen ------------------------------------------------------------------
def test_registry_chooses_hip_on_the_double(hip: HipDouble, registry: None) -> None:
    statuses = {s.name: s for s in aml_core.backends()}
    assert statuses["hip"].available, statuses["hip"].reason
    assert aml_core.choose(Kind.DEVICE).backend == "hip"
    with aml_core.area(kind="device") as area:
        buf = area.mmap(4096)
        assert area.backend == "hip"
        area.munmap(buf)
    with aml_core.area(kind="managed", all_devices=True) as area:
        buf = area.mmap(100)
        assert hip.last("hipMallocManaged")[2] == 1  # type: ignore[index]
        area.munmap(buf)


def test_aml_info_on_the_double(hip: HipDouble, entry_point_path: Path | None) -> None:
    data = _cli(entry_point_path, **hip.env())
    entry = _hip_entry(data)
    assert entry["available"] is True, entry
    devices = entry["devices"]
    assert isinstance(devices, list)
    assert len(devices) >= 1
    chosen = data["chosen"]
    assert isinstance(chosen, dict)
    assert chosen["device"]["backend"] == "hip"
