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
import tempfile
from pathlib import Path

from tests.support import doubles
from tests.support.doubles import CFLAGS, CudaToolkit, Mode

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "double.c"
CACHE = Path(tempfile.gettempdir()) / "aml-hsadouble"
#: What hsadouble_live counts.
LIVE_KINDS = ("init", "reservation", "handle", "mapping", "pool_alloc", "ipc_attach")
_VARIANTS = {(1, 6): [], (1, 4): ["-DHSADOUBLE_NO_ALIGN"], (1, 0): ["-DHSADOUBLE_NO_VMEM"]}


def find_cuda(need_library: bool = True) -> CudaToolkit:
    """cuda.h and the libcuda to link (``HSADOUBLE_CUDA_INCLUDE`` and ``HSADOUBLE_LIBCUDA``
    name them first), or DoubleBuildError; without ``need_library`` libcuda may be None."""
    return doubles.find_cuda("HSADOUBLE", need_library=need_library)


def build_fake_cuda(outdir: Path | None = None) -> Path:
    """Compile ``fake_cuda.c`` (a host-memory stand-in for ``libcuda.so.1``, against the
    ``cuda.h`` :func:`find_cuda` finds) and return its path: link a forward double to it
    (``HSADOUBLE_LIBCUDA``) to check forward mode without a GPU."""
    cc = doubles.compiler("the fake libcuda")
    inc = find_cuda(need_library=False).include_dir
    source = HERE / "fake_cuda.c"
    return doubles.build_cached(
        lambda out: [cc, *CFLAGS, f"-I{inc}", "-Wl,-soname,libcuda.so.1", "-o", str(out), str(source)],
        what="the fake libcuda",
        name="libcuda.so.1",
        inputs=[source],
        cache=CACHE,
        label="fakecuda",
        outdir=outdir,
    )


def _command(cc: str, mode: Mode, interface: tuple[int, int], out: Path) -> list[str]:
    cmd = [cc, *CFLAGS, *doubles.extra_cflags("HSADOUBLE"), *_VARIANTS[interface]]
    cmd.append("-Wl,-soname,libhsa-runtime64.so.1")
    if mode == "forward":
        tk = find_cuda()
        cmd += ["-DHSADOUBLE_FORWARD_CUDA", f"-I{tk.include_dir}", "-o", str(out), str(SOURCE)]
        cmd += tk.link_flags(rpath=True)
    else:
        cmd += ["-o", str(out), str(SOURCE)]
    return cmd


def build_double(
    mode: Mode = "host", interface: tuple[int, int] = (1, 6), outdir: Path | None = None
) -> Path:
    """Compile the double (cached) and return the path of its ``libhsa-runtime64.so.1``."""
    doubles.check_mode(mode)
    if interface not in _VARIANTS:
        raise ValueError(f"interface must be one of {sorted(_VARIANTS)}, not {interface!r}")
    cc = doubles.compiler("the HSA double")
    return doubles.build_cached(
        lambda out: _command(cc, mode, interface, out),
        what="the HSA double",
        name="libhsa-runtime64.so.1",
        inputs=[SOURCE],
        cache=CACHE,
        label=f"{mode}-{interface[0]}.{interface[1]}",
        outdir=outdir,
    )


class DoubleControl(doubles.DoubleControl):
    """ctypes wrapper of the double's ``hsadouble_*`` control functions."""

    PREFIX = "hsadouble"
    LIVE_KINDS = LIVE_KINDS

    def __init__(self, path: Path | str) -> None:
        super().__init__(path)
        self._declare("set_gpus", ctypes.c_int, ctypes.c_int, ctypes.c_size_t)
        self._declare("interface", ctypes.c_int)
        self._declare("pointer_info_size", None, ctypes.c_uint32)

    @property
    def interface(self) -> tuple[int, int]:
        value = int(self._lib.hsadouble_interface())
        return (value // 100, value % 100)

    def set_gpus(self, count: int, memory: int = 0) -> None:
        """Host mode: emulate ``count`` GPU agents (``memory`` bytes each; 0 keeps it)."""
        if self._lib.hsadouble_set_gpus(count, memory) != 0:
            raise ValueError(f"count must be 0..8, not {count}")

    def pointer_info_size(self, size: int) -> None:
        """Answer ``hsa_amd_pointer_info`` as a runtime whose struct is ``size`` bytes (it
        fills nothing past them; 0: the whole struct, until :meth:`reset`)."""
        self._lib.hsadouble_pointer_info_size(size)
