"""Building and driving C driver doubles: a backend's native library rewritten in C over host
memory (or forwarding to CUDA), built with gcc and controlled through ctypes.

What every double's build helper shares lives here; a backend's own helper
(``backends/<name>/tests/native/<name>_double.py``) keeps its sources, flags, symbols and the
controls only its double has:

* :func:`compiler` (``$CC`` or gcc) and :func:`build_cached`: compile into a directory named
  after a content hash of the inputs and the command (so that many tests and processes share
  one file), atomically, rebuilding when a stamp of that hash does not match;
* :func:`find_cuda`: cuda.h, libcuda and, if asked, the CUDA runtime, for forward mode;
* :class:`DoubleControl`: the ctypes basics of a double's ``<prefix>_*`` control functions
  (inject a native error into a function, call counts, last arguments, live counters,
  reset, mode).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

__all__ = [
    "CFLAGS",
    "CudaToolkit",
    "DoubleBuildError",
    "DoubleControl",
    "Mode",
    "build_cached",
    "check_mode",
    "compiler",
    "extra_cflags",
    "find_cuda",
    "run_compiler",
]

#: The flags every double is built with (a shared library, all warnings as errors, only
#: ``API``-marked symbols exported).
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

#: ``host``: the double over host memory (CPU-only CI); ``forward``: forwarded to CUDA.
Mode = Literal["host", "forward"]


class DoubleBuildError(RuntimeError):
    """A double could not be built (no compiler, no CUDA toolkit, compile error)."""


def check_mode(mode: str) -> None:
    """Refuse a mode other than ``host`` or ``forward`` (ValueError)."""
    if mode not in ("host", "forward"):
        raise ValueError(f"mode must be 'host' or 'forward', not {mode!r}")


def compiler(what: str) -> str:
    """``$CC``, else gcc; DoubleBuildError naming ``what`` (``"the HIP double"``) if neither is found."""
    cc = os.environ.get("CC") or shutil.which("gcc")
    if not cc or not shutil.which(cc):
        raise DoubleBuildError(f"gcc is needed to build {what} (Debian: apt-get install gcc) or set CC")
    return cc


def extra_cflags(prefix: str) -> list[str]:
    """The flags of ``$<PREFIX>_EXTRA_CFLAGS`` (``-fsanitize=address``...)."""
    return os.environ.get(f"{prefix}_EXTRA_CFLAGS", "").split()


def run_compiler(cmd: Sequence[str], what: str, cwd: Path | None = None) -> None:
    """Run ``cmd``; DoubleBuildError with its output if it fails."""
    proc = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise DoubleBuildError(f"building {what} failed ({' '.join(cmd)}):\n{proc.stdout}{proc.stderr}")


def build_cached(
    command: Callable[[Path], Sequence[str]],
    *,
    what: str,
    name: str,
    inputs: Sequence[Path],
    cache: Path,
    label: str,
    outdir: Path | None = None,
    key: str = "",
) -> Path:
    """Build ``name`` with ``command(output path)`` and return its path.

    The content hash of ``inputs``, the command and ``key`` names the directory
    (``cache/<label>-<hash>``, or ``outdir`` when given) and is written next to the file: a
    file whose stamp matches is reused, any other is rebuilt. The file is compiled under a
    temporary name and renamed into place, so that concurrent builders never see half a file.
    """
    digest_of = hashlib.sha256()
    for path in inputs:
        digest_of.update(path.read_bytes())
    digest_of.update("\0".join(command(Path("OUT"))).encode())
    digest_of.update(key.encode())
    digest = digest_of.hexdigest()[:20]
    outdir = outdir or cache / f"{label}-{digest}"
    outdir.mkdir(parents=True, exist_ok=True)
    target = outdir / name
    stamp = outdir / f".{name}.sha"
    if target.exists() and stamp.exists() and stamp.read_text() == digest:
        return target
    tmp = outdir / f".{name}.{os.getpid()}.tmp"
    try:
        run_compiler(command(tmp), what)
    except DoubleBuildError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, target)
    stamp_tmp = outdir / f".{stamp.name}.{os.getpid()}.tmp"
    stamp_tmp.write_text(digest)
    os.replace(stamp_tmp, stamp)
    return target


@dataclass(frozen=True)
class CudaToolkit:
    """Where forward mode's CUDA was found."""

    include_dir: Path
    #: The driver library (or the toolkit's link stub) to link; None when not asked for.
    libcuda: Path | None
    #: The CUDA runtime's directory and its linker flag (``-lcudart``, ``-l:libcudart.so.13``),
    #: when asked for.
    cudart_dir: Path | None = None
    cudart_lib: str | None = None

    def link_flags(self, rpath: bool = False) -> list[str]:
        """The runtime (if found) and libcuda, for after the sources on the command line;
        with ``rpath``, the runtime's directory (else libcuda's) is searched at load time."""
        flags = [f"-L{self.cudart_dir}", self.cudart_lib] if self.cudart_dir and self.cudart_lib else []
        flags += [str(self.libcuda)] if self.libcuda else []
        where = self.cudart_dir or (self.libcuda.parent if self.libcuda else None)
        return flags + ([f"-Wl,-rpath,{where}"] if rpath and where else [])


