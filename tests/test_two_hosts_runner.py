"""The two-host runner's host side (tests/support/two_hosts.py), without booting: each
guest boots on 9p only, with this Python's installation and environment exported read-only
and mounted again cached before anything runs (the NUMA lab's functions, one place), next to
its NIC on the unix-socket Ethernet, and the repository is compiled before the boot."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support import numa_lab, two_hosts


@pytest.fixture
def fake_vng(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numa_lab, "_vng", lambda: "/usr/bin/vng")
    monkeypatch.setattr(numa_lab, "find_kernel", lambda series=None: Path("/boot/vmlinuz-x"))
    monkeypatch.setattr(sys, "base_prefix", "/opt/py")
    monkeypatch.setattr(sys, "prefix", "/work/x/.tox/hosts")


@pytest.mark.usefixtures("fake_vng")
@pytest.mark.parametrize("host", ["a", "b"])
def test_each_host_boots_on_9p_with_the_interpreter_cached(host: str, tmp_path: Path) -> None:
    argv = two_hosts.vng_command(host, ["true"], tmp_path, "TOKEN", cwd=tmp_path, script_dir=tmp_path)
    assert numa_lab.FORCE_9P in argv
    qemu = next(a for a in argv if a.startswith("--qemu-opts="))
    trees = numa_lab.cached_trees()
    assert trees == [Path("/opt/py").resolve(), Path("/work/x/.tox/hosts").resolve()]
    for i, tree in enumerate(trees):
        assert f"virtio-9p-pci,fsdev=labro{i},mount_tag=labro{i}" in qemu
        assert f"path={tree},security_model=none,readonly=on" in qemu
    assert f"local.path={tmp_path / f'{host}.sock'}" in qemu  # the NIC is still there
    script = next(a for a in argv if a.startswith("--exec="))
    assert script == f"--exec=sh {tmp_path / f'host-{host}.sh'}"  # the kernel's command line stays short
    script = (tmp_path / f"host-{host}.sh").read_text()
    mounts = numa_lab.cached_mounts(trees)
    assert len(mounts) == 2
    for mount in mounts:
        assert mount in script
        assert "cache=loose" in mount
        # mounted after the network and soft-RoCE, before any Python runs
        assert (
            script.index("rdma link add rxe0") < script.index(mount) < script.index("export AML_TWO_HOSTS=")
        )


def test_the_guest_script_without_cached_trees_mounts_nothing() -> None:
    script = two_hosts.guest_script("b", ["true"], Path("/work/x"), "TOKEN")
    assert "mount -t 9p" not in script
    assert "export AML_TWO_HOSTS=b" in script
    assert "export AML_TWO_HOSTS_PEER=10.34.0.1" in script


def test_the_repository_is_compiled_before_the_pair_boots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "mod.py").write_text("X = 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(numa_lab, "missing", lambda: None)
    booted: list[list[str]] = []

    def boot_pair(command: list[str], **_: object) -> int:
        booted.append(command)
        assert list((tmp_path / "tests" / "__pycache__").glob("mod.*.pyc"))  # before the boot
        return 0

    monkeypatch.setattr(two_hosts, "boot_pair", boot_pair)
    assert two_hosts.main(["--", "true"]) == 0
    assert booted == [["true"]]
