"""Build the Level Zero driver double (``double.c``) and the vendor's null driver, and drive
the double's control API via ctypes.

``build_double(mode, put=True, sysman="zesinit")`` compiles ``double.c`` into
``libze_loader.so.1`` in one of two modes: ``"host"`` (every ze* symbol over host memory;
CPU-only CI) or ``"forward"`` (every ze* call forwarded to the CUDA driver API; an NVIDIA
machine). ``put=False`` leaves ``zeMemPutIpcHandle`` out, as Debian's 1.8.12 loader;
``sysman="legacy"`` leaves ``zesInit``, ``zesDriverGet`` and ``zesDeviceGet`` out, as that
loader too (Sysman only through ``ZES_ENABLE_SYSMAN=1``), and ``sysman="none"`` every zes*
function. Builds are cached by a hash of the source, the command and the toolchain, under
``$AML_ZE_CACHE`` (default ``~/.cache/aml-ze``).

``build_null_driver()`` builds Level Zero's own null driver (``libze_null.so.1``) from
Debian's ``level-zero`` source package (``apt-get source level-zero``; needs a ``deb-src``
line, cmake, ninja and g++), cached the same way; ``run-tests`` prepares the source.

``DoubleControl`` wraps the exported ``zedouble_*`` functions. Load it with the same path
the code under test loads (``AML_ZE_LIBRARY``): the dynamic loader hands both the same
library, so the control calls act on the same state.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path

from tests.support import doubles
from tests.support.doubles import CudaToolkit, DoubleBuildError, Mode

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "double.c"
CFLAGS: tuple[str, ...] = (*doubles.CFLAGS, "-Wl,-soname,libze_loader.so.1")
#: Kinds of live objects the double counts.
LIVE_KINDS = (
    "context",
    "device",
    "host",
    "shared",
    "ipc_handle",
    "ipc_open",
    "physical",
    "reservation",
    "mapping",
)


def cache_dir() -> Path:
    """Where builds are cached (``$AML_ZE_CACHE``, default ``~/.cache/aml-ze``)."""
    return Path(os.environ.get("AML_ZE_CACHE") or Path.home() / ".cache" / "aml-ze")


def find_cuda() -> CudaToolkit:
    """Locate cuda.h and libcuda (the driver's, else the toolkit's stub), or raise."""
    return doubles.find_cuda("ZEDOUBLE")


def _compiler() -> str:
    return doubles.compiler("the Level Zero double")


#: ``build_double``'s Sysman variants -> the macro that builds each.
SYSMAN_VARIANTS: dict[str, tuple[str, ...]] = {
    "zesinit": (),
    "legacy": ("-DZEDOUBLE_SYSMAN_LEGACY",),
    "none": ("-DZEDOUBLE_NO_SYSMAN",),
}


def _command(cc: str, mode: Mode, put: bool, sysman: str, out: Path) -> list[str]:
    cmd = [cc, *CFLAGS, *doubles.extra_cflags("ZEDOUBLE")]
    if not put:
        cmd.append("-DZEDOUBLE_NO_PUT")
    cmd += SYSMAN_VARIANTS[sysman]
    tk = find_cuda() if mode == "forward" else None
    if tk is not None:
        cmd += ["-DZEDOUBLE_FORWARD_CUDA", f"-I{tk.include_dir}"]
    cmd += ["-o", str(out), str(SOURCE)]
    if tk is not None:
        cmd += tk.link_flags()
    return cmd


def build_double(
    mode: Mode = "host", *, put: bool = True, sysman: str = "zesinit", outdir: Path | None = None
) -> Path:
    """Compile the double and return the path of its ``libze_loader.so.1``."""
    doubles.check_mode(mode)
    if sysman not in SYSMAN_VARIANTS:
        raise ValueError(f"sysman must be one of {sorted(SYSMAN_VARIANTS)}, not {sysman!r}")
    cc = _compiler()
    return doubles.build_cached(
        lambda out: _command(cc, mode, put, sysman, out),
        what="the Level Zero double",
        name="libze_loader.so.1",
        inputs=[SOURCE, HERE / "double_abi.h"],
        cache=cache_dir() / "double",
        label=f"{mode}-{'put' if put else 'noput'}-{sysman}",
        outdir=outdir,
    )


def compile_forward_object(include_dir: Path, out: Path, sysman: str = "zesinit") -> None:
    """Compile (no link) the forward mode against ``include_dir``/cuda.h, with the same
    warnings as errors: the CPU-side check that forward mode builds (no libcuda needed)."""
    cmd = [
        _compiler(),
        *CFLAGS[:-1],
        "-c",
        "-DZEDOUBLE_FORWARD_CUDA",
        *SYSMAN_VARIANTS[sysman],
        f"-I{include_dir}",
        "-o",
        str(out),
        str(SOURCE),
    ]
    doubles.run_compiler(cmd, "forward mode")


def _level_zero_source() -> Path:
    """The unpacked ``level-zero`` source tree (``apt-get source level-zero`` under the
    cache, as run-tests does; ``AML_ZE_LEVEL_ZERO_SRC`` names another)."""
    named = os.environ.get("AML_ZE_LEVEL_ZERO_SRC")
    if named:
        return Path(named)
    found = sorted((cache_dir() / "src").glob("level-zero-*/"))
    if not found:
        raise DoubleBuildError(
            f"no level-zero source under {cache_dir() / 'src'}: run ./run-tests (it enables deb-src and "
            "runs apt-get source level-zero there) or set AML_ZE_LEVEL_ZERO_SRC"
        )
    return found[-1]


def build_null_driver() -> Path:
    """Build Level Zero's null driver (``ninja ze_null``) and return ``libze_null.so.1``."""
    src = _level_zero_source()
    build = cache_dir() / "null-build" / src.name
    target = build / "lib" / "libze_null.so.1"
    if target.exists():
        return target
    for tool in ("cmake", "ninja"):
        if not shutil.which(tool):
            raise DoubleBuildError(f"building the null driver needs {tool} (Debian: cmake ninja-build)")
    build.mkdir(parents=True, exist_ok=True)
    for cmd in (
        ["cmake", "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", str(src)],
        ["ninja", "ze_null"],
    ):
        doubles.run_compiler(cmd, f"the null driver in {build}", cwd=build)
    if not target.exists():
        raise DoubleBuildError(f"ninja ze_null did not produce {target}")
    return target


