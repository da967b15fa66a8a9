"""Hostile input to the host area and the shared checks: every case gives an AML error
with the documented code, never a bare Python error and never a crash.

Each case runs in its own subprocess, so that a crash (SIGSEGV, abort) is a failed case
with its signal, not a dead test run. The table (input -> AML error, code):

=====================================================  ===============================
input                                                  error (code)
=====================================================  ===============================
``mmap(x)``, ``x.__index__`` raises                    AMLTypeError (EINVAL)
``mmap(x)``, ``x.__index__`` returns a str             AMLTypeError (EINVAL)
``munmap(buf, size=2**64)``                            AMLValueError (EINVAL): a size
                                                       mismatch, not EDOM
``munmap(Buffer())`` (never mapped)                    AMLValueError (EINVAL)
host option ``shared='yes'`` / ``shared=[]``           AMLTypeError (EINVAL)
host option ``fd=-1`` / ``fd=-5``                      AMLValueError (EINVAL)
host option ``fd=2**31`` / ``fd=2**70``                AMLValueError (EINVAL)
``/dev/zero`` with ``offset=2**63`` / ``2**64``        AMLValueError (EINVAL)
NUMA nodes ``5.0`` / ``object()`` / ``[None]``         AMLTypeError (EINVAL)
NUMA node ``numpy.int64(0)``                           accepted (node 0)
``area("host", device=n)``, n past the allowed nodes    AMLDomainError (EDOM)
``area("host", bogus_option=1)``                       AMLTypeError (EINVAL)
``HostArea.policy_of(int)`` / ``page_nodes(int)``      AMLTypeError (EINVAL)
a ``__cuda_stream__`` returning garbage                AMLTypeError / AMLValueError
``MAP_LOCKED`` past RLIMIT_MEMLOCK (EAGAIN)            AMLMemoryError (ENOMEM)
=====================================================  ===============================
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PRELUDE = """
import json, os, sys
import aml_core
from aml_core.errors import AMLError
from aml_core.buffer import Buffer
from aml_core.host.area import HostArea
class BadIndex:
    def __index__(self):
        raise RuntimeError("boom")
class StrIndex:
    def __index__(self):
        return "x"
def report(fn):
    try:
        result = fn()
    except AMLError as exc:
        print(json.dumps({"error": type(exc).__name__, "code": exc.code.name}))
    except BaseException as exc:
        print(json.dumps({"error": type(exc).__name__, "code": None, "bare": True, "message": str(exc)}))
    else:
        print(json.dumps({"error": None, "result": repr(result)}))
area = HostArea()
"""


def run_case(body: str) -> dict[str, object]:
    """Run ``report(lambda: ...)`` in a fresh interpreter; a crash fails with its signal."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"the case crashed (rc {proc.returncode}):\n{proc.stderr[-2000:]}"
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


