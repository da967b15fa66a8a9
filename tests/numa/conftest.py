"""The NUMA lab's test rules (see :mod:`tests.support.numa_lab`).

* ``@pytest.mark.numa_lab("two-node", "tiered", ...)``: the topologies a test runs in (none
  named: every one). A test in ``tests/numa`` without the marker runs in every topology.
* Outside the lab (``AML_NUMA_LAB`` unset) these tests skip: "runs in the NUMA lab (tox -e numa)".
* Inside the lab, the tests of other topologies are deselected, and any skip of a selected
  test is reported as a failure: a lab test that cannot run is a broken lab.
* The fixture ``lab_topology`` is the :class:`~tests.support.numa_lab.LabTopology` of the
  running guest, to assert against what QEMU was given.
* Inside the lab, automatic NUMA balancing is off for the session
  (``/proc/sys/kernel/numa_balancing`` 0, the value before restored after): its scanner
  makes resident pages PROT_NONE to take hinting faults, and Linux 6.1's move_pages(2)
  query (follow_page) answers -ENOENT for such a page and -EFAULT for such a huge page,
  which ``page_nodes`` reports as NOT_TOUCHED, and the hinting faults may migrate pages
  under a test. In the guest, with balancing on, 5 of 60 touched 4 MiB DEFAULT buffers
  showed NOT_TOUCHED pages (all of them once the scanner had passed), none of 60 with it
  off (evidence/2026-12-02-qemu-numa-lab-flake). The lab checks placement, not the
  balancer.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest

from tests.support.numa_lab import SKIP_REASON, TOPOLOGIES, LabTopology, current

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "numa_lab(*topologies): a NUMA lab test and the lab topologies it runs in (none: every one; "
        "skipped outside the lab, tox -e numa)",
    )


def _lab_item(item: pytest.Item) -> bool:
    return Path(str(item.path)).resolve().is_relative_to(HERE)


def _topologies(item: pytest.Item) -> set[str]:
    names: set[str] = set()
    for mark in item.iter_markers("numa_lab"):
        for name in mark.args:
            if name not in TOPOLOGIES:
                raise pytest.UsageError(
                    f"{item.nodeid}: numa_lab({name!r}) names no lab topology; known: {', '.join(TOPOLOGIES)}"
                )
            names.add(name)
    return names or set(TOPOLOGIES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    topology = current()
    keep: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        if not _lab_item(item) and not any(True for _ in item.iter_markers("numa_lab")):
            keep.append(item)
            continue
        wanted = _topologies(item)
        if topology is None:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))
            keep.append(item)
        elif topology.name in wanted:
            keep.append(item)
        else:
            deselected.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = keep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    topology = current()
    if topology is None or not report.skipped or hasattr(report, "wasxfail"):
        return report
    if not (_lab_item(item) or any(True for _ in item.iter_markers("numa_lab"))):
        return report
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped inside the NUMA lab ({topology.name}), which counts as a failure: {reason}"
    return report


#: The guest's automatic NUMA balancing switch (see the module's docstring).
NUMA_BALANCING = Path("/proc/sys/kernel/numa_balancing")


@pytest.fixture(scope="session", autouse=True)
def _no_numa_balancing() -> Generator[None, None, None]:
    """NUMA balancing off for the lab session, restored after (outside the lab: untouched)."""
    if current() is None or not NUMA_BALANCING.exists():
        yield
        return
    before = NUMA_BALANCING.read_text().strip()
    NUMA_BALANCING.write_text("0")
    try:
        yield
    finally:
        NUMA_BALANCING.write_text(before)


@pytest.fixture
def lab_topology() -> LabTopology:
    """The topology of the running guest (only inside the lab)."""
    topology = current()
    if topology is None:
        pytest.skip(SKIP_REASON)
    return topology
