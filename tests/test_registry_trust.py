"""Where the registry remembers probes seen to finish, and that the memory never
breaks anything: an unwritable, corrupt or missing cache only repeats the isolated check."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aml_core.descriptor import ProbeResult
from aml_core.registry import trust as trust_module
from aml_core.registry.core import Registry
from aml_core.registry.manager import Plugin
from aml_core.registry.probes import Outcome
from aml_core.registry.trust import ProbeTrust, cache_file

PLUGIN = Plugin("ep", "some-dist", "1.2", object(), state="available", entry_point=("aml.backends", "ep"))


def test_cache_file_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_file() == tmp_path / "aml" / "probes.json"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # not absolute: ignored, as XDG says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_file() == tmp_path / "home" / ".cache" / "aml" / "probes.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", "")  # an empty home: never a path relative to the current directory
    path = cache_file()
    assert path is None or path.is_absolute(), path


def test_remembered_per_distribution_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    trust = ProbeTrust()
    assert not trust.trusted(PLUGIN, "b")
    trust.remember(PLUGIN, "b")
    assert ProbeTrust().trusted(PLUGIN, "b")  # another process reads it back
    assert not trust.trusted(PLUGIN, "other")
    newer = Plugin("ep", "some-dist", "1.3", object(), state="available", entry_point=("aml.backends", "ep"))
    assert not trust.trusted(newer, "b")  # a new version is checked again
    data = json.loads((tmp_path / "aml" / "probes.json").read_text())
    assert data["version"] == 1
    assert len(data["finished"]) == 1


@pytest.mark.parametrize("content", ["{not json", '{"version": 99, "finished": ["x"]}', '["a list"]'])
def test_corrupt_cache_is_ignored_and_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "aml").mkdir()
    (tmp_path / "aml" / "probes.json").write_text(content)
    trust = ProbeTrust()
    assert not trust.trusted(PLUGIN, "b")
    trust.remember(PLUGIN, "b")
    assert trust.trusted(PLUGIN, "b")


def test_unwritable_cache_never_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")  # the cache directory would have to be under a file
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    trust = ProbeTrust()
    trust.remember(PLUGIN, "b")
    assert not trust.trusted(PLUGIN, "b")
    assert blocker.read_text() == ""


# -- the cache is trusted only as the user's own (issue 32, item 3 and root causes 7, 8) -------
KEY_OF_PLUGIN = f"{sys.executable} some-dist==1.2 aml.backends:ep b"


def _cache_with_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache that says PLUGIN's probe finished, in a directory of the user's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "aml").mkdir(mode=0o700)
    path = tmp_path / "aml" / "probes.json"
    path.write_text(json.dumps({"version": 1, "finished": [KEY_OF_PLUGIN]}))
    path.chmod(0o600)
    assert ProbeTrust().trusted(PLUGIN, "b")  # the well-formed cache of the user's own is read
    return path


def _in_child(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter, bounded: a cache read that blocks is a failure."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_fifo_cache_is_ignored_without_blocking(tmp_path: Path) -> None:
    """Root cause 7: a FIFO at probes.json made backends() block forever."""
    (tmp_path / "aml").mkdir(mode=0o700)
    os.mkfifo(tmp_path / "aml" / "probes.json")
    code = (
        "from aml_core.registry.trust import ProbeTrust\n"
        "from aml_core.registry.manager import Plugin\n"
        "p = Plugin('ep', 'some-dist', '1.2', object(), state='available',\n"
        "           entry_point=('aml.backends', 'ep'))\n"
        "t = ProbeTrust()\n"
        "print(t.trusted(p, 'b'))\n"
        "t.remember(p, 'b')\n"
        "print(t.trusted(p, 'b'))\n"
        "print(t.notes[0])\n"
    )
    try:
        proc = _in_child(code, {"XDG_CACHE_HOME": str(tmp_path)})
    except subprocess.TimeoutExpired:
        pytest.fail("reading a FIFO probe cache blocked")
    assert proc.returncode == 0, proc.stderr
    first, after, note = proc.stdout.splitlines()
    assert first == "False"
    assert after == "True", "remember() replaces the FIFO in the user's own directory"
    assert "is a FIFO" in note, note


def test_deeply_nested_json_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root cause 8: deeply nested JSON made backends() raise a bare RecursionError."""
    path = _cache_with_key(tmp_path, monkeypatch)
    path.write_text("[" * 200_000 + "]" * 200_000)
    trust = ProbeTrust()
    assert not trust.trusted(PLUGIN, "b")
    assert any("nested deeper than" in n for n in trust.notes), trust.notes
    path.write_text('{"version": 1, "finished": [' + "[" * 50 + "]" * 50 + "]}")
    trust = ProbeTrust()
    assert not trust.trusted(PLUGIN, "b")
    assert any("nested deeper than" in n for n in trust.notes), trust.notes


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602])
def test_a_group_or_world_writable_cache_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: int
) -> None:
    path = _cache_with_key(tmp_path, monkeypatch)
    path.chmod(mode)
    trust = ProbeTrust()
    assert not trust.trusted(PLUGIN, "b")
    assert any("writable by others" in n for n in trust.notes), trust.notes


