"""Build the HIP driver double (``double.c``) with gcc and drive its control API via ctypes.

``build_double()`` compiles ``double.c`` into ``libamdhip64.so.<major>`` in one of two modes:

* ``"host"``: every hip* symbol works over ordinary host memory (CPU-only CI);
* ``"forward"``: every hip* call is forwarded to the CUDA runtime/driver (an NVIDIA machine).

Builds are cached by a hash of the source, the mode, the emulated version and the toolchain
paths, so that many tests (and pytest-xdist workers) share one library file.  Extra compiler
flags (e.g. ``-fsanitize=address``) can be added with ``HIPDOUBLE_EXTRA_CFLAGS``.

``DoubleControl`` wraps the exported ``hipdouble_*`` control functions.  Load it with the same
path the code under test loads (``AML_HIP_LIBRARY``): the dynamic loader then hands both the
same library, so the control calls act on the same global state.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "CFLAGS",
    "SOURCE",
    "CudaToolkit",
    "DoubleBuildError",
    "DoubleControl",
    "build_double",
    "find_cuda",
    "hip_version",
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
)
DEFAULT_VERSION = 60200000

Mode = Literal["host", "forward"]


class DoubleBuildError(RuntimeError):
    """The double could not be built (no compiler, no CUDA toolkit, compile error)."""


def hip_version(major: int, minor: int, patch: int = 0) -> int:
    """HIP_VERSION encoding: major * 10000000 + minor * 100000 + patch."""
    return major * 10_000_000 + minor * 100_000 + patch


@dataclass(frozen=True)
class CudaToolkit:
    """Where the CUDA headers and libraries for forward mode were found."""

    include_dirs: tuple[Path, ...]
    cudart_dir: Path
    cudart_lib: str  # "-lcudart" or "-l:libcudart.so.13"
    libcuda: Path  # file given to the linker (driver libcuda.so.1 or the toolkit stub)


def _cuda_homes() -> list[Path]:
    homes: list[Path] = []
    for var in ("HIPDOUBLE_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"):
        value = os.environ.get(var)
        if value:
            homes.append(Path(value))
    homes.append(Path("/usr/local/cuda"))
    nvcc = shutil.which("nvcc")
    if nvcc:
        homes.append(Path(nvcc).resolve().parent.parent)
    return homes


def _first_existing(paths: list[Path]) -> Path | None:
    for path in paths:
        if path.exists():
            return path
    return None


def find_cuda() -> CudaToolkit:
    """Locate cuda_runtime_api.h, cuda.h, libcudart and libcuda, or raise DoubleBuildError."""
    for home in _cuda_homes():
        incs = [home / "include", home / "targets" / "x86_64-linux" / "include"]
        inc = _first_existing([d for d in incs if (d / "cuda_runtime_api.h").exists()])
        if inc is None or not (inc / "cuda.h").exists():
            continue
        libdirs = [home / "lib64", home / "lib", home / "targets" / "x86_64-linux" / "lib"]
        cudart_dir: Path | None = None
        cudart_lib = "-lcudart"
        for d in libdirs:
            if (d / "libcudart.so").exists():
                cudart_dir = d
                break
            versioned = sorted(d.glob("libcudart.so.[0-9]*"))
            if versioned:
                cudart_dir, cudart_lib = d, f"-l:{versioned[0].name}"
                break
        if cudart_dir is None:
            continue
        libcuda = _find_libcuda([d / "stubs" for d in libdirs] + libdirs)
        if libcuda is None:
            raise DoubleBuildError(
                "forward mode needs libcuda (the NVIDIA driver library or the toolkit stub); "
                f"none found near {home} or in the system library path"
            )
        return CudaToolkit((inc,), cudart_dir, cudart_lib, libcuda)
    raise DoubleBuildError(
        "forward mode needs a CUDA toolkit (cuda_runtime_api.h, cuda.h, libcudart); set CUDA_HOME "
        "or HIPDOUBLE_CUDA_HOME"
    )


def _find_libcuda(extra_dirs: list[Path]) -> Path | None:
    system = [
        Path("/usr/lib/x86_64-linux-gnu"),
        Path("/usr/lib64"),
        Path("/usr/lib"),
        Path("/usr/local/nvidia/lib64"),
        Path("/usr/local/nvidia/lib"),
    ]
    # prefer the real driver library; the stub only links
    for d in system + extra_dirs:
        for name in ("libcuda.so.1", "libcuda.so"):
            if (d / name).exists():
                return d / name
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return None
    for line in out.splitlines():
        if "libcuda.so.1" in line and "=>" in line:
            return Path(line.split("=>", 1)[1].strip())
    return None


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("gcc")
    if not cc or not shutil.which(cc):
        raise DoubleBuildError(
            "gcc is needed to build the HIP double (backends/hip/tests/native/double.c); install gcc "
            "(Debian: apt-get install gcc) or set CC"
        )
    return cc


def _command(cc: str, mode: Mode, version: int | None, major: int, out: Path) -> tuple[list[str], str]:
    cmd = [cc, *CFLAGS, *os.environ.get("HIPDOUBLE_EXTRA_CFLAGS", "").split()]
    cmd.append(f"-Wl,-soname,libamdhip64.so.{major}")
    extra = ""
    if version is not None:
        cmd.append(f"-DHIPDOUBLE_BUILD_VERSION={version}")
    if mode == "forward":
        tk = find_cuda()
        cmd.append("-DHIPDOUBLE_FORWARD_CUDA")
        cmd += [f"-I{d}" for d in tk.include_dirs]
    cmd += ["-o", str(out), str(SOURCE)]
    if mode == "forward":
        cmd += [
            f"-L{tk.cudart_dir}",
            tk.cudart_lib,
            str(tk.libcuda),
            f"-Wl,-rpath,{tk.cudart_dir}",
        ]
        extra = repr(tk)
    return cmd, extra


def build_double(
    mode: Mode = "host",
    outdir: Path | None = None,
    version: int | None = None,
) -> Path:
    """Compile the double and return the path of ``libamdhip64.so.<major>``.

    ``version`` (HIP_VERSION encoding) becomes the default emulated version of the library
    (``HIPDOUBLE_VERSION`` in the environment and ``hipdouble_set_version`` still override it),
    names the file after its major (``.so.5``, ``.so.6``, ``.so.7``) and, below 6.3, leaves
    ``hipExtHostAlloc`` out of the exported symbols, like the real library.  Without it the
    library emulates 6.2 by default and exports every symbol.
    """
    if mode not in ("host", "forward"):
        raise ValueError(f"mode must be 'host' or 'forward', not {mode!r}")
    if version is not None and version <= 0:
        raise ValueError(f"version must be a positive HIP_VERSION, not {version}")
    cc = _compiler()
    major = (version if version is not None else DEFAULT_VERSION) // 10_000_000
    probe_cmd, extra = _command(cc, mode, version, major, Path("OUT"))
    key = hashlib.sha256()
    key.update(SOURCE.read_bytes())
    key.update("\0".join(probe_cmd).encode())
    key.update(extra.encode())
    digest = key.hexdigest()[:20]
    if outdir is None:
        outdir = Path(tempfile.gettempdir()) / "aml-hipdouble" / f"{mode}-{digest}"
    outdir.mkdir(parents=True, exist_ok=True)
    target = outdir / f"libamdhip64.so.{major}"
    stamp = outdir / f".libamdhip64.so.{major}.sha"
    if target.exists() and stamp.exists() and stamp.read_text() == digest:
        return target
    tmp = outdir / f".{target.name}.{os.getpid()}.tmp"
    cmd, _ = _command(cc, mode, version, major, tmp)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise DoubleBuildError(
            f"building the HIP double failed ({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}"
        )
    os.replace(tmp, target)
    stamp_tmp = outdir / f".{stamp.name}.{os.getpid()}.tmp"
    stamp_tmp.write_text(digest)
    os.replace(stamp_tmp, stamp)
    return target


class DoubleControl:
    """ctypes wrapper of the double's ``hipdouble_*`` control functions."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        lib = ctypes.CDLL(str(self.path))
        self._lib = lib
        lib.hipdouble_inject.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.hipdouble_inject.restype = ctypes.c_int
        lib.hipdouble_reset.argtypes = []
        lib.hipdouble_reset.restype = None
        lib.hipdouble_set_version.argtypes = [ctypes.c_int]
        lib.hipdouble_set_version.restype = None
        lib.hipdouble_get_version.argtypes = []
        lib.hipdouble_get_version.restype = ctypes.c_int
        lib.hipdouble_set_devices.argtypes = [ctypes.c_int, ctypes.c_size_t]
        lib.hipdouble_set_devices.restype = None
        lib.hipdouble_set_attribute.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.hipdouble_set_attribute.restype = ctypes.c_int
        lib.hipdouble_calls.argtypes = [ctypes.c_char_p]
        lib.hipdouble_calls.restype = ctypes.c_long
        lib.hipdouble_live.argtypes = [ctypes.c_char_p]
        lib.hipdouble_live.restype = ctypes.c_long
        lib.hipdouble_last_call_nargs.argtypes = [ctypes.c_char_p]
        lib.hipdouble_last_call_nargs.restype = ctypes.c_int
        lib.hipdouble_last_call_arg.argtypes = [
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_longlong),
        ]
        lib.hipdouble_last_call_arg.restype = ctypes.c_int
        lib.hipdouble_mode.argtypes = []
        lib.hipdouble_mode.restype = ctypes.c_char_p

    @property
    def lib(self) -> ctypes.CDLL:
        """The loaded double (the same handle as any other CDLL of the same path)."""
        return self._lib

    @property
    def mode(self) -> str:
        """``"host"`` or ``"forward"``."""
        return (self._lib.hipdouble_mode() or b"").decode()

    @property
    def version(self) -> int:
        """The emulated HIP_VERSION."""
        return int(self._lib.hipdouble_get_version())

    def inject(self, function: str, error: int, skip: int = 0, times: int = 1) -> None:
        """Make ``function`` return ``error`` (doing nothing) after ``skip`` normal calls, for
        ``times`` calls (-1: forever).  Several injections may be active at once."""
        rc = self._lib.hipdouble_inject(function.encode(), error, skip, times)
        if rc == -1:
            raise ValueError(f"the double has no hip function {function!r}")
        if rc == -2:
            raise ValueError(f"bad skip={skip} / times={times} (skip >= 0, times > 0 or -1)")
        if rc != 0:
            raise RuntimeError("the double's injection table is full")

    def reset(self) -> None:
        """Clear injections, counters and recorded arguments, free everything, reread the env."""
        self._lib.hipdouble_reset()

    def set_version(self, version: int) -> None:
        """Emulate another HIP_VERSION (e.g. ``hip_version(5, 2, 21153)``)."""
        self._lib.hipdouble_set_version(version)

    def set_devices(self, count: int, memory_per_device: int = 1 << 30) -> None:
        """Host mode: emulate ``count`` devices with ``memory_per_device`` bytes each."""
        self._lib.hipdouble_set_devices(count, memory_per_device)

    def set_attribute(self, attr: int, value: int) -> None:
        """Make hipDeviceGetAttribute(attr) answer ``value`` on every device."""
        if self._lib.hipdouble_set_attribute(attr, value) != 0:
            raise RuntimeError("the double's attribute-override table is full")

    def calls(self, function: str) -> int:
        """How many times ``function`` was called since load or the last reset."""
        n = int(self._lib.hipdouble_calls(function.encode()))
        if n < 0:
            raise ValueError(f"the double has no hip function {function!r}")
        return n

    def live(self, kind: str) -> int:
        """Live objects of ``kind``: device, host, managed, registered, ipc, vmm_handle,
        vmm_reservation, vmm_mapping, stream."""
        n = int(self._lib.hipdouble_live(kind.encode()))
        if n < 0:
            raise ValueError(f"unknown kind {kind!r}")
        return n

    def last_args(self, function: str) -> tuple[int, ...] | None:
        """Integer/pointer arguments of the last call of ``function`` in C parameter order
        (pointers as addresses, flags zero-extended), or None if it was never called."""
        name = function.encode()
        n = int(self._lib.hipdouble_last_call_nargs(name))
        if n == -1:
            raise ValueError(f"the double has no hip function {function!r}")
        if n < 0:
            return None
        out = ctypes.c_longlong()
        values: list[int] = []
        for i in range(n):
            if self._lib.hipdouble_last_call_arg(name, i, ctypes.byref(out)) != 0:
                raise RuntimeError(f"could not read argument {i} of {function}")
            values.append(int(out.value))
        return tuple(values)
