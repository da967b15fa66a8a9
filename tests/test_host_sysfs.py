"""The host backend's own sysfs readers (aml_core/host/plugin.py: node_meminfo,
huge_pages; aml_core/host/numa.py: the node lists, node_memory, free_huge_pages,
interleave_weights) read numbers as aml_core.topology does (issue 32, root cause 9's
bug class): ASCII digits only, so that a value no kernel writes (a Unicode digit such as
'\u00b2', which ``str.isdigit`` accepts and ``int`` refuses, or the Arabic-Indic
'\u0661', which ``int`` takes for 1) is "not known", never an error or a wrong number;
a FIFO never blocks them. And ``policy_of`` of a page whose policy another library set
to one aml's Policy does not name is the documented AMLNotSupported."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import pytest

from aml_core import _os
from aml_core.errors import AMLNotSupported, ErrorCode
from aml_core.host import numa
from aml_core.host import plugin as host

#: Values no kernel writes: Unicode digits (int() refuses the first two and reads the
#: others as 1 and 12), too many digits, a sign, nothing.
NOT_NUMBERS = ("\u00b2", "\u2460", "\u0661", "\u0661\u0662", "1" * 21, "-5", "", "0x10")


def _meminfo(node: int, total: str, free: str) -> str:
    return (
        f"Node {node} MemTotal:       {total} kB\n"
        f"Node {node} MemFree:        {free} kB\n"
        f"Node {node} MemUsed:        1024 kB\n"
    )


@pytest.fixture
def nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake /sys/devices/system/node for both modules' readers."""
    monkeypatch.setattr(host, "NODE_ROOT", str(tmp_path))
    monkeypatch.setattr(numa, "NODE_ROOT", str(tmp_path))
    (tmp_path / "node0").mkdir()
    return tmp_path


def test_node_meminfo_reads_what_the_kernel_writes(nodes: Path) -> None:
    (nodes / "node0" / "meminfo").write_text(_meminfo(0, "2048", "1024"))
    assert host.node_meminfo(0) == (2 << 20, 1 << 20)
    assert numa.node_memory(0) == 2 << 20