def test_a_group_or_world_writable_cache_directory_is_refused_and_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _cache_with_key(tmp_path, monkeypatch)
    path.parent.chmod(0o777)
    trust = ProbeTrust()
    assert not trust.trusted(PLUGIN, "b")
    before = path.read_bytes()
    trust.remember(PLUGIN, "other")
    assert path.read_bytes() == before, "aml wrote into a directory others can write"
    assert any("writable by others" in n for n in trust.notes), trust.notes


def test_a_cache_of_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file, or its directory, owned by someone else (here: this process posing as
    another user) is neither read nor written."""
    path = _cache_with_key(tmp_path, monkeypatch)
    me = os.geteuid()
    monkeypatch.setattr(trust_module.os, "geteuid", lambda: me + 1)
    trust = ProbeTrust()
    assert not trust.trusted(PLUGIN, "b")
    assert any(f"owned by uid {me}" in n for n in trust.notes), trust.notes
    before = path.read_bytes()
    trust.remember(PLUGIN, "other")
    assert path.read_bytes() == before


def test_a_symlinked_cache_file_is_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _cache_with_key(tmp_path, monkeypatch)
    real = tmp_path / "elsewhere.json"
    path.rename(real)
    path.symlink_to(real)
    trust = ProbeTrust()
    assert not trust.trusted(PLUGIN, "b")
    assert any("symbolic link" in n for n in trust.notes), trust.notes


def test_a_symlinked_cache_directory_is_not_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aml wrote through a symlinked cache directory: it must neither read nor write there."""
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    (target / "probes.json").write_text(json.dumps({"version": 1, "finished": [KEY_OF_PLUGIN]}))
    (target / "probes.json").chmod(0o600)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "aml").symlink_to(target)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    trust = ProbeTrust()
    assert not trust.trusted(PLUGIN, "b")
    trust.remember(PLUGIN, "other")
    assert "other" not in (target / "probes.json").read_text()
    assert sorted(p.name for p in target.iterdir()) == ["probes.json"], "a temporary file was left"
    assert any("symbolic link" in n for n in trust.notes), trust.notes


def test_a_huge_cache_file_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _cache_with_key(tmp_path, monkeypatch)
    with path.open("r+b") as f:
        f.truncate(1 << 30)  # sparse: 1 GiB that costs no disk
    trust = ProbeTrust()
    assert not trust.trusted(PLUGIN, "b")
    assert any("larger than" in n for n in trust.notes), trust.notes


def test_a_directory_at_the_cache_path_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "aml" / "probes.json").mkdir(parents=True, mode=0o700)
    (tmp_path / "aml").chmod(0o700)
    trust = ProbeTrust()
    assert not trust.trusted(PLUGIN, "b")
    trust.remember(PLUGIN, "b")  # best effort: never raises
    assert any("is a directory" in n for n in trust.notes), trust.notes


def test_written_atomically_in_a_private_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """remember() writes a new file and renames it over the old one in the same
    directory: a reader (a hard link to the old file) never sees a half-written cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "fresh"))
    trust = ProbeTrust()
    trust.remember(PLUGIN, "b")
    path = tmp_path / "fresh" / "aml" / "probes.json"
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    old = tmp_path / "old-link"
    os.link(path, old)
    trust.remember(PLUGIN, "c")
    assert path.stat().st_ino != old.stat().st_ino, "the cache was rewritten in place"
    assert "aml.backends:ep c" not in old.read_text()
    assert "aml.backends:ep c" in path.read_text()
    assert sorted(p.name for p in path.parent.iterdir()) == ["probes.json"]
    assert not trust.notes


# -- a crashed isolated probe is never remembered as safe (issue 32, the test audit) -----------
CRASH_GROUP = "aml.test_crashing_backends"
CRASHING_PLUGIN = """
import ctypes
from aml_core import BackendDescriptor, Kind, ProbeResult, hookimpl

