"""Running a probe in-process (a daemon thread with a deadline), checking what it
returned, and turning the answer into a :class:`~aml_core.specs.BackendStatus`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import attrs

from ..descriptor import BackendDescriptor, ProbeResult
from ..specs import BackendStatus
from .manager import Plugin, describe
from .ranking import Backend

__all__ = ["Outcome", "ProbeJob", "backend_status", "plugin_status", "probe_once", "timed_out"]


@attrs.frozen
class Outcome:
    """A probe's result as the registry reads it: ``broken`` when the probe raised,
    hung, crashed or returned junk. ``finished``: the probe ran to its end (it returned
    or raised) rather than crashing or hanging its process."""

    result: ProbeResult
    broken: bool = False
    finished: bool = True


def timed_out(timeout: float) -> str:
    return f"probe timed out after {timeout:g} s"


class ProbeJob:
    """One in-process probe in a daemon thread, with its deadline. ``first``, when
    given, runs before it in the same thread (the isolated check of a plugin not yet
    seen to probe safely): an outcome from it is the answer and the probe is not run
    in this process; its own limits bound it, and the deadline starts after it."""

    def __init__(
        self, desc: BackendDescriptor, timeout: float, first: Callable[[], Outcome | None] | None = None
    ) -> None:
        self.timeout = timeout
        self._ready = threading.Event()
        self._done = threading.Event()
        self._outcome: Outcome | None = None
        self._final: Outcome | None = None
        self._desc = desc
        self._first = first
        self.deadline = time.monotonic() + timeout
        threading.Thread(target=self._run, name=f"aml-probe-{desc.name}", daemon=True).start()

    def _run(self) -> None:
        try:
            early = self._first() if self._first is not None else None
        finally:
            self.deadline = time.monotonic() + self.timeout
            self._ready.set()
        self._outcome = early if early is not None else probe_once(self._desc)
        self._done.set()

    def wait(self) -> Outcome:
        """The outcome, waiting at most until the deadline; a probe past its deadline
        stays timed out for the life of the registry (its thread is abandoned)."""
        if self._final is None:
            self._ready.wait()
            if self._done.wait(max(0.0, self.deadline - time.monotonic())) and self._outcome is not None:
                self._final = self._outcome
            else:
                self._final = Outcome(ProbeResult.unavailable(timed_out(self.timeout)), broken=True)
        return self._final


def probe_once(desc: BackendDescriptor) -> Outcome:
    """Run a probe and check what it returned."""
    try:
        found: object = desc.probe()
    except BaseException as exc:
        return Outcome(ProbeResult.unavailable(f"probe failed: {describe(exc)}"), broken=True)
    problem = _invalid_result(found)
    if problem:
        return Outcome(ProbeResult.unavailable(f"probe returned an invalid result: {problem}"), broken=True)
    assert isinstance(found, ProbeResult)
    return Outcome(found)


def _invalid_result(found: object) -> str:
    if not isinstance(found, ProbeResult):
        return f"{type(found).__name__}, not a ProbeResult"
    try:
        attrs.validate(found)
    except Exception as exc:
        return str(exc) or type(exc).__name__
    return ""


def plugin_status(plugin: Plugin) -> BackendStatus:
    """A plugin that declared no backend (failed, or blocked before it could)."""
    return BackendStatus(
        name=plugin.name,
        distribution=plugin.distribution,
        version=plugin.version,
        priority=None,
        available=False,
        reason=plugin.error,
        state=plugin.state if plugin.state in ("broken", "disabled") else "broken",
        plugin=plugin.name,
    )


def backend_status(b: Backend, outcome: Outcome | None, state: str = "", reason: str = "") -> BackendStatus:
    desc, plugin = b.desc, b.plugin
    if outcome is None:
        result = ProbeResult.unavailable(reason)
    else:
        result = outcome.result
        state = "broken" if outcome.broken else ("available" if result.available else "unavailable")
    if result.available:
        reason, detail = "", result.detail or result.reason
    else:
        reason, detail = result.reason or "unavailable (the probe gave no reason)", result.detail
    return BackendStatus(
        name=desc.name,
        distribution=plugin.distribution,
        version=plugin.version,
        priority=desc.priority,
        available=result.available,
        reason=reason,
        kinds=desc.kinds,
        devices=result.devices,
        capabilities=desc.capabilities | result.capabilities,
        description=desc.description,
        detail=detail,
        versions=result.versions,
        state=state,
        shadowed_by=b.shadowed_by,
        plugin=plugin.name,
    )
