"""The thread-placement helper (aml_core.host.run_on_node) on this machine's nodes: the
calling thread runs on the node's CPUs inside the block and gets its CPU set back after,
also when the block raises; bad nodes are typed errors before the thread moves. The
same on every node of an emulated machine: tests/numa/test_moving.py."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aml_core.errors import AMLDomainError, AMLTypeError, AMLValueError
from aml_core.host import (
    HostArea,
    affinity,
    current_node,
    node_cpus,
    nodes_with_cpus,
    online_nodes,
    run_on_node,
)

NODE = nodes_with_cpus()[0]


def test_run_on_node_runs_there_and_restores() -> None:
    before = os.sched_getaffinity(0)
    with run_on_node(NODE) as cpus:
        assert cpus == frozenset(os.sched_getaffinity(0))
        assert cpus <= node_cpus(NODE)
        assert current_node() == NODE
        with HostArea() as area:  # DEFAULT: local to the running CPU
            buf = area.mmap(1 << 20)
            np.frombuffer(buf, dtype=np.uint8)[:] = 1
            assert area.page_nodes(buf, summary=True) == {NODE: 256}
    assert os.sched_getaffinity(0) == before


def test_run_on_node_restores_when_the_block_raises_and_nests() -> None:
    before = os.sched_getaffinity(0)
    one = min(node_cpus(NODE) & before)
    os.sched_setaffinity(0, {one})  # a narrower set than the node's: given back as it was
    seen: list[set[int]] = []

    def block() -> None:
        with run_on_node(NODE):
            with run_on_node(NODE):
                pass
            seen.append(os.sched_getaffinity(0))
            raise KeyError("inside")

    try:
        with pytest.raises(KeyError):
            block()
        assert seen == [node_cpus(NODE) & before]
        assert os.sched_getaffinity(0) == {one}
    finally:
        os.sched_setaffinity(0, before)


def test_only_the_calling_thread_moves() -> None:
    seen: list[set[int]] = []
    inside, done = threading.Event(), threading.Event()
    main = os.sched_getaffinity(0)

    def worker() -> None:
        with run_on_node(NODE):
            inside.set()
            done.wait(10)
            seen.append(os.sched_getaffinity(0))

    t = threading.Thread(target=worker)
    t.start()
    inside.wait(10)
    assert os.sched_getaffinity(0) == main
    done.set()
    t.join()
    assert seen == [node_cpus(NODE) & main]


def test_bad_nodes_are_typed_errors_before_the_thread_moves() -> None:
    before = os.sched_getaffinity(0)
    for node, error, match in (
        (max(online_nodes()) + 1, AMLDomainError, "not online"),
        (-1, AMLDomainError, "not online"),
        (True, AMLTypeError, "bool"),
        ("0", AMLTypeError, "str"),
    ):
        with pytest.raises(error, match=match), run_on_node(node):  # type: ignore[arg-type]
            pytest.fail("the block ran")
        assert os.sched_getaffinity(0) == before


@pytest.fixture
def fake_sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A sysfs node directory where node NODE + 1 is memory only (HBM- or CXL-like)."""
    memory_only = NODE + 1
    for node, cpus in ((NODE, ",".join(map(str, sorted(node_cpus(NODE))))), (memory_only, "")):
        (tmp_path / f"node{node}").mkdir()
        (tmp_path / f"node{node}" / "cpulist").write_text(cpus + "\n")
    (tmp_path / "has_cpu").write_text(f"{NODE}\n")
    monkeypatch.setattr(affinity, "NODE_ROOT", str(tmp_path))
    monkeypatch.setattr(affinity.numa, "online_nodes", lambda: [NODE, memory_only])
    return tmp_path


@pytest.mark.usefixtures("fake_sysfs")
def test_a_cpu_less_node_is_refused() -> None:
    before = os.sched_getaffinity(0)
    assert nodes_with_cpus() == [NODE]
    with (
        pytest.raises(AMLValueError, match=rf"node {NODE + 1} has no CPUs.*\[{NODE}\]"),
        run_on_node(NODE + 1),
    ):
        pytest.fail("the block ran")
    assert os.sched_getaffinity(0) == before


def test_cpus_outside_the_cpuset_are_edom(monkeypatch: pytest.MonkeyPatch) -> None:
    before = os.sched_getaffinity(0)
    calls: list[Any] = []

    def refused(pid: int, cpus: Any) -> None:
        calls.append(cpus)
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(affinity.os, "sched_setaffinity", refused)
    with pytest.raises(AMLDomainError, match="CPU set"), run_on_node(NODE):
        pytest.fail("the block ran")
    assert len(calls) == 1  # nothing to restore: the thread never moved
    monkeypatch.undo()
    assert os.sched_getaffinity(0) == before