def probe():
    ctypes.string_at(0)  # SIGSEGV
    return ProbeResult(available=True)

def create(kind, device=None, **options):
    raise NotImplementedError

@hookimpl
def aml_backends():
    return [BackendDescriptor(name="crashy", priority=5, kinds={Kind.DEVICE}, probe=probe,
                              create_area=create)]
"""


@pytest.fixture
def crashing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A third-party entry point whose probe segfaults; the probe cache path."""
    (tmp_path / "crashing_probe_mod.py").write_text(CRASHING_PLUGIN)
    info = tmp_path / "crashing_probe-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: crashing-probe\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{CRASH_GROUP}]\ncrashy = crashing_probe_mod\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("AML_BACKEND", "AML_DISABLE_BACKENDS", "AML_PROBE_TIMEOUT", "AML_INFO_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "cache" / "aml" / "probes.json"


def _crashy(reg: Registry, *, isolated: bool) -> tuple[str, str]:
    found = {s.name: s for s in reg.statuses(isolated=isolated)}
    return found["crashy"].state, found["crashy"].reason


def test_a_crashed_isolated_probe_is_never_remembered(crashing: Path) -> None:
    """registry/trust.py's promise: aml info's isolated probe crashed, so neither aml info
    nor a later in-process backends() may remember it; the in-process one must check it
    in isolation again (and again find the crash) rather than run it here."""
    state, reason = _crashy(Registry(group=CRASH_GROUP, builtins=False), isolated=True)
    assert (state, reason) == ("broken", "probe crashed (signal 11: SIGSEGV)")
    assert "crashing-probe" not in (crashing.read_text() if crashing.exists() else "")
    # In-process: the isolated check first (this test's process survives the probe).
    for _ in range(2):
        state, reason = _crashy(Registry(group=CRASH_GROUP, builtins=False), isolated=False)
        assert (state, reason) == ("broken", "probe crashed (signal 11: SIGSEGV)")
        assert "crashing-probe" not in (crashing.read_text() if crashing.exists() else "")
    assert not ProbeTrust().trusted(
        Plugin(
            "crashy",
            "crashing-probe",
            "1.0",
            object(),
            state="available",
            entry_point=(CRASH_GROUP, "crashy"),
        ),
        "crashy",
    )


@pytest.mark.parametrize(
    "outcome",
    [
        Outcome(ProbeResult.unavailable("probe crashed (signal 11: SIGSEGV)"), broken=True, finished=False),
        Outcome(ProbeResult.unavailable("probe timed out after 5 s"), broken=True, finished=False),
        Outcome(ProbeResult.unavailable("probe slow: ..."), broken=False, finished=False),
    ],
    ids=["crashed", "hung", "never started"],
)
def test_record_remembers_only_a_finished_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: Outcome
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    trust = ProbeTrust()
    trust.record(PLUGIN, "b", outcome)
    assert not ProbeTrust().trusted(PLUGIN, "b")
    trust.record(PLUGIN, "b", Outcome(ProbeResult.unavailable("probe failed: OSError"), broken=True))
    assert ProbeTrust().trusted(PLUGIN, "b"), "a probe that raised finished: it is remembered"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    content=st.binary(max_size=512)
    | JSON_VALUES.map(lambda v: json.dumps(v).encode())
    | st.builds(
        lambda found: json.dumps({"version": 1, "finished": found}).encode(),
        st.lists(JSON_VALUES, max_size=4),
    )
)
def test_any_cache_content_is_read_without_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes
) -> None:
    """Whatever the file holds (bytes, any JSON, the right shape with junk entries), the
    cache is read without raising, and only strings are ever taken as remembered keys."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "aml").mkdir(mode=0o700, exist_ok=True)
    path = tmp_path / "aml" / "probes.json"
    path.write_bytes(content)
    path.chmod(0o600)
    trust = ProbeTrust()
    assert trust.trusted(PLUGIN, "b") is False
    assert all(isinstance(note, str) for note in trust.notes)
    trust.remember(PLUGIN, "b")  # a corrupt cache is replaced, never a failure
    assert ProbeTrust().trusted(PLUGIN, "b")