@pytest.mark.parametrize("bad", NOT_NUMBERS, ids=ascii)
def test_node_meminfo_of_a_value_no_kernel_writes_is_not_known(
    nodes: Path, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    (nodes / "node0" / "meminfo").write_text(_meminfo(0, bad, bad))
    monkeypatch.setattr(os, "sysconf", lambda name: 0)  # node 0's fallback: the machine's memory
    assert numa.node_memory(0) == 0
    assert host.node_meminfo(0) == (0, None)
    total, free = host.nodes_meminfo([0])
    assert (total, free) == (0, None)


def test_node_meminfo_of_a_file_that_is_not_utf8_or_a_fifo_is_not_known(
    nodes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "sysconf", lambda name: 0)
    (nodes / "node0" / "meminfo").write_bytes(b"Node 0 MemTotal: \xff\xfe kB\n")
    assert host.node_meminfo(0) == (0, None)
    (nodes / "node0" / "meminfo").unlink()
    os.mkfifo(nodes / "node0" / "meminfo")  # no writer: an open() that blocks would hang here
    assert host.node_meminfo(0) == (0, None)
    assert numa.node_memory(0) == 0


def _huge(root: Path, name: str, count: str) -> None:
    (root / name).mkdir()
    (root / name / "nr_hugepages").write_text(count + "\n")


def test_huge_pages_read_what_the_kernel_writes(tmp_path: Path) -> None:
    _huge(tmp_path, "hugepages-2048kB", "8")
    _huge(tmp_path, "hugepages-1048576kB", "0")
    assert host.huge_pages(str(tmp_path)) == {2 << 20: 8, 1 << 30: 0}


@pytest.mark.parametrize("bad", NOT_NUMBERS, ids=ascii)
def test_huge_pages_of_a_value_no_kernel_writes_are_left_out(tmp_path: Path, bad: str) -> None:
    _huge(tmp_path, "hugepages-2048kB", bad)  # a count that is no number
    if bad and "/" not in bad:
        _huge(tmp_path, f"hugepages-{bad}kB", "4")  # a size that is no number
    _huge(tmp_path, "hugepages-1048576kB", "2")
    assert host.huge_pages(str(tmp_path)) == {1 << 30: 2}


def test_free_huge_pages_of_a_value_no_kernel_writes_is_zero(nodes: Path) -> None:
    where = nodes / "node0" / "hugepages" / "hugepages-2048kB"
    where.mkdir(parents=True)
    (where / "free_hugepages").write_text("3\n")
    assert numa.free_huge_pages(0, 2 << 20) == 3
    for bad in NOT_NUMBERS:
        (where / "free_hugepages").write_text(bad + "\n")
        assert numa.free_huge_pages(0, 2 << 20) == 0, ascii(bad)


def test_node_lists_read_what_the_kernel_writes(nodes: Path) -> None:
    (nodes / "online").write_text("0-2,5\n")
    assert numa.online_nodes() == [0, 1, 2, 5]
    assert numa._read_list(str(nodes / "online")) == [0, 1, 2, 5]


@pytest.mark.parametrize(
    "bad", ["0-\u00b2", "\u0661", "0,\u2460", "1-0", "0-99999999", "0--1", "a", "0-" + "1" * 21], ids=ascii
)
def test_a_node_list_no_kernel_writes_is_not_known(nodes: Path, bad: str) -> None:
    (nodes / "online").write_text(bad + "\n")
    assert numa._read_list(str(nodes / "online")) == []
    assert numa.online_nodes() == [0]  # what online_nodes says when sysfs cannot tell


def test_a_node_list_that_is_a_fifo_is_not_known(nodes: Path) -> None:
    os.mkfifo(nodes / "online")
    assert numa.online_nodes() == [0]


def test_interleave_weights_of_values_no_kernel_writes_are_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(numa, "WEIGHTED_INTERLEAVE_ROOT", str(tmp_path))
    (tmp_path / "node0").write_text("3\n")
    (tmp_path / "node1").write_text("\u00b2\n")  # a weight that is no number
    (tmp_path / "node\u0662").write_text("4\n")  # a node that is no number ('٢')
    (tmp_path / "auto").write_text("true\n")
    assert numa.interleave_weights() == {0: 3}


# -- policy_of: a policy set outside aml ------------------------------------------------------


def _mapping(pages: int = 4) -> tuple[mmap.mmap, int]:
    m = mmap.mmap(-1, pages * mmap.PAGESIZE)
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))


#: MPOL_LOCAL and MPOL_PREFERRED_MANY (linux/mempolicy.h; docs/native-abi.md), set as
#: another library (libnuma's numa_set_localalloc, numa_set_preferred_many) would.
MPOL_LOCAL = 4
MPOL_PREFERRED_MANY = 5


@pytest.mark.parametrize(
    ("mode", "nodes", "name"),
    [(MPOL_LOCAL, [], "MPOL_LOCAL"), (MPOL_PREFERRED_MANY, [0], "MPOL_PREFERRED_MANY")],
    ids=["local", "preferred_many"],
)
def test_policy_of_a_policy_aml_does_not_name_is_not_supported(
    mode: int, nodes: list[int], name: str
) -> None:
    m, address = _mapping()
    try:
        try:
            _os.mbind(address, len(m), mode, nodes, 0)
        except OSError as exc:  # a kernel before 5.15 has no MPOL_PREFERRED_MANY
            pytest.skip(f"this kernel refused mode {mode}: {exc}")
        with pytest.raises(AMLNotSupported, match=name) as info:
            numa.policy_of(address + mmap.PAGESIZE)
        assert info.value.code is ErrorCode.ENOTSUP
        assert f"({mode}, nodes {nodes})" in str(info.value)
        _os.mbind(address, len(m), int(numa.Policy.BIND), [0], 0)  # one aml names: answered
        assert numa.policy_of(address) == (numa.Policy.BIND, (0,))
    finally:
        del address
        m.close()
