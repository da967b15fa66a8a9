"""A user script type-checks under ``mypy --strict`` without casts, and the usual
mistakes (a misspelt kind or mmap option, an option of the wrong type, something that
is not an IPC handle, a range attribute read as the wrong type) are type errors. Every
Python example of docs/user-guide.md type-checks too.

mypy runs in a subprocess on the source tree (MYPYPATH), as a user's CI would."""

from __future__ import annotations

import ast
import builtins
import os
import re
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


GUIDE = ROOT / "docs" / "user-guide.md"

#: What the guide's examples take from the text around them (a name an example uses but
#: does not bind): each name's declaration, as the guide describes it. An example is
#: checked with the declarations of the names it uses and does not bind.
CONTEXT = {
    "np": "import numpy as np",
    "aml_core": "import aml_core",
    "aml_cuda": "import aml_cuda",
    "cupy": "import cupy",
    "CudaFlags": "from aml_cuda import CudaFlags",
    "Access": "from aml_core.gpu import Access",
    "area": "from aml_core.gpu import GpuArea as _GpuArea\narea: _GpuArea",
    "buf": "from aml_core import Buffer as _Buffer\nbuf: _Buffer",
    "other": "from aml_core import Buffer as _Buffer\nother: _Buffer",
    "other_buf": "from aml_core import Buffer as _Buffer\nother_buf: _Buffer",
    "s": "from aml_core.gpu import Stream as _Stream\ns: _Stream",
    "s2": "from aml_core.gpu import Stream as _Stream\ns2: _Stream",
    "f": "from typing import BinaryIO as _BinaryIO\nf: _BinaryIO",
    "handle": "from aml_core import IpcHandle as _IpcHandle\nhandle: _IpcHandle",
    "send": "from collections.abc import Callable\nsend: Callable[[aml_core.IpcHandle], None]",
    "make_memfd_area": "from collections.abc import Callable\nmake_memfd_area: Callable[..., aml_core.Area]",
}
#: What a declaration in CONTEXT needs in turn.
NEEDS = {"send": {"aml_core"}, "make_memfd_area": {"aml_core"}}
#: Optional libraries the guide shows (not installed where the tests run): Any.
CONFIG = "[mypy]\n[mypy-cupy,cupy.*,torch,torch.*]\nignore_missing_imports = True\n"


def _examples() -> list[tuple[int, str]]:
    """(line, code) of each ```python block of the user guide."""
    text = GUIDE.read_text()
    return [
        (text.count("\n", 0, m.start()) + 2, m.group(1))
        for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)
    ]


def _free_names(code: str) -> set[str]:
    """The names an example reads but does not bind (nor are builtins)."""
    tree = ast.parse(code)
    bound: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return read - bound - set(dir(builtins))


def _mypy(
    tmp_path: Path, files: list[Path], config: str | None = None, path: tuple[Path, ...] | None = None
) -> subprocess.CompletedProcess[str]:
    """mypy --strict on ``files`` as a user's CI runs it, the packages read from ``path``
    (default: the source tree, aml_core and the backends: typed packages, py.typed)."""
    if path is None:
        path = (ROOT, *(marker.parent.parent for marker in sorted(ROOT.glob("backends/*/aml_*/py.typed"))))
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
            config or os.devnull,
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


def test_user_guide_examples_under_mypy_strict(tmp_path: Path) -> None:
    examples = _examples()
    assert len(examples) >= 13, "the guide's examples were not found"
    shift: dict[str, int] = {}  # file -> what turns its line numbers into the guide's
    for line, code in examples:
        free = _free_names(code)
        unknown = free - set(CONTEXT)
        assert not unknown, f"docs/user-guide.md:{line}: say in CONTEXT what {sorted(unknown)} are"
        needed = free | {need for name in free for need in NEEDS.get(name, ())}
        prelude = "".join(f"{CONTEXT[name]}\n" for name in sorted(needed))
        name = f"guide_line_{line}.py"
        (tmp_path / name).write_text(f"{prelude}{code}")
        shift[name] = line - 1 - prelude.count("\n")
    config = tmp_path / "mypy.ini"
    config.write_text(CONFIG)
    result = _mypy(tmp_path, [tmp_path / name for name in shift], str(config))
    where = re.compile(r"^(guide_line_\d+\.py):(\d+):")
    errors = [
        where.sub(lambda m: f"docs/user-guide.md:{int(m[2]) + shift[m[1]]}:", ln)
        for ln in result.stdout.splitlines()
        if ": error:" in ln or ": note:" in ln
    ]
    assert not errors, "\n".join(errors)
    assert result.returncode == 0, result.stdout + result.stderr