class DoubleControl(doubles.DoubleControl):
    """ctypes wrapper of the double's ``zedouble_*`` control functions."""

    PREFIX = "zedouble"
    LIVE_KINDS = LIVE_KINDS
    INJECT_ARGS = (ctypes.c_uint32, ctypes.c_long, ctypes.c_long)

    def __init__(self, path: Path | str) -> None:
        super().__init__(path)
        self._declare("set_devices", ctypes.c_int, ctypes.c_int, ctypes.c_size_t)
        self._declare("memcpy", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)

    def set_devices(self, count: int, memory_per_device: int = 1 << 30) -> None:
        """Host mode: emulate ``count`` devices with ``memory_per_device`` bytes each."""
        if self._lib.zedouble_set_devices(count, memory_per_device) != 0:
            raise ValueError(f"the double emulates 0..8 devices, not {count}")

    def write(self, ptr: int, data: bytes) -> None:
        """Copy ``data`` to any address (device memory included)."""
        src = ctypes.create_string_buffer(data, len(data))
        if self._lib.zedouble_memcpy(ptr, ctypes.addressof(src), len(data)) != 0:
            raise RuntimeError(f"the double could not write {len(data)} bytes at 0x{ptr:x}")

    def read(self, ptr: int, n: int) -> bytes:
        """Copy ``n`` bytes from any address (device memory included)."""
        out = ctypes.create_string_buffer(n)
        if n and self._lib.zedouble_memcpy(ctypes.addressof(out), ptr, n) != 0:
            raise RuntimeError(f"the double could not read {n} bytes at 0x{ptr:x}")
        return out.raw
