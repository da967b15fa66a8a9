"""The double's forward mode without a GPU: built against ``cuda.h`` and linked to
``native/fake_cuda.c`` (host memory behind the CUDA driver calls the forward double makes),
the vmem sequence and the vmem and error-table suites must pass. This checks the forward
code paths (arguments, bookkeeping, status mapping), not CUDA: the real run is
``run_forward.sh`` on a GPU. Skips where no ``cuda.h`` is found (CUDA_HOME,
HSADOUBLE_CUDA_INCLUDE), as in CI, and in forward runs (the real driver is there)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hsa_helpers import HERE, build, child_env

from tests.support.doubles import DoubleBuildError

pytestmark = pytest.mark.host_double


@pytest.fixture(scope="module")
def fake_env() -> dict[str, str]:
    try:
        fake = build.build_fake_cuda()
    except DoubleBuildError as exc:
        pytest.skip(f"no cuda.h for the forward double: {exc}")
    env = child_env(HSADOUBLE_LIBCUDA=str(fake), AML_HSA_TEST_DOUBLE="forward")
    env.pop("AML_HSA_LIBRARY", None)
    return env


def test_sequence_on_fake_cuda(fake_env: dict[str, str]) -> None:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import hsa_helpers as h; "
        "print(h.build.build_double('forward'))"
    )
    built = subprocess.run(
        [sys.executable, "-c", code, str(HERE)], env=fake_env, capture_output=True, text=True, check=False
    )
    assert built.returncode == 0, built.stderr
    env = dict(fake_env, AML_HSA_LIBRARY=built.stdout.strip())
    proc = subprocess.run(
        [sys.executable, str(HERE / "hsa_sequence.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "granule=2097152" in proc.stdout
    assert proc.stdout.splitlines()[-1].split() == ["SEQUENCE", "OK"]


def test_suites_on_fake_cuda(fake_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "test_hsa_vmem.py",
            "test_hsa_errors.py",
            "test_hsa_dmabuf.py",
        ],
        env=fake_env,
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout.splitlines()[-1]
