"""The cross-host tests' rules (see :mod:`tests.support.two_hosts`).

* Outside the two emulated hosts (``AML_TWO_HOSTS`` unset) every test here skips: "runs
  between the two emulated hosts (tox -e hosts)".
* On host ``a`` they run, and any skip is reported as a failure: a cross-host test that cannot
  run is a broken pair. Host ``b`` runs the agent, not pytest.
* The session fixture ``peer`` waits for host ``b``'s agent and ends it after the last test
  (not in a nested pytest, :data:`NESTED`).
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.support.two_hosts import ENV, NESTED, SKIP_REASON

HERE = Path(__file__).resolve().parent


def _here(item: pytest.Item) -> bool:
    return Path(str(item.path)).resolve().is_relative_to(HERE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(ENV) != "a":
        for item in items:
            if _here(item):
                item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if os.environ.get(ENV) != "a" or not report.skipped or hasattr(report, "wasxfail") or not _here(item):
        return report
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped between the two hosts, where nothing may skip: {reason}"
    return report


@pytest.fixture(scope="session", autouse=True)
def peer() -> Iterator[None]:
    """Host b's agent, answering (and ended after the session, unless this pytest is one a
    test started: :data:`NESTED` set, the outer session still needs the agent)."""
    from tests.hosts import agent

    agent.connect()
    try:
        yield
    finally:
        if not os.environ.get(NESTED):
            agent.stop()