_SYSTEM_LIBDIRS = (
    Path("/usr/lib/x86_64-linux-gnu"),
    Path("/usr/lib64"),
    Path("/usr/lib"),
    Path("/usr/local/nvidia/lib64"),
    Path("/usr/local/nvidia/lib"),
)


def _cuda_homes(prefix: str) -> list[Path]:
    names = (f"{prefix}_CUDA_HOME", "CUDA_HOME", "CUDA_PATH")
    homes = [Path(v) for v in (os.environ.get(n) for n in names) if v]
    homes.append(Path("/usr/local/cuda"))
    nvcc = shutil.which("nvcc")
    if nvcc:
        homes.append(Path(nvcc).resolve().parent.parent)
    return homes


def _libdirs(home: Path) -> list[Path]:
    return [home / "lib64", home / "lib", home / "targets" / "x86_64-linux" / "lib"]


def _cudart(home: Path) -> tuple[Path, str] | None:
    for d in _libdirs(home):
        if (d / "libcudart.so").exists():
            return d, "-lcudart"
        versioned = sorted(d.glob("libcudart.so.[0-9]*"))
        if versioned:
            return d, f"-l:{versioned[0].name}"
    return None


def _find_libcuda(prefix: str, homes: list[Path]) -> Path | None:
    named = os.environ.get(f"{prefix}_LIBCUDA")
    if named and Path(named).exists():
        return Path(named)
    # the real driver library first; a toolkit's stub only links
    dirs = [*_SYSTEM_LIBDIRS]
    for home in homes:
        dirs += _libdirs(home)
        dirs += [d / "stubs" for d in _libdirs(home)]
    for d in dirs:
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


def find_cuda(prefix: str, *, runtime: bool = False, need_library: bool = True) -> CudaToolkit:
    """Find forward mode's CUDA, or raise DoubleBuildError.

    Homes are searched in order: ``$<PREFIX>_CUDA_HOME``, ``$CUDA_HOME``, ``$CUDA_PATH``,
    /usr/local/cuda and nvcc's; ``$<PREFIX>_CUDA_INCLUDE`` names an include directory first.
    The include directory must hold cuda.h (and cuda_runtime_api.h and a libcudart beside it
    with ``runtime``). libcuda is ``$<PREFIX>_LIBCUDA``, else the driver's in the system
    directories, else a home's (its stub), else ldconfig's; without ``need_library`` a
    missing one is None.
    """
    homes = _cuda_homes(prefix)
    headers = ("cuda.h", "cuda_runtime_api.h") if runtime else ("cuda.h",)
    candidates: list[tuple[Path, Path | None]] = []
    named = os.environ.get(f"{prefix}_CUDA_INCLUDE")
    if named:
        candidates.append((Path(named), None))
    for h in homes:
        candidates += [(h / "include", h), (h / "targets" / "x86_64-linux" / "include", h)]
    for inc, home in candidates:
        if not all((inc / h).exists() for h in headers):
            continue
        cudart = None
        if runtime:
            cudart = _cudart(home) if home is not None else None
            if cudart is None:
                continue
        ordered = [home, *(h for h in homes if h != home)] if home is not None else homes
        libcuda = _find_libcuda(prefix, ordered)
        if libcuda is None and need_library:
            raise DoubleBuildError(
                "forward mode needs libcuda (the NVIDIA driver library or the toolkit stub); "
                f"none found near {home or inc} or in the system library path"
            )
        if cudart is None:
            return CudaToolkit(inc, libcuda)
        return CudaToolkit(inc, libcuda, *cudart)
    what = "cuda.h, cuda_runtime_api.h, libcudart" if runtime else "cuda.h"
    raise DoubleBuildError(
        f"forward mode needs a CUDA toolkit ({what}); set CUDA_HOME, {prefix}_CUDA_HOME "
        f"or {prefix}_CUDA_INCLUDE"
    )


