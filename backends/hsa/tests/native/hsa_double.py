"""Build the HSA driver double (``double.c``) with gcc and drive its control API via ctypes.

``build_double(mode, interface)`` compiles ``double.c`` into ``libhsa-runtime64.so.1``:

* ``mode="host"``: agents, pools and every ``hsa_amd_vmem_*`` call over host memory (CI);
* ``mode="forward"``: the same bookkeeping, memory forwarded to the CUDA driver's virtual
  memory calls (an NVIDIA machine: ``cuda.h`` and ``libcuda``);
* ``interface=(1, 6)`` (default) exports every call; ``(1, 4)`` leaves out
  ``hsa_amd_vmem_address_reserve_align`` (ROCm 6.0/6.1); ``(1, 0)`` every ``hsa_amd_vmem_*``
  (Debian's ROCr 5.2).

Builds are cached by a hash of the source and the command line. ``HSADOUBLE_EXTRA_CFLAGS``
adds compiler flags (``-fsanitize=address``); ``HSADOUBLE_CUDA_INCLUDE`` names a directory
holding ``cuda.h`` when the toolkit is elsewhere, ``HSADOUBLE_LIBCUDA`` the driver library
(or a stub) to link.

:class:`DoubleControl` wraps the exported ``hsadouble_*`` functions; load it from the same
path the code under test loads (``AML_HSA_LIBRARY``) so both share one library instance.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

__all__ = [
    "LIVE_KINDS",
    "SOURCE",
    "DoubleBuildError",
    "DoubleControl",
    "build_double",
    "build_fake_cuda",
    "find_cuda",
]

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "double.c"
CFLAGS = ("-O1", "-g", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", "-pthread", "-fvisibility=hidden")
#: What hsadouble_live counts.
LIVE_KINDS = ("init", "reservation", "handle", "mapping", "pool_alloc", "ipc_attach")

Mode = Literal["host", "forward"]
_VARIANTS = {(1, 6): [], (1, 4): ["-DHSADOUBLE_NO_ALIGN"], (1, 0): ["-DHSADOUBLE_NO_VMEM"]}


class DoubleBuildError(RuntimeError):
    """The double could not be built (no compiler, no CUDA headers or libcuda, compile error)."""


def find_cuda(need_library: bool = True) -> tuple[Path, Path]:
    """``(include dir with cuda.h, libcuda to link)`` or DoubleBuildError (without
    ``need_library``, the second is the include dir when no libcuda is found)."""
    incs = [os.environ.get("HSADOUBLE_CUDA_INCLUDE", "")]
    homes = [os.environ.get(v, "") for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        homes.append(str(Path(nvcc).resolve().parent.parent))
    for home in filter(None, homes):
        incs += [f"{home}/include", f"{home}/targets/x86_64-linux/include"]
    inc = next((Path(d) for d in incs if d and (Path(d) / "cuda.h").is_file()), None)
    if inc is None:
        raise DoubleBuildError("forward mode needs cuda.h (set CUDA_HOME or HSADOUBLE_CUDA_INCLUDE)")
    libs = [os.environ.get("HSADOUBLE_LIBCUDA", "")]
    libs += ["/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1", "/usr/lib/libcuda.so.1"]
    for home in filter(None, homes):
        libs += [f"{home}/lib64/stubs/libcuda.so", f"{home}/targets/x86_64-linux/lib/stubs/libcuda.so"]
    lib = next((Path(p) for p in libs if p and Path(p).exists()), None)
    if lib is None and not need_library:
        return inc, inc
    if lib is None:
        raise DoubleBuildError("forward mode needs libcuda (the NVIDIA driver or the toolkit stub)")
    return inc, lib


def build_fake_cuda(outdir: Path | None = None) -> Path:
    """Compile ``fake_cuda.c`` (a host-memory stand-in for ``libcuda.so.1``, against the
    ``cuda.h`` :func:`find_cuda` finds) and return its path: link a forward double to it
    (``HSADOUBLE_LIBCUDA``) to check forward mode without a GPU."""
    cc = os.environ.get("CC") or shutil.which("gcc")
    if not cc or not shutil.which(cc):
        raise DoubleBuildError("gcc is needed to build the fake libcuda")
    inc, _ = find_cuda(need_library=False)
    source = HERE / "fake_cuda.c"
    digest = hashlib.sha256(source.read_bytes() + str(inc).encode()).hexdigest()[:20]
    outdir = outdir or Path(tempfile.gettempdir()) / "aml-hsadouble" / f"fakecuda-{digest}"
    outdir.mkdir(parents=True, exist_ok=True)
    target = outdir / "libcuda.so.1"
    if not target.exists():
        tmp = outdir / f".build.{os.getpid()}.so"
        cmd = [cc, *CFLAGS, f"-I{inc}", "-Wl,-soname,libcuda.so.1", "-o", str(tmp), str(source)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise DoubleBuildError(f"building the fake libcuda failed ({' '.join(cmd)}):\n{proc.stderr}")
        os.replace(tmp, target)
    return target


def _command(cc: str, mode: Mode, interface: tuple[int, int], out: Path) -> list[str]:
    cmd = [cc, *CFLAGS, *os.environ.get("HSADOUBLE_EXTRA_CFLAGS", "").split(), *_VARIANTS[interface]]
    cmd.append("-Wl,-soname,libhsa-runtime64.so.1")
    if mode == "forward":
        inc, lib = find_cuda()
        cmd += ["-DHSADOUBLE_FORWARD_CUDA", f"-I{inc}", "-o", str(out), str(SOURCE), str(lib)]
        cmd.append(f"-Wl,-rpath,{lib.parent}")
    else:
        cmd += ["-o", str(out), str(SOURCE)]
    return cmd


def build_double(
    mode: Mode = "host", interface: tuple[int, int] = (1, 6), outdir: Path | None = None
) -> Path:
    """Compile the double (cached) and return the path of its ``libhsa-runtime64.so.1``."""
    if mode not in ("host", "forward"):
        raise ValueError(f"mode must be 'host' or 'forward', not {mode!r}")
    if interface not in _VARIANTS:
        raise ValueError(f"interface must be one of {sorted(_VARIANTS)}, not {interface!r}")
    cc = os.environ.get("CC") or shutil.which("gcc")
    if not cc or not shutil.which(cc):
        raise DoubleBuildError("gcc is needed to build the HSA double (Debian: apt-get install gcc)")
    key = hashlib.sha256(SOURCE.read_bytes())
    key.update("\0".join(_command(cc, mode, interface, Path("OUT"))).encode())
    digest = key.hexdigest()[:20]
    if outdir is None:
        outdir = (
            Path(tempfile.gettempdir()) / "aml-hsadouble" / f"{mode}-{interface[0]}.{interface[1]}-{digest}"
        )
    outdir.mkdir(parents=True, exist_ok=True)
    target = outdir / "libhsa-runtime64.so.1"
    stamp = outdir / ".stamp"
    if target.exists() and stamp.exists() and stamp.read_text() == digest:
        return target
    tmp = outdir / f".build.{os.getpid()}.so"
    cmd = _command(cc, mode, interface, tmp)
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise DoubleBuildError(
            f"building the HSA double failed ({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}"
        )
    os.replace(tmp, target)
    stamp.write_text(digest)
    return target


class DoubleControl:
    """ctypes wrapper of the double's ``hsadouble_*`` control functions."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        lib = ctypes.CDLL(str(self.path))
        self.lib = lib
        lib.hsadouble_inject.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.hsadouble_inject.restype = ctypes.c_int
        lib.hsadouble_reset.argtypes = []
        lib.hsadouble_reset.restype = None
        lib.hsadouble_calls.argtypes = [ctypes.c_char_p]
        lib.hsadouble_calls.restype = ctypes.c_long
        lib.hsadouble_live.argtypes = [ctypes.c_char_p]
        lib.hsadouble_live.restype = ctypes.c_long
        lib.hsadouble_set_gpus.argtypes = [ctypes.c_int, ctypes.c_size_t]
        lib.hsadouble_set_gpus.restype = ctypes.c_int
        lib.hsadouble_mode.argtypes = []
        lib.hsadouble_mode.restype = ctypes.c_char_p
        lib.hsadouble_interface.argtypes = []
        lib.hsadouble_interface.restype = ctypes.c_int

    @property
    def mode(self) -> str:
        return (self.lib.hsadouble_mode() or b"").decode()

    @property
    def interface(self) -> tuple[int, int]:
        value = int(self.lib.hsadouble_interface())
        return (value // 100, value % 100)

    def inject(self, function: str, status: int, skip: int = 0, times: int = 1) -> None:
        """Make ``function`` return ``status`` (doing nothing) after ``skip`` normal calls,
        for ``times`` calls (-1: forever)."""
        rc = self.lib.hsadouble_inject(function.encode(), status, skip, times)
        if rc == -1:
            raise ValueError(f"the double has no function {function!r}")
        if rc == -2:
            raise ValueError(f"bad skip={skip} / times={times}")
        if rc != 0:
            raise RuntimeError("the double's injection table is full")

    def reset(self) -> None:
        """Clear injections and counters, free everything, hsa_init's count back to 0."""
        self.lib.hsadouble_reset()

    def calls(self, function: str) -> int:
        n = int(self.lib.hsadouble_calls(function.encode()))
        if n < 0:
            raise ValueError(f"the double has no function {function!r}")
        return n

    def live(self, kind: str) -> int:
        n = int(self.lib.hsadouble_live(kind.encode()))
        if n < 0:
            raise ValueError(f"unknown kind {kind!r}; kinds: {LIVE_KINDS}")
        return n

    def set_gpus(self, count: int, memory: int = 0) -> None:
        """Host mode: emulate ``count`` GPU agents (``memory`` bytes each; 0 keeps it)."""
        if self.lib.hsadouble_set_gpus(count, memory) != 0:
            raise ValueError(f"count must be 0..8, not {count}")
