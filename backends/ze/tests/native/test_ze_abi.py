"""The ABI probe: every constant, enum value, struct size and offset aml_ze.abi uses,
compared with Debian's libze-dev headers (API 1.4: ze_api.h, and zes_api.h for Sysman) by
compiling abi_probe.c."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
from aml_ze import abi as C

HERE = Path(__file__).resolve().parent
HEADER = Path("/usr/include/level_zero/ze_api.h")

#: C type names of the ctypes structures (the header's typedef of each).
STRUCT_NAMES = {cls: cls.__name__ for cls in C.STRUCTS}


def _items() -> tuple[str, dict[str, int]]:
    lines: list[str] = []
    expected: dict[str, int] = {}
    for name, value in sorted(C.constants().items()):
        lines.append(f"VALUE({name});")
        expected[name] = value
    for cls, cname in STRUCT_NAMES.items():
        lines.append(f"SIZE({cname});")
        expected[f"sizeof({cname})"] = ctypes.sizeof(cls)
        for field, *_ in cls._fields_:
            lines.append(f"OFFSET({cname}, {field});")
            expected[f"offsetof({cname},{field})"] = getattr(cls, field).offset
    return "\n".join(lines) + "\n", expected


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    if not HEADER.exists():
        pytest.skip(f"{HEADER} is missing (Debian: apt-get install libze-dev)")
    cc = shutil.which("gcc")
    if cc is None:
        pytest.skip("gcc is needed for the ABI probe")
    tmp = tmp_path_factory.mktemp("abi")
    items, _ = _items()
    (tmp / "abi_items.h").write_text(items)
    exe = tmp / "abi_probe"
    subprocess.run([cc, f"-I{tmp}", "-o", str(exe), str(HERE / "abi_probe.c")], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return {name: int(value) for name, value in (line.rsplit(" ", 1) for line in out.splitlines())}


def test_header_is_api_1_4(probed: dict[str, int]) -> None:
    assert probed["ZE_API_VERSION_CURRENT"] == C.ZE_API_VERSION_1_4


def test_every_value_matches(probed: dict[str, int]) -> None:
    _, expected = _items()
    wrong = {k: (v, probed.get(k)) for k, v in expected.items() if probed.get(k) != v}
    assert not wrong, f"aml_ze.abi differs from the header (ours, header's): {wrong}"
    assert len(expected) > 100


def test_the_masks_are_the_header_s_flags(probed: dict[str, int]) -> None:
    device = [k for k in probed if k.startswith("ZE_DEVICE_MEM_ALLOC_FLAG_")]
    host = [k for k in probed if k.startswith("ZE_HOST_MEM_ALLOC_FLAG_")]
    assert sum(probed[k] for k in device) == C.DEVICE_MEM_ALLOC_FLAGS
    assert sum(probed[k] for k in host) == C.HOST_MEM_ALLOC_FLAGS


def test_result_names_cover_the_header() -> None:
    text = HEADER.read_text() if HEADER.exists() else pytest.skip(f"{HEADER} is missing")
    import re

    names = set(re.findall(r"^\s+(ZE_RESULT_\w+)\s*=", text, re.M)) - {"ZE_RESULT_FORCE_UINT32"}
    assert names == set(C.RESULT_NAMES.values())


def test_the_double_has_the_header_s_layouts() -> None:
    """The driver double declares its own structs and codes (double_abi.h): abi_check.c
    compiles them against the header with a static assertion for each."""
    if not HEADER.exists():
        pytest.skip(f"{HEADER} is missing (Debian: apt-get install libze-dev)")
    cc = shutil.which("gcc")
    if cc is None:
        pytest.skip("gcc is needed")
    proc = subprocess.run(
        [cc, "-fsyntax-only", "-Wall", "-Werror", str(HERE / "abi_check.c")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
