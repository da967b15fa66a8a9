"""ABI probe for aml-hsa: the HSA values and layouts aml_hsa.abi binds.

* ``abi_probe.c`` is compiled with gcc against Debian's ``hsa/hsa.h`` and
  ``hsa/hsa_ext_amd.h`` (``libhsa-runtime-dev``, ROCr 5.2, AMD interface 1.0) and prints
  every value and layout of ``aml_hsa.abi`` those headers define; each must equal
  ``probe_expectations()`` and the printed names must be exactly ``DEBIAN_NAMES``.
* The values after 5.2 (``aml_hsa.abi.SINCE``) are checked against the table of
  ``docs/native-abi.md#hsa-as-aml-hsa-binds-it``.
* Debian's library must export every function aml-hsa requires, and no ``hsa_amd_vmem_*``.

Skips (with the reason) only when gcc, the headers or the library are missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path[:0] = [p for p in (str(REPO / "backends" / "hsa"),) if p not in sys.path]

from aml_hsa import abi as C  # noqa: E402
from aml_hsa.native import OPTIONAL, REQUIRED  # noqa: E402

HEADERS = [Path(d) for d in os.environ.get("AML_HSA_INCLUDE", "/usr/include:/opt/rocm/include").split(":")]
LIBRARY = Path("/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1")


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    include = next((d for d in HEADERS if (d / "hsa" / "hsa_ext_amd.h").is_file()), None)
    if include is None:
        pytest.skip(
            "hsa/hsa_ext_amd.h not found (install Debian's libhsa-runtime-dev or set AML_HSA_INCLUDE)"
        )
    cc = shutil.which(os.environ.get("CC", "gcc"))
    if cc is None:
        pytest.skip("gcc is needed for the ABI probe")
    exe = tmp_path_factory.mktemp("abi") / "abi_probe"
    build = subprocess.run(
        [cc, "-Wall", "-Wextra", "-Werror", f"-I{include}", "-o", str(exe), str(HERE / "abi_probe.c")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return dict(line.rsplit(" ", 1) for line in out.splitlines())


def test_interface_of_the_headers(probe: dict[str, str]) -> None:
    assert probe["HSA_AMD_INTERFACE_VERSION"] == "1.0"


def test_every_debian_value(probe: dict[str, str]) -> None:
    values = {k: v for k, v in probe.items() if k != "HSA_AMD_INTERFACE_VERSION"}
    assert set(values) == set(C.DEBIAN_NAMES)
    expected = C.probe_expectations()
    wrong = {
        name: (int(value), expected[name]) for name, value in values.items() if int(value) != expected[name]
    }
    assert not wrong, f"(header, aml_hsa.abi) differ: {wrong}"


def test_newer_values_match_the_documentation() -> None:
    doc = (REPO / "docs" / "native-abi.md").read_text()
    section = doc.split("#### Values and layouts after 5.2", 1)[1].split("\n#", 1)[0]
    rows = {
        m.group(1): (int(m.group(2)), tuple(int(x) for x in m.group(3).split(".")))
        for m in re.finditer(r"^\| (\S+) \| (\d+) \| (\d+\.\d+) \|$", section, re.MULTILINE)
    }
    expected = C.probe_expectations()
    assert set(rows) == set(C.SINCE)
    for name, (value, since) in rows.items():
        assert expected[name] == value, name
        assert C.SINCE[name] == since, name


def test_ctypes_layouts() -> None:
    assert C.IPC_HANDLE_SIZE == 32
    assert C.interface_of(lambda name: True) == C.INTERFACE_RESERVE_ALIGN
    assert C.interface_of(lambda name: name != C.RESERVE_ALIGN) == C.INTERFACE_VMEM
    assert C.interface_of(lambda name: not name.startswith("hsa_amd_vmem")) == (1, 0)


@pytest.mark.skipif(not LIBRARY.exists(), reason="Debian's libhsa-runtime64-1 is not installed")
def test_debian_library_symbols() -> None:
    """In a fresh process (a loaded double would answer for the same SONAME)."""
    code = (
        "import ctypes, json, sys; lib = ctypes.CDLL(sys.argv[1]);"
        "print(json.dumps({n: hasattr(lib, n) for n in sys.argv[2:]}))"
    )
    names = [*REQUIRED, *OPTIONAL]
    proc = subprocess.run(
        [sys.executable, "-c", code, str(LIBRARY.resolve()), *names],
        capture_output=True,
        text=True,
        check=True,
    )
    present = json.loads(proc.stdout)
    assert [n for n in REQUIRED if not present[n]] == []
    # ROCr 5.2: no virtual memory API, no dma-buf export. The forwarding double stands in
    # for this SONAME in a forward run (it is what that file is there): it has them.
    if os.environ.get("AML_HSA_TEST_DOUBLE") != "forward":
        assert [n for n in OPTIONAL if present[n]] == []
