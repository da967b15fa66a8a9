"""A user script type-checks under ``mypy --strict`` without casts, and the usual
mistakes (a misspelt kind or mmap option, an option of the wrong type, something that
is not an IPC handle, a range attribute read as the wrong type) are type errors.

mypy runs in a subprocess on the source tree (MYPYPATH), as a user's CI would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="the typing test needs mypy (tox: the core environment installs it)")

ROOT = Path(__file__).resolve().parent.parent

GOOD = """
from __future__ import annotations

import numpy as np

import aml_core
from aml_core.gpu import GpuArea, RangeAttribute
from aml_core.host import NOT_TOUCHED, HostArea, HostMmapOptions


def plain() -> int:
    with aml_core.area(kind="host") as area:
        buf = area.mmap(1 << 20)
        arr = np.frombuffer(memoryview(buf), dtype=np.uint8)
        total = int(arr.sum()) + buf.size + area.stats.bytes_in_use
        del arr
        area.munmap(buf)
    return total


def host(fd: int) -> dict[int, int]:
    area = aml_core.area("host", backend="host")  # a HostArea: typed options
    b1 = area.mmap(4096, {"fd": fd, "offset": 0, "shared": True})
    b2 = area.mmap(4096, HostMmapOptions(offset=0))
    with HostArea("bind", [0]) as bound, bound.mmap(4096) as b3:
        nodes: list[int] = bound.page_nodes(b3)
        assert NOT_TOUCHED in nodes or nodes
    summary: dict[int, int] = area.page_nodes(b1, summary=True)
    area.munmap(b2)
    area.close()
    return summary


def managed(area: GpuArea, handle: aml_core.IpcHandle) -> int:
    buf = area.mmap(1 << 20, {"device": 0})
    mostly: bool = area.range_attribute(buf, RangeAttribute.READ_MOSTLY)
    seen_by: tuple[int, ...] = area.range_attribute(buf, RangeAttribute.ACCESSED_BY)
    where: int = area.range_attribute(buf, RangeAttribute.PREFERRED_LOCATION)
    export = area.ipc_export(buf)
    shared: aml_core.IpcHandle = export.handle
    opened: aml_core.Buffer = aml_core.ipc_open(handle)
    return int(mostly) + len(seen_by) + where + shared.size + opened.size
"""

#: name -> (code, what its mypy error names: the error code, or the options type)
BAD = {
    "misspelt_option": (
        'from aml_core.host import HostArea\nHostArea().mmap(4096, {"fd": 3, "ofset": 0})\n',
        "HostMmapOptionsDict",
    ),
    "option_of_wrong_type": (
        'from aml_core.host import HostArea\nHostArea().mmap(4096, {"fd": "3"})\n',
        "HostMmapOptionsDict",
    ),
    "misspelt_kind": ('import aml_core\naml_core.area(kind="hots")\n', "[call-overload]"),
    "not_a_handle": ('import aml_core\naml_core.ipc_open("handle")\n', "[arg-type]"),
    "attribute_read_as_wrong_type": (
        textwrap.dedent(
            """
            from aml_core.buffer import Buffer
            from aml_core.gpu import GpuArea, RangeAttribute


            def f(area: GpuArea, buf: Buffer) -> None:
                devices: tuple[int, ...] = area.range_attribute(buf, RangeAttribute.READ_MOSTLY)
            """
        ),
        "[assignment]",
    ),
}


def _mypy(
    tmp_path: Path, files: list[Path], path: tuple[Path, ...] = (ROOT,)
) -> subprocess.CompletedProcess[str]:
    """mypy --strict on ``files`` as a user's CI runs it, the packages read from ``path``."""
    env = dict(os.environ, MYPYPATH=os.pathsep.join(map(str, path)))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--python-version",
            "3.11",
            "--no-incremental",
            "--config-file",
            os.devnull,
            "--show-error-codes",
            "--no-color-output",
            *map(str, files),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_user_scripts_under_mypy_strict(tmp_path: Path) -> None:
    good = tmp_path / "good.py"
    good.write_text(GOOD)
    bad: dict[str, Path] = {}
    for name, (code, _) in BAD.items():
        bad[name] = tmp_path / f"bad_{name}.py"
        bad[name].write_text(code)
    result = _mypy(tmp_path, [good, *bad.values()])
    lines = result.stdout.splitlines()
    assert not [ln for ln in lines if ln.startswith("good.py")], result.stdout
    for name, (_, expected) in BAD.items():
        errors = [ln for ln in lines if ln.startswith(f"bad_{name}.py") and ": error:" in ln]
        assert errors, f"{name}: no type error\n{result.stdout}"
        assert any(expected in ln for ln in errors), f"{name}: {errors}"
    assert result.returncode == 1, result.stdout + result.stderr