CASES: dict[str, tuple[str, str | None, str | None]] = {
    # name: (body, AML error class name or None for success, code)
    "index-raises": ("report(lambda: area.mmap(BadIndex()))", "AMLTypeError", "EINVAL"),
    "index-returns-str": ("report(lambda: area.mmap(StrIndex()))", "AMLTypeError", "EINVAL"),
    "munmap-size-2**64": (
        "b = area.mmap(4096)\nreport(lambda: area.munmap(b, size=2**64))",
        "AMLValueError",
        "EINVAL",
    ),
    "munmap-never-mapped": ("report(lambda: area.munmap(Buffer()))", "AMLValueError", "EINVAL"),
    "shared-str": ("report(lambda: area.mmap(4096, {'shared': 'yes'}))", "AMLTypeError", "EINVAL"),
    "shared-list": ("report(lambda: area.mmap(4096, {'shared': []}))", "AMLTypeError", "EINVAL"),
    "fd-minus-1": ("report(lambda: area.mmap(4096, {'fd': -1}))", "AMLValueError", "EINVAL"),
    "fd-minus-5": ("report(lambda: area.mmap(4096, {'fd': -5}))", "AMLValueError", "EINVAL"),
    "fd-2**31": ("report(lambda: area.mmap(4096, {'fd': 2**31}))", "AMLValueError", "EINVAL"),
    "fd-2**70": ("report(lambda: area.mmap(4096, {'fd': 2**70}))", "AMLValueError", "EINVAL"),
    "dev-zero-offset-2**63": (
        "fd = os.open('/dev/zero', os.O_RDWR)\nreport(lambda: area.mmap(4096, {'fd': fd, 'offset': 2**63}))",
        "AMLValueError",
        "EINVAL",
    ),
    "dev-zero-offset-2**64": (
        "fd = os.open('/dev/zero', os.O_RDWR)\nreport(lambda: area.mmap(4096, {'fd': fd, 'offset': 2**64}))",
        "AMLValueError",
        "EINVAL",
    ),
    "nodes-float": ("report(lambda: HostArea('bind', 5.0))", "AMLTypeError", "EINVAL"),
    "nodes-object": ("report(lambda: HostArea('bind', object()))", "AMLTypeError", "EINVAL"),
    "nodes-none-item": ("report(lambda: HostArea('bind', [None]))", "AMLTypeError", "EINVAL"),
    "nodes-numpy-int": ("import numpy\nreport(lambda: HostArea('bind', numpy.int64(0)).nodes)", None, None),
    "nodes-numpy-list": (
        "import numpy\nreport(lambda: HostArea('bind', [numpy.int32(0)]).nodes)",
        None,
        None,
    ),
    "area-host-device-outside": (
        "from aml_core.host.numa import allowed_nodes\n"
        "report(lambda: aml_core.area('host', device=max(allowed_nodes()) + 1))",
        "AMLDomainError",
        "EDOM",
    ),
    "area-bogus-option": ("report(lambda: aml_core.area('host', bogus_option=1))", "AMLTypeError", "EINVAL"),
    "policy-of-type": ("report(lambda: area.policy_of(int))", "AMLTypeError", "EINVAL"),
    "page-nodes-type": ("report(lambda: area.page_nodes(int))", "AMLTypeError", "EINVAL"),
    "cuda-stream-garbage": (
        "from aml_core.gpu.stream import as_stream_handle\n"
        "class S:\n    def __cuda_stream__(self):\n        return 'garbage'\n"
        "report(lambda: as_stream_handle(S()))",
        "AMLTypeError",
        "EINVAL",
    ),
    "cuda-stream-negative": (
        "from aml_core.gpu.stream import as_stream_handle\n"
        "class S:\n    def __cuda_stream__(self):\n        return (0, -3)\n"
        "report(lambda: as_stream_handle(S()))",
        "AMLValueError",
        "EINVAL",
    ),
    "cuda-stream-raises": (
        "from aml_core.gpu.stream import as_stream_handle\n"
        "class S:\n    def __cuda_stream__(self):\n        raise KeyError('x')\n"
        "report(lambda: as_stream_handle(S()))",
        "AMLTypeError",
        "EINVAL",
    ),
    "map-locked-over-memlock": (
        "import resource, mmap\n"
        "resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]))\n"
        "locked = getattr(mmap, 'MAP_LOCKED', 0x2000)\n"
        "report(lambda: area.mmap(1 << 20, {'flags': locked}))",
        "AMLMemoryError",
        "ENOMEM",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_input(name: str) -> None:
    body, error, code = CASES[name]
    if name == "map-locked-over-memlock" and os.geteuid() == 0:
        pytest.skip("root is not bound by RLIMIT_MEMLOCK (CAP_IPC_LOCK)")
    out = run_case(body)
    assert not out.get("bare"), f"{name}: a bare {out['error']} ({out.get('message')}), not an AML error"
    assert out["error"] == error, out
    assert out.get("code") == code, out


def test_numpy_node_is_node_zero() -> None:
    out = run_case("import numpy\nreport(lambda: HostArea('bind', numpy.int64(0)).nodes)")
    assert out == {"error": None, "result": "(0,)"}


def test_eagain_is_enomem() -> None:
    """mmap's EAGAIN (MAP_LOCKED past RLIMIT_MEMLOCK) is AML's ENOMEM (checked here even
    as root, whom the limit does not bind)."""
    import errno

    from aml_core.errors import ErrorCode
    from aml_core.host.numa import OS_ERRORS

    assert OS_ERRORS.translate(errno.EAGAIN) is ErrorCode.ENOMEM


def test_page_nodes_of_a_real_128_gib_buffer() -> None:
    """The issue's case on a real 128 GiB mapping (MAP_NORESERVE, so that it needs no
    memory or swap behind it): move_pages refuses 2**25 pages at once (E2BIG); aml queries
    in chunks, and a summary counts as it goes (no Python int per page). Two touched
    pages, one in each half, are found on a node; the rest are NOT_TOUCHED."""
    body = textwrap.dedent(
        """
        import resource
        from aml_core.host import NOT_TOUCHED, online_nodes
        MAP_NORESERVE = 0x4000  # <sys/mman.h>; Python's mmap module does not export it
        area = HostArea()
        buf = area.mmap(128 << 30, {"flags": MAP_NORESERVE})
        with memoryview(buf) as view:
            view[0] = 1
            view[64 << 30] = 1
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        summary = area.page_nodes(buf, summary=True)
        area.munmap(buf)
        touched = {n: c for n, c in summary.items() if n != NOT_TOUCHED}
        rss_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024
        print(json.dumps({"untouched": summary.get(NOT_TOUCHED), "touched": touched,
                          "nodes_ok": all(int(n) in online_nodes() for n in touched), "rss_mib": rss_mib}))
        """
    )
    out = run_case(body)
    assert out["untouched"] == (128 << 30) // os.sysconf("SC_PAGE_SIZE") - 2, out
    assert sum(out["touched"].values()) == 2, out  # type: ignore[union-attr]
    assert out["nodes_ok"], out
    # the per-chunk summary keeps memory bounded: a list of 2**25 Python ints would add
    # 256 MiB to the peak (measured as the growth of the peak, so that ASan's shadow counts not)
    assert out["rss_mib"] < 128, out
