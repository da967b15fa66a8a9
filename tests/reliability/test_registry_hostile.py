"""Hostile plugins and a hostile environment, one table: each row runs in its own
subprocess with a timeout, so a crash or a hang is a failed row, not a dead test run.

Every row checks the documented report (docs/user-guide.md, "Backends and the
registry") and that neither ``aml info`` nor ``aml_core.area()`` for another backend is
taken down. The hostile plugin is a real entry point (a temporary ``.dist-info`` on
PYTHONPATH), so ``aml info`` probes it in its own process as it would an installed one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

import aml_core

REPO = Path(aml_core.__file__).resolve().parent.parent
HIP_BACKEND = REPO / "backends" / "hip"
ROW_TIMEOUT = 100.0

PLUGIN = """
import ctypes, os, signal, time
from aml_core import BackendDescriptor, Capability, DeviceInfo, Kind, ProbeResult, hookimpl
from aml_core.host import HostArea

def probe():
{probe}

def create(kind, device=None, **options):
{create}

@hookimpl
def aml_backends():
{hook}
"""
OK_PROBE = "return ProbeResult(available=True, detail='fine', devices=(DeviceInfo(index=0, name='h0'),))"
OK_CREATE = "return HostArea(**options)"
HOOK = (
    "return [BackendDescriptor(name={name!r}, priority={priority}, kinds={kinds},"
    " probe=probe, create_area=create)]"
)


@attrs.frozen
class Plugin:
    probe: str = OK_PROBE
    create: str = OK_CREATE
    hook: str = ""
    priority: int = 50
    kinds: str = "{Kind.HOST}"
    name: str = "hostile"
    #: The whole module instead of the template.
    raw: str = ""

    def source(self) -> str:
        if self.raw:
            return self.raw
        hook = self.hook or HOOK.format(name=self.name, priority=self.priority, kinds=self.kinds)
        return PLUGIN.format(
            probe=textwrap.indent(self.probe, "    "),
            create=textwrap.indent(self.create, "    "),
            hook=textwrap.indent(hook, "    "),
        )


#: What a row runs: "info" (aml info --json), "text" (aml info) or Python code.
INFO, TEXT = "info", "text"
AREA_HOST_FORCED = (
    "import aml_core\n"
    "with aml_core.area(kind='host', backend='host') as a:\n"
    "    assert a.backend == 'host'\n"
    "maps = open('/proc/self/maps').read()\n"
    "print('ok', 'libamdhip64' in maps or 'abort_ctor' in maps)\n"
)
BACKENDS = "import aml_core\nfor s in aml_core.backends():\n    print(s.name, s.state, s.reason)\n"
AREA_HOST = "import aml_core\nwith aml_core.area(kind='host') as a:\n    print('ok', a.backend)\n"
AREA_FAILS = (
    "import aml_core\n"
    "try:\n"
    "    aml_core.area(kind='host')\n"
    "except aml_core.AMLNotSupported as exc:\n"
    "    print('refused:', exc)\n"
)


@attrs.frozen
class Row:
    id: str
    plugin: Plugin | None
    run: str
    env: dict[str, str] = attrs.field(factory=dict)
    #: For aml info --json: the state and a piece of the reason of a backend.
    backend: tuple[str, str, str] | None = None
    #: Pieces the output (stdout) must contain.
    says: tuple[str, ...] = ()
    returncode: int = 0
    #: A bound that only a wait for a hanging probe (HANG: 120 s) passes; far above what a
    #: busy machine or an ASan build takes (up to 28 s was seen with ASan at load 10).
    max_seconds: float = 60.0
    hip: bool = False


HANG = "time.sleep(120)\nreturn ProbeResult(available=True)"
SEGV = "ctypes.string_at(0)\nreturn ProbeResult(available=True)"
KILL = "os.kill(os.getpid(), signal.SIGSEGV)\nreturn ProbeResult(available=True)"

ROWS = [
    # -- plugins that return junk
    Row(
        "hook returns junk",
        Plugin(hook="return ['junk']"),
        INFO,
        backend=("hostile", "broken", "aml_backends() failed: TypeError: aml_backends() returned a str"),
    ),
    Row(
        "hook raises",
        Plugin(hook="raise RuntimeError('hook exploded')"),
        INFO,
        backend=("hostile", "broken", "aml_backends() failed: RuntimeError: hook exploded"),
    ),
    Row(
        "module without the hook",
        Plugin(raw="def aml_backends():\n    return []\n"),
        INFO,
        backend=("hostile", "broken", "defines no aml_backends hook (decorate it with @aml_core.hookimpl)"),
    ),
    Row(
        "probe returns junk",
        Plugin(probe="return {'available': True}"),
        INFO,
        backend=("hostile", "broken", "probe returned an invalid result: dict, not a ProbeResult"),
    ),
    Row(
        "probe capabilities as str",
        Plugin(probe="r = ProbeResult(available=True)\nobject.__setattr__(r, 'capabilities', 'x')\nreturn r"),
        INFO,
        backend=("hostile", "broken", "ProbeResult.capabilities must be Capability, not str"),
    ),
    Row(
        "probe devices not DeviceInfo",
        Plugin(probe="return ProbeResult(available=True, devices=['x'])"),
        INFO,
        backend=("hostile", "broken", "ProbeResult.devices[0] must be a DeviceInfo, not str"),
    ),
    # -- factories
    Row(
        "factory raises, the next backend serves",
        Plugin(create="raise RuntimeError('factory bug')"),
        AREA_HOST,
        says=("ok host",),
    ),
    Row(
        "factory returns None, the next backend serves",
        Plugin(create="return None"),
        AREA_HOST,
        says=("ok host",),
    ),
    Row(
        "factory raises, forced",
        Plugin(create="raise RuntimeError('factory bug')"),
        AREA_FAILS,
        env={"AML_BACKEND": "hostile"},
        says=("refused:", "create_area of plugin hostile-plugin:hostile failed: RuntimeError: factory bug"),
    ),
    Row(
        "factory returns None, forced",
        Plugin(create="return None"),
        AREA_FAILS,
        env={"AML_BACKEND": "hostile"},
        says=("create_area of plugin hostile-plugin:hostile returned NoneType, not an Area",),
    ),
    # -- duplicate names: the higher priority wins, the other is shown shadowed
    Row(
        "duplicate name, higher priority",
        Plugin(name="host", priority=50),
        INFO,
        backend=("host", "shadowed", "shadowed by hostile-plugin:hostile (priority 50)"),
    ),
    Row(
        "duplicate name, lower priority",
        Plugin(name="host", priority=-5),
        TEXT,
        says=("shadowed", "-5", "host     -> host"),
    ),
    # -- probes that raise, hang or crash
    Row(
        "probe raises",
        Plugin(probe="raise OSError('driver said no')"),
        INFO,
        backend=("hostile", "broken", "probe failed: OSError: driver said no"),
    ),
    Row(
        "probe hangs",
        Plugin(probe=HANG),
        INFO,
        env={"AML_PROBE_TIMEOUT": "1"},
        backend=("hostile", "broken", "probe timed out after 1 s"),
    ),
    Row(
        "probe hangs past AML_INFO_TIMEOUT",
        Plugin(probe=HANG),
        INFO,
        env={"AML_PROBE_TIMEOUT": "100", "AML_INFO_TIMEOUT": "10"},
        backend=(
            "hostile",
            "unavailable",
            "probe stopped: aml info's time limit of 10 s (AML_INFO_TIMEOUT) ran out",
        ),
    ),
    Row(
        "probe hangs, host forced",
        Plugin(probe=HANG),
        AREA_HOST_FORCED,
        env={"AML_PROBE_TIMEOUT": "100"},
        says=("ok False",),
    ),
    Row(
        "probe hangs, another kind",
        Plugin(probe=HANG, kinds="{Kind.DEVICE}"),
        AREA_HOST,
        env={"AML_PROBE_TIMEOUT": "100"},
        says=("ok host",),
    ),
    Row(
        "probe segfaults",
        Plugin(probe=SEGV),
        INFO,
        backend=("hostile", "broken", "probe crashed (signal 11: SIGSEGV)"),
    ),
    Row("probe kills itself", Plugin(probe=KILL), TEXT, says=("probe crashed (signal 11: SIGSEGV)",)),
    Row("probe segfaults, host forced", Plugin(probe=SEGV), AREA_HOST_FORCED, says=("ok False",)),
    Row(
        "probe segfaults, another kind",
        Plugin(probe=SEGV, kinds="{Kind.DEVICE}"),
        AREA_HOST,
        says=("ok host",),
    ),
    Row(
        "probe segfaults, env forces host",
        Plugin(probe=SEGV),
        AREA_HOST,
        env={"AML_BACKEND": "host"},
        says=("ok host",),
    ),
    # -- the environment
    Row(
        "AML_BACKEND unknown",
        None,
        TEXT,
        env={"AML_BACKEND": "bogus"},
        says=("warning: AML_BACKEND='bogus' names no installed backend",),
    ),
    Row(
        "AML_BACKEND unknown, area",
        None,
        AREA_FAILS,
        env={"AML_BACKEND": "bogus"},
        says=("refused: unknown backend 'bogus'",),
    ),
    Row(
        "AML_DISABLE_BACKENDS commas", None, TEXT, env={"AML_DISABLE_BACKENDS": ",,"}, says=("host     -> ",)
    ),
    Row(
        "AML_DISABLE_BACKENDS unknown",
        None,
        TEXT,
        env={"AML_DISABLE_BACKENDS": ",nope,,"},
        says=("warning: AML_DISABLE_BACKENDS names unknown backends: nope",),
    ),
    *[
        Row(
            f"AML_PROBE_TIMEOUT={raw}",
            None,
            TEXT,
            env={"AML_PROBE_TIMEOUT": raw},
            says=(f"warning: AML_PROBE_TIMEOUT={raw!r}",),
        )
        for raw in ("abc", "inf", "1e308", "-1", "nan")
    ],
    Row(
        "AML_INFO_TIMEOUT=abc",
        None,
        TEXT,
        env={"AML_INFO_TIMEOUT": "abc"},
        says=("warning: AML_INFO_TIMEOUT='abc' is not a positive, finite number",),
    ),
    Row(
        "AML_PROBE_TIMEOUT=abc, area",
        None,
        AREA_HOST_FORCED,
        env={"AML_PROBE_TIMEOUT": "abc"},
        says=("ok False",),
    ),
    # -- AML_HIP_LIBRARY (aml-hip from this checkout, as an entry point)
    Row(
        "AML_HIP_LIBRARY not a library",
        None,
        TEXT,
        env={"AML_HIP_LIBRARY": "/etc/passwd"},
        hip=True,
        says=("hip", "cannot load /etc/passwd"),
    ),
    Row(
        "AML_HIP_LIBRARY not a library, area",
        None,
        AREA_HOST,
        env={"AML_HIP_LIBRARY": "/etc/passwd"},
        hip=True,
        says=("ok host",),
    ),
    Row(
        "AML_HIP_LIBRARY aborts",
        None,
        INFO,
        env={"AML_HIP_LIBRARY": "@ABORT@"},
        hip=True,
        backend=("hip", "broken", "probe crashed (signal 6: SIGABRT)"),
    ),
    Row(
        "AML_HIP_LIBRARY aborts, host forced",
        None,
        AREA_HOST_FORCED,
        env={"AML_HIP_LIBRARY": "@ABORT@"},
        hip=True,
        says=("ok False",),
    ),
    Row(
        "AML_HIP_LIBRARY aborts, env forces host",
        None,
        AREA_HOST,
        hip=True,
        env={"AML_HIP_LIBRARY": "@ABORT@", "AML_BACKEND": "host"},
        says=("ok host",),
    ),
    # Plain area(kind="host") probes the GPU backends ranked above host; hip was never seen
    # to probe safely (a fresh cache), so its probe runs isolated first and its abort is
    # reported there: host serves.
    Row(
        "AML_HIP_LIBRARY aborts, plain area",
        None,
        AREA_HOST,
        hip=True,
        env={"AML_HIP_LIBRARY": "@ABORT@", "AML_DISABLE_BACKENDS": "cuda"},
        says=("ok host",),
    ),
    # The documented limit: once a probe was seen to finish (remembered per distribution
    # version), it runs in-process, where the library's abort takes the process down.
    Row(
        "AML_HIP_LIBRARY aborts after hip was seen to probe (documented in-process rule)",
        None,
        AREA_HOST,
        hip=True,
        env={"AML_HIP_LIBRARY": "@ABORT@", "AML_DISABLE_BACKENDS": "cuda", "@TRUSTED@": "hip"},
        returncode=-6,
    ),
    # -- a segfaulting probe and an in-process aml_core.backends() (never seen to finish)
    Row("probe segfaults, backends()", Plugin(probe=SEGV), BACKENDS, says=("hostile broken probe crashed",)),
    Row(
        "probe segfaults, backends(), unwritable cache",
        Plugin(probe=SEGV),
        BACKENDS,
        env={"XDG_CACHE_HOME": "/proc/aml-no-such-dir"},
        says=("hostile broken probe crashed",),
    ),
    Row(
        "probe segfaults, area()",
        Plugin(probe=SEGV),
        AREA_HOST,
        says=("ok host",),
    ),
]


@pytest.fixture(scope="module")
def abort_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared library whose constructor calls abort()."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler (gcc) to build the aborting library")
    root = tmp_path_factory.mktemp("abort")
    src = root / "abort_ctor.c"
    src.write_text("#include <stdlib.h>\n__attribute__((constructor)) static void f(void) { abort(); }\n")
    lib = root / "libabort_ctor.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, timeout=60)
    return lib


def _site(root: Path, plugin: Plugin | None, hip: bool) -> list[str]:
    """A directory with the hostile plugin (and aml-hip's entry point) as installed
    distributions; the paths to put on PYTHONPATH."""
    paths = [str(root)]
    if plugin is not None:
        (root / "hostile_plugin_mod.py").write_text(plugin.source())
        info = root / "hostile_plugin-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hostile-plugin\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text("[aml.backends]\nhostile = hostile_plugin_mod\n")
    if hip:
        info = root / "aml_hip-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: aml-hip\nVersion: 0.1.0\n")
        (info / "entry_points.txt").write_text("[aml.backends]\nhip = aml_hip.plugin\n")
        paths.append(str(HIP_BACKEND))
    return [*paths, str(REPO)]


def _seen_to_probe(env: dict[str, str], backend: str) -> None:
    """Probe ``backend`` once in isolation without the row's hostile variables, as an
    earlier run would have: its probe is then remembered as one that finishes."""
    clean = {k: v for k, v in env.items() if k not in ("AML_HIP_LIBRARY",)}
    code = f"import aml_core\nprint([s.state for s in aml_core.backends() if s.name == {backend!r}])"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=clean,
        capture_output=True,
        text=True,
        timeout=ROW_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert (Path(env["XDG_CACHE_HOME"]) / "aml" / "probes.json").exists(), proc.stdout


def _check_info(row: Row, out: str) -> None:
    data: dict[str, Any] = json.loads(out)
    backends = data["backends"]
    host = [b for b in backends if b["name"] == "host" and b["state"] != "shadowed"]
    assert host, backends
    assert host[0]["available"] is True, host
    if row.backend is not None:
        name, state, reason = row.backend
        found = [b for b in backends if b["name"] == name and b["state"] == state]
        assert found, [(b["name"], b["state"], b["reason"]) for b in backends]
        assert reason in found[0]["reason"], found[0]["reason"]
        if state == "shadowed":
            assert found[0]["priority"] == 0, "a shadowed backend keeps its own priority"


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_hostile(row: Row, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AML_")}
    extra = dict(row.env)
    if "@ABORT@" in extra.values():
        lib = request.getfixturevalue("abort_library")
        extra = {k: str(lib) if v == "@ABORT@" else v for k, v in extra.items()}
    # A fresh probe cache per row: whether a probe was seen to finish is this row's own.
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    trusted = extra.pop("@TRUSTED@", None)
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(_site(tmp_path, row.plugin, row.hip))
    if trusted is not None:
        _seen_to_probe(env, trusted)
    env["COLUMNS"] = "80"
    if row.run == INFO:
        cmd = [sys.executable, "-m", "aml_core", "info", "--json"]
    elif row.run == TEXT:
        cmd = [sys.executable, "-m", "aml_core", "info"]
    else:
        cmd = [sys.executable, "-c", row.run]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=ROW_TIMEOUT, check=False)
    took = time.monotonic() - start
    assert proc.returncode == row.returncode, (proc.returncode, proc.stdout, proc.stderr)
    assert took < row.max_seconds, f"took {took:.1f} s"
    if row.returncode != 0:
        return
    assert "Traceback" not in proc.stderr, proc.stderr
    if row.run == INFO:
        _check_info(row, proc.stdout)
    if row.run == TEXT:
        lines = proc.stdout.splitlines()
        assert max(len(line) for line in lines) <= 80, proc.stdout
        assert "aml_core.area(kind=...) would use:" in proc.stdout
        for value in extra.values():
            if value.startswith("/"):
                assert proc.stdout.count(value) == 1, f"{value} printed more than once:\n{proc.stdout}"
    for piece in row.says:
        assert piece in proc.stdout, proc.stdout


def test_the_table_covers_the_issue() -> None:
    """Every kind of hostility the issues list has a row."""
    ids = " ".join(r.id for r in ROWS)
    for word in (
        "junk",
        "raises",
        "None",
        "duplicate",
        "hangs",
        "segfaults",
        "AML_BACKEND",
        "AML_DISABLE_BACKENDS",
        "AML_PROBE_TIMEOUT",
        "AML_INFO_TIMEOUT",
        "AML_HIP_LIBRARY",
        "backends()",
    ):
        assert word in ids, word
