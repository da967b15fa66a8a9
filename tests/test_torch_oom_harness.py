"""Issue 33 item 1 on the CPU: aml's PyTorch entry point throws its C++ out_of_memory
through frames of another shared object into PyTorch's own catch code, and the process
lives on.

``tests/support/torch_catch.cpp`` is built here with g++ against the installed PyTorch's
headers and ``libtorch_python`` (PyTorch's CPU wheel has them): it calls the compiled
entry point's address through a ``std::function`` as ``CUDAPluggableAllocator`` does and
wraps the call in PyTorch's ``HANDLE_TH_ERRORS`` / ``END_HANDLE_TH_ERRORS``, the wrapper
of ``torch.empty``. Memory underneath is a host area that calls itself device memory
(``FakeDeviceArea``), and the hook is installed through the fake ``torch`` (the CPU wheel
has no ``_cuda_customAllocator``); everything from the entry point's address on is the
real code. Each case runs in a child interpreter: a C++ exception nobody catches is an
abort, and PyTorch frees tensors after the interpreter is torn down (the harness too).
What this cannot show is CUDA's own frames: the GPU test
(backends/cuda/tests/test_cuda_torch_hook.py) runs ``torch.empty`` for real.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SOURCE = Path(__file__).parent / "support" / "torch_catch.cpp"


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built harness's folder (the module ``torch_catch``)."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("needs g++ to build the PyTorch catch harness")
    from torch.utils import cpp_extension

    include = cpp_extension.include_paths()
    if not (Path(include[0]) / "torch" / "csrc" / "Exceptions.h").is_file():
        pytest.skip("this PyTorch has no C++ headers (torch/include)")
    lib = Path(torch.__file__).parent / "lib"
    out = tmp_path_factory.mktemp("torch_catch")
    target = out / ("torch_catch" + sysconfig.get_config_var("EXT_SUFFIX"))
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = [
        gxx, "-shared", "-fPIC", "-O1", "-std=c++20", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        *(f"-I{d}" for d in include), f"-I{sysconfig.get_paths()['include']}", str(SOURCE),
        f"-L{lib}", "-ltorch_python", "-lc10", f"-Wl,-rpath,{lib}", "-o", str(target),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


_PRELUDE = """
import sys, threading
sys.path.insert(0, {harness!r})
import torch            # the real one: the harness links libtorch_python
import torch_catch
import aml_core
from aml_core import _hooks
from aml_core.errors import AMLMemoryError, AMLValueError
from aml_core.gpu import hooks
from aml_core.testing.hook_fakes import FakeDeviceArea, faked

area = FakeDeviceArea()
pool = aml_core.pool(area, limit=1 << 20)
with faked("torch"):    # installs aml's states; the entry points are the real ones
    hook = hooks.use_with_torch(pool, backend="cuda")
MALLOC, FREE = _hooks.torch_entry_points()
"""


def _child(harness: Path, body: str) -> subprocess.CompletedProcess[str]:
    code = _PRELUDE.format(harness=str(harness)) + body
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False, env=env
    )


def test_the_harness_catches_as_pytorch_does(harness: Path) -> None:
    """The control: PyTorch's own c10::OutOfMemoryError through the harness's catch is
    torch.OutOfMemoryError (so the catch is PyTorch's)."""
    proc = _child(
        harness,
        """
try:
    torch_catch.throw_c10_oom()
except torch.OutOfMemoryError as exc:
    print("torch.OutOfMemoryError", exc)
""",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("torch.OutOfMemoryError CUDA out of memory."), proc.stdout


@pytest.mark.parametrize("release_gil", [False, True], ids=["with-gil", "without-gil"])
def test_a_refusal_raises_and_the_process_lives_on(harness: Path, release_gil: bool) -> None:
    """Past the pool's limit: RuntimeError with aml's message out of PyTorch's catch
    (never a NULL pointer), aml's error kept in hook.errors, the next allocation served,
    nothing left allocated; then a block freed by a C++ static destructor after the
    interpreter is gone (as PyTorch frees tensors alive at exit), and a clean exit."""
    proc = _child(
        harness,
        f"""
for attempt in range(3):
    try:
        ptr = torch_catch.call_malloc(MALLOC, 2 << 20, 0, {release_gil})
    except RuntimeError as exc:
        assert not isinstance(exc, torch.OutOfMemoryError)
        assert str(exc).startswith("CUDA out of memory. aml could not allocate 2097152 bytes"), str(exc)
        assert "AMLMemoryError" in str(exc), str(exc)
    else:
        raise AssertionError(f"no error: {{ptr:#x}}")
assert isinstance(hook.errors[-1], AMLMemoryError) and len(hook.errors) == 3, hook.errors
assert (hook.live, pool.pool_stats.bytes_in_use) == (0, 0)
ptr = torch_catch.call_malloc(MALLOC, 4096, 0, {release_gil})   # the next one is served
assert ptr and hook.live == 1
torch_catch.call_free(FREE, ptr, 0)
assert (hook.live, pool.pool_stats.bytes_in_use) == (0, 0)
kept = torch_catch.call_malloc(MALLOC, 8192, 0, {release_gil})
torch_catch.keep_until_exit(FREE, kept, 0)                    # freed after the interpreter
print("ok", flush=True)
""",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.rstrip().endswith("ok"), proc.stdout


def test_refusals_in_threads_keep_their_own_messages(harness: Path) -> None:
    """Eight threads refused at once without the GIL: each RuntimeError names its own
    size (the message is per thread), and the pool still serves everyone after."""
    proc = _child(
        harness,
        """
seen, problems = [], []
def work(k):
    size = (2 << 20) + 4096 * k
    for _ in range(50):
        try:
            torch_catch.call_malloc(MALLOC, size, 0, True)
            problems.append("no error")
        except RuntimeError as exc:
            if f"allocate {size} bytes" not in str(exc):
                problems.append(str(exc))
        p = torch_catch.call_malloc(MALLOC, 1024, 0, True)
        torch_catch.call_free(FREE, p, 0)
    seen.append(k)
threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
for t in threads: t.start()
for t in threads: t.join()
assert sorted(seen) == list(range(8)) and not problems, problems[:3]
assert len(hook.errors) == 400 and (hook.live, pool.pool_stats.bytes_in_use) == (0, 0)
print("ok", flush=True)
""",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.rstrip().endswith("ok"), proc.stdout


def test_foreign_and_double_frees_are_refused_before_aml(harness: Path) -> None:
    """PyTorch's raw_delete refuses a pointer its malloc did not return (its metadata),
    so a double free never reaches aml through PyTorch; aml's entry point, called with
    one anyway, keeps an AMLValueError and frees nothing."""
    proc = _child(
        harness,
        """
p = torch_catch.call_malloc(MALLOC, 4096, 0, False)
torch_catch.call_free(FREE, p, 0)
try:
    torch_catch.call_free(FREE, p, 0)
except RuntimeError as exc:
    assert "not allocated here" in str(exc), str(exc)
else:
    raise AssertionError("PyTorch's metadata let a double free through")
_hooks.call_torch_free(p, 4096, 0)          # past PyTorch: aml's own refusal
_hooks.call_torch_free(0x1000, 16, 0)       # never handed out
assert [type(e).__name__ for e in hook.errors] == ["AMLValueError", "AMLValueError"], hook.errors
assert (hook.live, pool.pool_stats.bytes_in_use) == (0, 0)
print("ok", flush=True)
""",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.rstrip().endswith("ok"), proc.stdout
