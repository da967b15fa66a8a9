"""What the placement tests share: touching pages, counting them per node, the guest's
transparent huge page and hugetlb settings (the guest runs as root and is thrown away, so
the tests may write them; each is restored), CPU pinning, and a child Python whose
death by the OOM killer fails one test instead of the whole run."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import aml_core
from aml_core.host import NOT_TOUCHED, page_nodes
from tests.support.smaps import anon_huge_kib  # noqa: F401 (the lab tests take it from here)

ROOT = Path(__file__).resolve().parents[2]
PAGE = os.sysconf("SC_PAGE_SIZE")
HUGE = 2 << 20
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
NODES = Path("/sys/devices/system/node")


def touch(buf: aml_core.Buffer, value: int = 1) -> None:
    """Write one byte of every page (first touch places it)."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    arr[::PAGE] = value
    arr[-1] = value  # the last page, where the buffer does not start on a page
    del arr


def placed(buf: aml_core.Buffer) -> dict[int, int]:
    """Pages per node of the pages a buffer spans (any area's: a pool's block, which need
    not start on a page, too)."""
    start = buf.ptr - buf.ptr % PAGE
    return page_nodes(start, buf.ptr + buf.size - start, summary=True)


def all_on(buf: aml_core.Buffer, nodes: set[int] | int) -> None:
    """Every page of ``buf`` is touched and on one of ``nodes``."""
    want = {nodes} if isinstance(nodes, int) else nodes
    counts = placed(buf)
    assert NOT_TOUCHED not in counts, counts
    assert set(counts) <= want, f"pages outside {sorted(want)}: {counts}"
    start = buf.ptr - buf.ptr % PAGE
    assert sum(counts.values()) == -(-(buf.ptr + buf.size - start) // PAGE)


@contextlib.contextmanager
def thp_mode(mode: str) -> Iterator[None]:
    """Transparent huge pages ``always``, ``madvise`` or ``never`` for the block."""
    before = THP.read_text().split("[")[1].split("]")[0]
    THP.write_text(mode)
    try:
        yield
    finally:
        THP.write_text(before)


def hugetlb_path(node: int, size: int = HUGE) -> Path:
    return NODES / f"node{node}" / "hugepages" / f"hugepages-{size >> 10}kB"


@contextlib.contextmanager
def hugetlb_pages(per_node: dict[int, int], size: int = HUGE) -> Iterator[dict[int, int]]:
    """Reserve ``{node: count}`` huge pages on each node for the block (the kernel may give
    fewer: the counts it gave are yielded), and give them back after."""
    before = {n: int((hugetlb_path(n, size) / "nr_hugepages").read_text()) for n in per_node}
    got: dict[int, int] = {}
    try:
        for node, count in per_node.items():
            (hugetlb_path(node, size) / "nr_hugepages").write_text(str(count))
            got[node] = int((hugetlb_path(node, size) / "nr_hugepages").read_text())
        yield got
    finally:
        for node, count in before.items():
            (hugetlb_path(node, size) / "nr_hugepages").write_text(str(count))


@contextlib.contextmanager
def on_cpus(cpus: set[int]) -> Iterator[None]:
    """Run the calling thread on ``cpus`` for the block."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def node_cpus(node: int) -> set[int]:
    text = (NODES / f"node{node}" / "cpulist").read_text().strip()
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def free_bytes(node: int) -> int:
    for line in (NODES / f"node{node}" / "meminfo").read_text().splitlines():
        if "MemFree:" in line:
            return int(line.split()[-2]) * 1024
    raise AssertionError(f"no MemFree for node {node}")


def run_child(code: str, *args: str, timeout: float = 300) -> tuple[int, list[dict[str, Any]], str]:
    """Run ``code`` in a child Python (the repository on its path), first in line for
    the OOM killer (``oom_score_adj`` 1000). Returns its exit status (negative: the
    signal that killed it), the JSON objects of its stdout lines and its stderr."""
    prelude = "open('/proc/self/oom_score_adj', 'w').write('1000')\n"
    proc = subprocess.run(
        [sys.executable, "-c", prelude + code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=timeout,
        check=False,
    )
    out = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    return proc.returncode, out, proc.stderr
