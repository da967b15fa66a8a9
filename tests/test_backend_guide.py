"""docs/backend-authoring.md's example backend runs as written: its code blocks (each
opening with a ``# <path>`` comment) are written out as a package, the kit adoption they
include passes (IpcConformance included) in a pytest subprocess, the adoption is under 20
lines, and the backend works through the registry as the guide says."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "backend-authoring.md"
BLOCK = re.compile(r"```python\n# ((?:aml_memfd|tests)/[\w/]+\.py)\n(.*?)```", re.S)


def _blocks() -> dict[str, str]:
    found: dict[str, str] = {}
    for path, body in BLOCK.findall(GUIDE.read_text()):
        assert path not in found, f"{path} appears twice in the guide"
        found[path] = f"# {path}\n{body}"
    return found


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Path:
    blocks = _blocks()
    assert set(blocks) == {
        "aml_memfd/plugin.py",
        "aml_memfd/errors.py",
        "aml_memfd/area.py",
        "tests/conftest.py",
        "tests/test_memfd_conformance.py",
    }
    where = tmp_path_factory.mktemp("guide")
    for path, body in blocks.items():
        (where / path).parent.mkdir(parents=True, exist_ok=True)
        (where / path).write_text(body)
    (where / "aml_memfd" / "__init__.py").write_text("")
    # Installed as the guide says (pip install -e .): its entry point, as a .dist-info.
    info = where / "aml_memfd-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: aml-memfd\nVersion: 0.1\n")
    toml = re.search(r'```toml\n(\[project\.entry-points\."aml\.backends"\]\n[^`]*)```', GUIDE.read_text())
    assert toml is not None, "the guide shows the entry point to declare"
    entry = toml.group(1).split("#")[0].replace('"', "").strip()
    assert entry.endswith("memfd = aml_memfd.plugin"), entry
    (info / "entry_points.txt").write_text("[aml.backends]\nmemfd = aml_memfd.plugin\n")
    return where


def _env(where: Path) -> dict[str, str]:
    path = os.pathsep.join([str(where), str(ROOT), os.environ.get("PYTHONPATH", "")])
    cache = str(where / "cache")  # a probe cache of its own
    return dict(os.environ, PYTHONPATH=path, PYTHONDONTWRITEBYTECODE="1", XDG_CACHE_HOME=cache)


def test_adoption_is_under_20_lines() -> None:
    blocks = _blocks()
    lines = [
        ln
        for path in ("tests/conftest.py", "tests/test_memfd_conformance.py")
        for ln in blocks[path].splitlines()
        if ln.strip() and not ln.startswith("# tests/")
    ]
    assert len(lines) < 20, lines


def test_guide_backend_passes_the_kit(backend: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests"],
        cwd=backend,
        env=_env(backend),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for test in (
        "test_share_with_a_child_process",
        "test_a_pooled_block_is_opened_at_its_offset",
        "test_handle",
        "test_free_is_called_and_frees",
        "test_enomem",
        "test_threads",
        "test_numpy_shares_bytes",
        "test_backend_is_discoverable_through_its_entry_point",
        "test_factory_refuses_unknown_options",
    ):
        assert re.search(rf"PASSED \S+::{test}\b", out), f"{test} did not pass:\n{out}"
    assert "SKIPPED" not in out, out


USE = """
import aml_core
from aml_memfd.area import MemfdArea, MemfdOptions

assert aml_core.choose("host").backend != "memfd", "priority -10 must not become the default"
with aml_core.area("host", backend="memfd", name="guide") as area:
    assert isinstance(area, MemfdArea) and area.name == "guide"
    buf = area.mmap(1 << 20, MemfdOptions(populate=True))
    with memoryview(buf) as view:
        view[:5] = b"memfd"
    assert "/memfd:guide" in os.readlink(f"/proc/self/fd/{buf.native[0]}")
    area.munmap(buf)
    try:
        area.mmap(1 << 20, {"populate": True, "fd": 3})
    except aml_core.AMLTypeError:
        pass
    else:
        raise AssertionError("unknown mmap options must be AMLTypeError")
try:
    aml_core.area("host", backend="memfd", bogus=1)
except aml_core.AMLTypeError as exc:
    assert "unknown area option(s) ['bogus'] of host memory" in str(exc), exc
    assert "memfd does not honour ['bogus']" in str(exc), exc
else:
    raise AssertionError("unknown area options must be AMLTypeError")
from aml_memfd.plugin import create_area

try:
    create_area(aml_core.Kind.HOST, bogus=1)
except aml_core.AMLTypeError as exc:
    assert "unknown memfd area option(s) ['bogus']" in str(exc), exc
else:
    raise AssertionError("the factory must refuse unknown area options itself")
with aml_core.area("host", name="only-memfd") as area:  # the host backend does not honour name=
    assert isinstance(area, MemfdArea) and area.name == "only-memfd"
print("ok")
"""


def _python(backend: Path, *args: str) -> str:
    """Run ``python *args`` where the guide's backend is installed; its stdout."""
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=backend,
        env=_env(backend),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_guide_backend_through_the_registry(backend: Path) -> None:
    assert _python(backend, "-c", "import os\n" + USE).strip() == "ok"


def test_aml_info_lists_the_guide_backend(backend: Path) -> None:
    """The checklist's last item."""
    memfd = [
        b
        for b in json.loads(_python(backend, "-m", "aml_core", "info", "--json"))["backends"]
        if b["name"] == "memfd"
    ]
    assert [(b["state"], b["distribution"]) for b in memfd] == [("available", "aml-memfd")], memfd


def test_a_backend_that_ignores_the_offset_fails_the_kit(backend: Path, tmp_path: Path) -> None:
    """Issue 32: the guide's aml-memfd, its import mapping from offset 0 as the guide once
    had it, passes IpcConformance and fails PooledIpcConformance, which names the cause."""
    broken = tmp_path / "broken"
    shutil.copytree(backend, broken)
    area_py = broken / "aml_memfd" / "area.py"
    text = area_py.read_text()
    ignoring = text.replace("start = handle.offset - handle.offset % mmap.PAGESIZE", "start = 0").replace(
        "base + handle.offset - start", "base"
    )
    assert ignoring != text, "the guide's _import no longer reads handle.offset as this test expects"
    area_py.write_text(ignoring)
    only = ["-k", "child or offset"]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests", *only],
        cwd=broken,
        env=_env(broken),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert re.search(r"PASSED \S+::test_share_with_a_child_process\b", out), out
    assert re.search(r"FAILED \S+::test_a_pooled_block_is_opened_at_its_offset\b", out), out
    assert "ignored handle.offset" in out, out
