"""Build the Level Zero driver double (``double.c``) and the vendor's null driver, and drive
the double's control API via ctypes.

``build_double(mode, put=True)`` compiles ``double.c`` into ``libze_loader.so.1`` in one of
two modes: ``"host"`` (every ze* symbol over host memory; CPU-only CI) or ``"forward"``
(every ze* call forwarded to the CUDA driver API; an NVIDIA machine). ``put=False`` leaves
``zeMemPutIpcHandle`` out, as Debian's 1.8.12 loader. Builds are cached by a hash of the
source, the command and the toolchain, under ``$AML_ZE_CACHE`` (default
``~/.cache/aml-ze``).

``build_null_driver()`` builds Level Zero's own null driver (``libze_null.so.1``) from
Debian's ``level-zero`` source package (``apt-get source level-zero``; needs a ``deb-src``
line, cmake, ninja and g++), cached the same way; ``run-tests`` prepares the source.

``DoubleControl`` wraps the exported ``zedouble_*`` functions. Load it with the same path
the code under test loads (``AML_ZE_LIBRARY``): the dynamic loader hands both the same
library, so the control calls act on the same state.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "CFLAGS",
    "LIVE_KINDS",
    "SOURCE",
    "CudaToolkit",
    "DoubleBuildError",
    "DoubleControl",
    "build_double",
    "build_null_driver",
    "cache_dir",
    "compile_forward_object",
    "find_cuda",
]

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "double.c"
CFLAGS: tuple[str, ...] = (
    "-O1",
    "-g",
    "-shared",
    "-fPIC",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-pthread",
    "-fvisibility=hidden",
    "-Wl,-soname,libze_loader.so.1",
)
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

Mode = Literal["host", "forward"]


class DoubleBuildError(RuntimeError):
    """The double or the null driver could not be built (no compiler, no CUDA, no source)."""


def cache_dir() -> Path:
    """Where builds are cached (``$AML_ZE_CACHE``, default ``~/.cache/aml-ze``)."""
    return Path(os.environ.get("AML_ZE_CACHE") or Path.home() / ".cache" / "aml-ze")


@dataclass(frozen=True)
class CudaToolkit:
    """Where cuda.h and libcuda were found (forward mode uses the driver API only)."""

    include_dir: Path
    libcuda: Path


def _cuda_homes() -> list[Path]:
    homes = [
        Path(v) for v in (os.environ.get(n) for n in ("ZEDOUBLE_CUDA_HOME", "CUDA_HOME", "CUDA_PATH")) if v
    ]
    homes.append(Path("/usr/local/cuda"))
    nvcc = shutil.which("nvcc")
    if nvcc:
        homes.append(Path(nvcc).resolve().parent.parent)
    return homes


def find_cuda() -> CudaToolkit:
    """Locate cuda.h and libcuda (the driver's, else the toolkit's stub), or raise."""
    for home in _cuda_homes():
        for inc in (home / "include", home / "targets" / "x86_64-linux" / "include"):
            if not (inc / "cuda.h").exists():
                continue
            libdirs = [home / "lib64", home / "lib", home / "targets" / "x86_64-linux" / "lib"]
            system = [Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib64"), Path("/usr/local/nvidia/lib64")]
            for d in [*system, *libdirs, *(d / "stubs" for d in libdirs)]:
                for name in ("libcuda.so.1", "libcuda.so"):
                    if (d / name).exists():
                        return CudaToolkit(inc, d / name)
            raise DoubleBuildError(f"forward mode needs libcuda; none found near {home}")
    raise DoubleBuildError("forward mode needs a CUDA toolkit (cuda.h); set CUDA_HOME or ZEDOUBLE_CUDA_HOME")


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("gcc")
    if not cc or not shutil.which(cc):
        raise DoubleBuildError("gcc is needed to build the Level Zero double (Debian: apt-get install gcc)")
    return cc


def _command(cc: str, mode: Mode, put: bool, out: Path) -> list[str]:
    cmd = [cc, *CFLAGS, *os.environ.get("ZEDOUBLE_EXTRA_CFLAGS", "").split()]
    if not put:
        cmd.append("-DZEDOUBLE_NO_PUT")
    tk = find_cuda() if mode == "forward" else None
    if tk is not None:
        cmd += ["-DZEDOUBLE_FORWARD_CUDA", f"-I{tk.include_dir}"]
    cmd += ["-o", str(out), str(SOURCE)]
    if tk is not None:
        cmd += [str(tk.libcuda)]
    return cmd


def build_double(mode: Mode = "host", *, put: bool = True, outdir: Path | None = None) -> Path:
    """Compile the double and return the path of its ``libze_loader.so.1``."""
    if mode not in ("host", "forward"):
        raise ValueError(f"mode must be 'host' or 'forward', not {mode!r}")
    cc = _compiler()
    key = hashlib.sha256(SOURCE.read_bytes() + (HERE / "double_abi.h").read_bytes())
    key.update("\0".join(_command(cc, mode, put, Path("OUT"))).encode())
    digest = key.hexdigest()[:20]
    outdir = outdir or cache_dir() / "double" / f"{mode}-{'put' if put else 'noput'}-{digest}"
    target = outdir / "libze_loader.so.1"
    if target.exists():
        return target
    outdir.mkdir(parents=True, exist_ok=True)
    tmp = outdir / f".libze_loader.{os.getpid()}.tmp"
    cmd = _command(cc, mode, put, tmp)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise DoubleBuildError(f"building the double failed ({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}")
    os.replace(tmp, target)
    return target


def compile_forward_object(include_dir: Path, out: Path) -> None:
    """Compile (no link) the forward mode against ``include_dir``/cuda.h, with the same
    warnings as errors: the CPU-side check that forward mode builds (no libcuda needed)."""
    cmd = [
        _compiler(),
        *CFLAGS[:-1],
        "-c",
        "-DZEDOUBLE_FORWARD_CUDA",
        f"-I{include_dir}",
        "-o",
        str(out),
        str(SOURCE),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise DoubleBuildError(f"compiling forward mode failed ({' '.join(cmd)}):\n{proc.stderr}")


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
        proc = subprocess.run(cmd, cwd=build, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise DoubleBuildError(f"{' '.join(cmd)} failed in {build}:\n{proc.stdout[-2000:]}{proc.stderr}")
    if not target.exists():
        raise DoubleBuildError(f"ninja ze_null did not produce {target}")
    return target


class DoubleControl:
    """ctypes wrapper of the double's ``zedouble_*`` control functions."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        lib = ctypes.CDLL(str(self.path))
        self._lib = lib
        lib.zedouble_inject.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_long, ctypes.c_long]
        lib.zedouble_inject.restype = ctypes.c_int
        lib.zedouble_reset.argtypes = []
        lib.zedouble_reset.restype = None
        lib.zedouble_calls.argtypes = [ctypes.c_char_p]
        lib.zedouble_calls.restype = ctypes.c_long
        lib.zedouble_live.argtypes = [ctypes.c_char_p]
        lib.zedouble_live.restype = ctypes.c_long
        lib.zedouble_set_devices.argtypes = [ctypes.c_int, ctypes.c_size_t]
        lib.zedouble_set_devices.restype = ctypes.c_int
        lib.zedouble_memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        lib.zedouble_memcpy.restype = ctypes.c_int
        lib.zedouble_mode.argtypes = []
        lib.zedouble_mode.restype = ctypes.c_char_p

    @property
    def mode(self) -> str:
        """``"host"`` or ``"forward"``."""
        return (self._lib.zedouble_mode() or b"").decode()

    def inject(self, function: str, error: int, skip: int = 0, times: int = 1) -> None:
        """Make ``function`` return ``error`` (doing nothing) after ``skip`` normal calls, for
        ``times`` calls (-1: forever)."""
        rc = self._lib.zedouble_inject(function.encode(), error, skip, times)
        if rc == -1:
            raise ValueError(f"the double has no function {function!r}")
        if rc == -2:
            raise ValueError(f"bad skip={skip} / times={times}")
        if rc != 0:
            raise RuntimeError("the double's injection table is full")

    def reset(self) -> None:
        """Free everything, clear injections and counters."""
        self._lib.zedouble_reset()

    def set_devices(self, count: int, memory_per_device: int = 1 << 30) -> None:
        """Host mode: emulate ``count`` devices with ``memory_per_device`` bytes each."""
        if self._lib.zedouble_set_devices(count, memory_per_device) != 0:
            raise ValueError(f"the double emulates 0..8 devices, not {count}")

    def calls(self, function: str) -> int:
        n = int(self._lib.zedouble_calls(function.encode()))
        if n < 0:
            raise ValueError(f"the double has no function {function!r}")
        return n

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

    def live(self, kind: str) -> int:
        n = int(self._lib.zedouble_live(kind.encode()))
        if n < 0:
            raise ValueError(f"unknown kind {kind!r}")
        return n

    def lives(self) -> dict[str, int]:
        return {kind: self.live(kind) for kind in LIVE_KINDS}
