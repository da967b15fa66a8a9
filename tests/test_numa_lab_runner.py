"""The NUMA lab runner's host side (tests/support/numa_lab.py), without booting: the kernel
choice on fake roots (each topology boots the kernel series it names: two-node Debian's
6.12, unpacked by run-tests under the kernel cache, the others the Debian kernel installed
in /boot; a missing series falls back to the installed kernel and says so), the guest's
start line the boot is timed by, and the bytecode compiled before a boot."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.support import numa_lab


def _kernel(root: Path, release: str, *, modules: bool = True) -> Path:
    image = root / "boot" / f"vmlinuz-{release}"
    image.parent.mkdir(parents=True, exist_ok=True)
    image.write_bytes(b"")
    if modules:
        (root / "lib" / "modules" / release).mkdir(parents=True)
    return image


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    system, cache = tmp_path / "system", tmp_path / "cache"
    system.mkdir()
    cache.mkdir()
    monkeypatch.setattr(numa_lab, "SYSTEM_ROOT", system)
    monkeypatch.setenv(numa_lab.KERNELS_ENV, str(cache))
    return system, cache


def test_each_topology_boots_its_kernel(roots: tuple[Path, Path]) -> None:
    system, cache = roots
    installed = _kernel(system, "6.1.0-57-amd64")
    _kernel(system, "6.1.0-9-amd64")
    _kernel(cache / "linux-image-6.12.100+deb12-amd64", "6.12.100+deb12-amd64")
    newer = _kernel(cache / "linux-image-6.12.117+deb12-amd64", "6.12.117+deb12-amd64")
    assert numa_lab.kernel_cache() == cache
    assert numa_lab.find_kernel() == installed  # the newest in /boot; the cache is not "installed"
    assert numa_lab.find_kernel("6.12") == newer
    assert numa_lab.kernel_series(newer) == "6.12"
    assert numa_lab.kernel_for(numa_lab.TOPOLOGIES["two-node"]) == (newer, None)
    for name in ("tiered", "small-node"):
        assert numa_lab.kernel_for(numa_lab.TOPOLOGIES[name]) == (installed, None)


def test_a_missing_series_falls_back_and_says_so(roots: tuple[Path, Path]) -> None:
    system, cache = roots
    installed = _kernel(system, "6.1.0-57-amd64")
    _kernel(cache / "linux-image-6.12.117+deb12-amd64", "6.12.117+deb12-amd64", modules=False)
    image, note = numa_lab.kernel_for(numa_lab.TOPOLOGIES["two-node"])
    assert image == installed  # a kernel without its modules cannot boot the lab: ignored
    assert note is not None
    assert "no Linux 6.12 kernel" in note
    assert "--fetch-kernels" in note
    assert str(cache) in note


def test_the_cache_defaults_under_the_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(numa_lab.KERNELS_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert numa_lab.kernel_cache() == tmp_path / ".cache" / "aml-numa-lab" / "kernels"


def _guest(tmp_path: Path, body: str) -> list[str]:
    """A stand-in for vng: a shell script with ``body``."""
    script = tmp_path / "vng.sh"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return [str(script)]


def test_a_guest_that_never_comes_up_is_a_hung_boot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = time.monotonic()
    rc = numa_lab._run_guest(
        "hangs", _guest(tmp_path, "sleep 60"), timeout=60, boot_timeout=0.5, log=None, note=None, what="test"
    )
    assert rc == numa_lab.BOOT_HUNG
    assert time.monotonic() - start < 30  # killed at the boot limit, not the guest's limit
    assert "did not come up within 0 s (a hung boot)" in capsys.readouterr().out


def test_a_guest_that_came_up_is_not_cut_by_the_boot_limit(tmp_path: Path) -> None:
    body = f"echo '{numa_lab.STARTED} 6.1'; sleep 1.5; exit 3"
    rc = numa_lab._run_guest(
        "up", _guest(tmp_path, body), timeout=60, boot_timeout=0.5, log=None, note=None, what="t"
    )
    assert rc == 3  # the command's own status: the boot limit no longer applies once it is up


def test_a_guest_past_its_limit_is_killed(tmp_path: Path) -> None:
    body = f"echo '{numa_lab.STARTED} 6.1'; sleep 60"
    rc = numa_lab._run_guest(
        "slow", _guest(tmp_path, body), timeout=1, boot_timeout=30, log=None, note=None, what="t"
    )
    assert rc == 124


def test_a_hung_boot_is_booted_once_more(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []

    def fake_boot(topology: numa_lab.LabTopology, command: object, **kwargs: object) -> int:
        calls.append(topology.name)
        return numa_lab.BOOT_HUNG if len(calls) == 1 else 0

    monkeypatch.setattr(numa_lab, "boot", fake_boot)
    monkeypatch.setattr(numa_lab, "missing", lambda: None)
    monkeypatch.setattr(numa_lab, "precompile", lambda where: None)
    assert numa_lab.main(["-t", "small-node", "--", "true"]) == 0
    assert calls == ["small-node", "small-node"]
    assert "small-node: booting it once more" in capsys.readouterr().out


def test_a_second_hung_boot_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def fake_boot(topology: numa_lab.LabTopology, command: object, **kwargs: object) -> int:
        calls.append(topology.name)
        return numa_lab.BOOT_HUNG

    monkeypatch.setattr(numa_lab, "boot", fake_boot)
    monkeypatch.setattr(numa_lab, "missing", lambda: None)
    monkeypatch.setattr(numa_lab, "precompile", lambda where: None)
    assert numa_lab.main(["-t", "small-node", "--", "true"]) == numa_lab.BOOT_HUNG
    assert calls == ["small-node", "small-node"]


def test_the_guest_says_when_its_command_starts() -> None:
    script = numa_lab.guest_script(numa_lab.TOPOLOGIES["tiered"], ["true"], Path("/work/x"))
    assert f"echo '{numa_lab.STARTED}' $(uname -r)" in script
    assert script.index(numa_lab.STARTED) < script.index("cd /work/x")
    assert "export AML_NUMA_LAB=tiered" in script


def test_the_interpreter_and_its_environment_are_mounted_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "base_prefix", "/opt/py")
    monkeypatch.setattr(sys, "prefix", "/work/x/.tox/numa")
    trees = numa_lab.cached_trees()
    assert trees == [Path("/opt/py").resolve(), Path("/work/x/.tox/numa").resolve()]
    exports = numa_lab.cached_exports(trees)
    assert exports.count("-fsdev") == exports.count("-device") == 2
    assert f"local,id=labro1,path={trees[1]},security_model=none,readonly=on,multidevs=remap" in exports
    assert "virtio-9p-pci,fsdev=labro1,mount_tag=labro1" in exports
    script = numa_lab.guest_script(numa_lab.TOPOLOGIES["tiered"], ["true"], Path("/work/x"), trees)
    mount = f"mount -t 9p -o {numa_lab.CACHED_MOUNT_OPTIONS} labro1 {trees[1]}"
    assert mount in script
    assert "cache=loose" in numa_lab.CACHED_MOUNT_OPTIONS
    assert numa_lab.CACHED_MOUNT_OPTIONS.startswith("ro,")
    assert script.index(mount) < script.index(numa_lab.STARTED)  # the boot's time includes the mounts
    # a venv that is the installation itself, and the root, are not mounted twice or at all
    monkeypatch.setattr(sys, "prefix", "/opt/py")
    assert numa_lab.cached_trees() == [Path("/opt/py").resolve()]
    monkeypatch.setattr(sys, "base_prefix", "/")
    monkeypatch.setattr(sys, "prefix", "/")
    assert numa_lab.cached_trees() == []


def test_the_guest_boots_on_9p_with_the_cached_exports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numa_lab, "_vng", lambda: "/usr/bin/vng")
    argv = numa_lab.vng_command(numa_lab.TOPOLOGIES["two-node"], ["true"], kernel=Path("/boot/vmlinuz-x"))
    assert "--force-9p" in argv  # not virtio-fs: the nodes' memory is not shared
    qemu = next(a for a in argv if a.startswith("--qemu-opts="))
    assert "memdev=lab-m1" in qemu
    for i in range(len(numa_lab.cached_trees())):
        assert f"mount_tag=labro{i}" in qemu


def test_the_repository_is_compiled_before_a_boot(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "mod.py").write_text("X = 1\n")
    (tmp_path / "elsewhere.py").write_text("Y = 1\n")
    numa_lab.precompile(tmp_path)
    assert list((tmp_path / "tests" / "__pycache__").glob("mod.*.pyc"))
    assert not (tmp_path / "__pycache__").exists()  # only the repository's packages


def test_the_image_package_behind_the_meta_package() -> None:
    # apt-cache depends linux-image-6.12-amd64, as Debian 12 answers it
    out = (
        "linux-image-6.12-amd64\n"
        "  Depends: linux-image-6.12.117+deb12-amd64\n"
        "  Depends: linux-image-6.12.117+deb12-amd64-unsigned\n"
    )
    assert numa_lab.image_package(out, "6.12") == "linux-image-6.12.117+deb12-amd64"
    assert (
        numa_lab.image_package("linux-image-6.1-amd64\n  Depends: linux-image-6.1.0-57-amd64\n", "6.12")
        is None
    )
    assert numa_lab.image_package("", "6.12") is None


def test_fetching_needs_root_and_apt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(numa_lab.os, "geteuid", lambda: 1000)
    assert numa_lab.fetch_kernel("6.12") is None
    assert "needs root" in capsys.readouterr().out
