"""Where the registry remembers probes seen to finish, and that the memory never
breaks anything: an unwritable, corrupt or missing cache only repeats the isolated check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aml_core.registry.manager import Plugin
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
