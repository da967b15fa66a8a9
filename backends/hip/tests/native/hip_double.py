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
import tempfile
from pathlib import Path

from tests.support import doubles
from tests.support.doubles import CFLAGS, CudaToolkit, Mode

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "double.c"
DEFAULT_VERSION = 60200000


def hip_version(major: int, minor: int, patch: int = 0) -> int:
    """HIP_VERSION encoding: major * 10000000 + minor * 100000 + patch."""
    return major * 10_000_000 + minor * 100_000 + patch


def find_cuda() -> CudaToolkit:
    """Locate cuda_runtime_api.h, cuda.h, libcudart and libcuda, or raise DoubleBuildError."""
    return doubles.find_cuda("HIPDOUBLE", runtime=True)


def _command(cc: str, mode: Mode, version: int | None, major: int, out: Path) -> tuple[list[str], str]:
    cmd = [cc, *CFLAGS, *doubles.extra_cflags("HIPDOUBLE")]
    cmd.append(f"-Wl,-soname,libamdhip64.so.{major}")
    extra = ""
    if version is not None:
        cmd.append(f"-DHIPDOUBLE_BUILD_VERSION={version}")
    if mode == "forward":
        tk = find_cuda()
        cmd.append("-DHIPDOUBLE_FORWARD_CUDA")
        cmd.append(f"-I{tk.include_dir}")
    cmd += ["-o", str(out), str(SOURCE)]
    if mode == "forward":
        cmd += tk.link_flags(rpath=True)
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
    doubles.check_mode(mode)
    if version is not None and version <= 0:
        raise ValueError(f"version must be a positive HIP_VERSION, not {version}")
    cc = doubles.compiler("the HIP double (backends/hip/tests/native/double.c)")
    major = (version if version is not None else DEFAULT_VERSION) // 10_000_000
    return doubles.build_cached(
        lambda out: _command(cc, mode, version, major, out)[0],
        what="the HIP double",
        name=f"libamdhip64.so.{major}",
        inputs=[SOURCE],
        cache=Path(tempfile.gettempdir()) / "aml-hipdouble",
        label=mode,
        outdir=outdir,
        key=_command(cc, mode, version, major, Path("OUT"))[1],
    )


class DoubleControl(doubles.DoubleControl):
    """ctypes wrapper of the double's ``hipdouble_*`` control functions."""

    PREFIX = "hipdouble"
    FAMILY = "hip"

    def __init__(self, path: Path | str) -> None:
        super().__init__(path)
        lib = self._lib
        lib.hipdouble_set_version.argtypes = [ctypes.c_int]
        lib.hipdouble_set_version.restype = None
        lib.hipdouble_get_version.argtypes = []
        lib.hipdouble_get_version.restype = ctypes.c_int
        lib.hipdouble_set_devices.argtypes = [ctypes.c_int, ctypes.c_size_t]
        lib.hipdouble_set_devices.restype = None
        lib.hipdouble_set_attribute.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.hipdouble_set_attribute.restype = ctypes.c_int
        lib.hipdouble_set_peer.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.hipdouble_set_peer.restype = ctypes.c_int

    @property
    def version(self) -> int:
        """The emulated HIP_VERSION."""
        return int(self._lib.hipdouble_get_version())

    def set_version(self, version: int) -> None:
        """Emulate another HIP_VERSION (e.g. ``hip_version(5, 2, 21153)``)."""
        self._lib.hipdouble_set_version(version)

    def set_devices(self, count: int, memory_per_device: int = 1 << 30) -> None:
        """Host mode: emulate ``count`` devices with ``memory_per_device`` bytes each."""
        self._lib.hipdouble_set_devices(count, memory_per_device)

    def set_peer(self, device: int, peer: int, can_access: bool) -> None:
        """Host mode: whether ``device`` has a peer path to ``peer`` (every pair of distinct
        devices has one until this says otherwise; reset restores that)."""
        if self._lib.hipdouble_set_peer(device, peer, int(bool(can_access))) != 0:
            raise ValueError(f"devices must be in 0..31, not {device} and {peer}")

    def set_attribute(self, attr: int, value: int) -> None:
        """Make hipDeviceGetAttribute(attr) answer ``value`` on every device."""
        if self._lib.hipdouble_set_attribute(attr, value) != 0:
            raise RuntimeError("the double's attribute-override table is full")
