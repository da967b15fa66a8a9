"""The real Level Zero loader (Debian's libze1, 1.8.12): without a driver the probe is
unavailable and says why, and ``aml info`` says so; with Level Zero's own null driver
(built from Debian's level-zero source) the area, IPC and virtual-memory calls run end to
end; with the validation layer, the vendor's own errors for size 0, a non-power-of-two
alignment and unknown flag bits come back through aml's table. Each scenario runs in a
child process (the loader reads its environment once).

The null driver answers SUCCESS without doing the work (no argument checks, allocations
are plain ``malloc``, allocation properties are left untouched, ``zeVirtualMemReserve``
returns no pointer, the page size is 0): what aml-ze does with such answers is checked
here; real semantics are checked on the driver double."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aml_ze import abi as C
from ze_helpers import build, child_env, run_python

from tests.support.doubles import DoubleBuildError

CHILD = Path(__file__).resolve().parent / "ze_children.py"
LOADER = "libze_loader.so.1"


def _loader_installed() -> bool:
    return any(Path(d, LOADER).exists() for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"))


pytestmark = pytest.mark.skipif(
    not _loader_installed(), reason=f"Debian's Level Zero loader ({LOADER}, package libze1) is not installed"
)


def _scenario(name: str, **env: str) -> dict[str, Any]:
    return run_python(
        f"import runpy, sys; sys.argv = ['x', {name!r}]; runpy.run_path({str(CHILD)!r}, run_name='__main__')",
        child_env(**env),
    )


@pytest.fixture(scope="module")
def null_driver() -> Path:
    try:
        path: Path = build.build_null_driver()
    except DoubleBuildError as exc:
        pytest.skip(f"Level Zero's null driver cannot be built here: {exc}")
    return path


def test_no_driver_is_unavailable() -> None:
    report = _scenario("probe")
    assert report["available"] is False
    assert "no usable Level Zero driver" in report["reason"]
    assert "zeInit returned ZE_RESULT_ERROR_UNINITIALIZED" in report["reason"]


def test_aml_info_says_so() -> None:
    aml = shutil.which("aml") or ""
    cmd = [aml, "info"] if aml else [sys.executable, "-m", "aml_core", "info"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=60, check=True)
    block = proc.stdout[proc.stdout.index("\nze ") :]
    row, reason = block.split("\n\n")[0].strip().splitlines()[:2]
    assert row.split()[-1] == "unavailable"
    assert reason.strip().startswith("no usable Level Zero driver")


def test_null_driver_end_to_end(null_driver: Path) -> None:
    report = _scenario("null", ZE_ENABLE_ALT_DRIVERS=str(null_driver))
    assert report["available"] is True, report["reason"]
    assert [d["name"] for d in report["devices"]] == ["Null Device"]
    assert report["devices"][0]["type"] == "GPU"
    assert report["devices"][0]["api_version"] == "1.4"
    # zeMemGetAllocProperties leaves the struct untouched: memory type UNKNOWN
    for kind in ("device", "shared", "host"):
        assert report["areas"][kind] == {"ptr": True, "properties": "unknown"}
    assert report["areas"]["ipc_handle_bytes"] == 80
    # page size 0 and no reserved pointer: impossible results are FAILURE, not a crash
    assert report["virtual_memory"]["class"] == "AMLFailure"
    assert "page size 0" in report["virtual_memory"]["message"]
    assert report["reserve"]["class"] == "AMLFailure"
    assert report["physical"] is True
    assert report["put"] is False  # loader 1.8.12: no zeMemPutIpcHandle
    # loader 1.8.12 (API 1.4) has no zesInit: without ZES_ENABLE_SYSMAN, free memory is
    # not known and no core handle is handed to Sysman
    assert report["devices"][0]["free"] is None
    sysman = report["sysman"]
    assert (sysman["zesInit"], sysman["way"], sysman["handle"]) == (False, "zesInit", False)
    assert "does not export zesInit" in sysman["reason"]


def test_null_driver_legacy_sysman(null_driver: Path) -> None:
    """With ZES_ENABLE_SYSMAN=1 (the 1.4 way) the core handle goes to Sysman: the null
    driver answers SUCCESS and no memory module, so free memory is not known."""
    report = _scenario("probe", ZE_ENABLE_ALT_DRIVERS=str(null_driver), ZES_ENABLE_SYSMAN="1")
    assert report["available"] is True, report["reason"]
    assert report["devices"][0]["free"] is None
    report = _scenario("null", ZE_ENABLE_ALT_DRIVERS=str(null_driver), ZES_ENABLE_SYSMAN="1")
    sysman = report["sysman"]
    assert (sysman["way"], sysman["reason"], sysman["handle"]) == ("legacy", None, True)
    assert sysman["modules"] == [C.ZE_RESULT_SUCCESS, 0]


def test_aml_info_lists_the_null_device(null_driver: Path) -> None:
    """With the vendor's null driver built, ``aml info`` lists ze as available with one
    "Null Device" (the --json report, and the text the user reads)."""
    env = child_env(ZE_ENABLE_ALT_DRIVERS=str(null_driver))
    aml = shutil.which("aml") or ""
    cmd = [aml, "info"] if aml else [sys.executable, "-m", "aml_core", "info"]
    report = json.loads(
        subprocess.run(
            [*cmd, "--json"], capture_output=True, text=True, env=env, timeout=60, check=True
        ).stdout
    )
    (ze,) = [b for b in report["backends"] if b["name"] == "ze"]
    assert ze["available"] is True
    assert ze["reason"] is None
    assert [d["name"] for d in ze["devices"]] == ["Null Device"]
    text = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=True).stdout
    assert "0: Null Device" in text


def test_null_driver_by_name(null_driver: Path) -> None:
    report = _scenario("probe", ZE_ENABLE_NULL_DRIVER="1", LD_LIBRARY_PATH=str(null_driver.parent))
    assert report["available"] is True, report["reason"]


def test_validation_layer(null_driver: Path) -> None:
    report = _scenario(
        "validation",
        ZE_ENABLE_ALT_DRIVERS=str(null_driver),
        ZE_ENABLE_VALIDATION_LAYER="1",
        ZE_ENABLE_PARAMETER_VALIDATION="1",
    )
    expected = {
        "size0": ("AMLNotSupported", "zeMemAllocDevice", C.ZE_RESULT_ERROR_UNSUPPORTED_SIZE),
        "alignment3": ("AMLNotSupported", "zeMemAllocDevice", C.ZE_RESULT_ERROR_UNSUPPORTED_ALIGNMENT),
        "device_flags": ("AMLValueError", "zeMemAllocDevice", C.ZE_RESULT_ERROR_INVALID_ENUMERATION),
        "shared_flags": ("AMLValueError", "zeMemAllocShared", C.ZE_RESULT_ERROR_INVALID_ENUMERATION),
        "host_flags": ("AMLValueError", "zeMemAllocHost", C.ZE_RESULT_ERROR_INVALID_ENUMERATION),
        "host_size0": ("AMLNotSupported", "zeMemAllocHost", C.ZE_RESULT_ERROR_UNSUPPORTED_SIZE),
    }
    for key, (cls, function, native) in expected.items():
        got = report[key]
        assert got is not None, f"{key}: the validation layer accepted it"
        assert (got["class"], got["function"], got["native"]) == (cls, function, native), (key, got)
    # with aml's own checks the same input never reaches the loader
    for key in ("checked_alignment3", "checked_device_flags", "checked_size0"):
        assert report[key]["class"] == "AMLValueError"
        assert report[key]["native"] is None
    assert report["valid_call"] is True