class DoubleControl:
    """ctypes wrapper of a double's control functions ``<PREFIX>_inject``, ``_reset``,
    ``_calls``, ``_live`` and ``_mode`` (and ``_last_call_nargs``/``_last_call_arg`` where
    the double records arguments). A backend's subclass names the prefix, its live kinds
    and declares its own controls.

    Load it with the path the code under test loads: the dynamic loader then hands both the
    same library, so the control calls act on the same global state.
    """

    #: The prefix of the control functions (``"hipdouble"``).
    PREFIX: ClassVar[str] = ""
    #: Names the API in messages: ``"hip"`` says "no hip function".
    FAMILY: ClassVar[str] = ""
    #: The kinds ``live()`` knows, for :meth:`lives`.
    LIVE_KINDS: ClassVar[tuple[str, ...]] = ()
    #: ``_inject``'s (error, skip, times) argument types.
    INJECT_ARGS: ClassVar[tuple[Any, ...]] = (ctypes.c_int, ctypes.c_int, ctypes.c_int)

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lib = ctypes.CDLL(str(self.path))
        c_char_p = ctypes.c_char_p
        self._declare("inject", ctypes.c_int, c_char_p, *self.INJECT_ARGS)
        self._declare("reset", None)
        self._declare("calls", ctypes.c_long, c_char_p)
        self._declare("live", ctypes.c_long, c_char_p)
        self._declare("mode", c_char_p)
        if hasattr(self._lib, f"{self.PREFIX}_last_call_nargs"):
            self._declare("last_call_nargs", ctypes.c_int, c_char_p)
            self._declare(
                "last_call_arg", ctypes.c_int, c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_longlong)
            )

    def _declare(self, name: str, restype: Any, *argtypes: Any) -> None:
        """Set the prototype of ``<PREFIX>_<name>``."""
        fn = getattr(self._lib, f"{self.PREFIX}_{name}")
        fn.argtypes = list(argtypes)
        fn.restype = restype

    def _fn(self, name: str) -> Any:
        return getattr(self._lib, f"{self.PREFIX}_{name}")

    def _no_function(self, function: str) -> ValueError:
        family = f"{self.FAMILY} function" if self.FAMILY else "function"
        return ValueError(f"the double has no {family} {function!r}")

    @property
    def lib(self) -> ctypes.CDLL:
        """The loaded double (the same handle as any other CDLL of the same path)."""
        return self._lib

    @property
    def mode(self) -> str:
        """``"host"`` or ``"forward"``."""
        return (self._fn("mode")() or b"").decode()

    def inject(self, function: str, error: int, skip: int = 0, times: int = 1) -> None:
        """Make ``function`` return ``error`` (doing nothing) after ``skip`` normal calls, for
        ``times`` calls (-1: forever). Several injections may be active at once."""
        rc = self._fn("inject")(function.encode(), error, skip, times)
        if rc == -1:
            raise self._no_function(function)
        if rc == -2:
            raise ValueError(f"bad skip={skip} / times={times} (skip >= 0, times > 0 or -1)")
        if rc != 0:
            raise RuntimeError("the double's injection table is full")

    def reset(self) -> None:
        """Clear injections and counters, free everything (the double says what else)."""
        self._fn("reset")()

    def calls(self, function: str) -> int:
        """How many times ``function`` was called since load or the last reset."""
        n = int(self._fn("calls")(function.encode()))
        if n < 0:
            raise self._no_function(function)
        return n

    def live(self, kind: str) -> int:
        """Live objects of ``kind`` (one of :attr:`LIVE_KINDS`)."""
        n = int(self._fn("live")(kind.encode()))
        if n < 0:
            kinds = f"; kinds: {', '.join(self.LIVE_KINDS)}" if self.LIVE_KINDS else ""
            raise ValueError(f"unknown kind {kind!r}{kinds}")
        return n

    def lives(self) -> dict[str, int]:
        """Every live count, by kind."""
        return {kind: self.live(kind) for kind in self.LIVE_KINDS}

    def last_args(self, function: str) -> tuple[int, ...] | None:
        """Integer/pointer arguments of the last call of ``function`` in C parameter order
        (pointers as addresses, flags zero-extended), or None if it was never called."""
        name = function.encode()
        n = int(self._fn("last_call_nargs")(name))
        if n == -1:
            raise self._no_function(function)
        if n < 0:
            return None
        out = ctypes.c_longlong()
        values: list[int] = []
        for i in range(n):
            if self._fn("last_call_arg")(name, i, ctypes.byref(out)) != 0:
                raise RuntimeError(f"could not read argument {i} of {function}")
            values.append(int(out.value))
        return tuple(values)
