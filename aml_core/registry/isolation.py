"""Isolated probes: an entry-point backend's probe run in its own process, so that a
native crash or a hang in it is reported ("probe crashed (signal 11: SIGSEGV)", "probe
timed out after 5 s") instead of taking the caller down.

Within :func:`.forkserver.warm_probes` (``aml info``) the child is a fork of the warm
server forked before any plugin was loaded, running :func:`probe_child` as below with
its stdout and stderr on pipes to the caller; otherwise (or when that server is gone) a
fresh interpreter, ``python -P -c <_CHILD> group entry_point distribution backend``: ``-P``
keeps the current directory (a source tree of aml_core, unbuilt) off its import path,
which is the parent's, given as PYTHONPATH. It writes ``{"started": true}`` once its
plugin is loaded (the probe's own time starts then) and one JSON line with the result
(``aml_core.codec``); what the plugin prints goes to stderr.

:func:`probe_isolated` runs at most :func:`~.config.isolated_parallelism` children at
once, in rank order (priority, then name), within one :class:`TimeLimit` for them all
(``AML_INFO_TIMEOUT``): a probe still running when it runs out is stopped, one not yet
started is not started, and both are ``unavailable``, saying so.

A slow machine is never a broken backend: a child that has not started the
probe (written ``started``) within :func:`~.config.startup_limit` (30 s, scaled with the
load; when the user set ``AML_INFO_TIMEOUT``, that whole limit) or before
``AML_INFO_TIMEOUT`` runs out is ``unavailable`` with "probe slow: ...";
only a probe that started and then crashed, hung past ``AML_PROBE_TIMEOUT`` or answered
junk is ``broken``.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import attrs

from ..codec import result_from_json, result_to_json
from ..descriptor import ProbeResult
from . import forkserver
from .config import isolated_parallelism, startup_limit
from .forkserver import ForkServer
from .manager import PluginManager, describe, dist_of, entry_points
from .probes import Outcome, probe_once, timed_out
from .ranking import Backend

__all__ = ["TimeLimit", "probe_child", "probe_isolated", "run_child", "slow"]

_CHILD = "import aml_core.registry.isolation as i; i.probe_child()"


def probe_child(args: Sequence[str] | None = None) -> None:
    """The isolated probe: ``args`` (default ``sys.argv[1:5]``) = ``[group, entry point,
    distribution, backend]``. Writes ``started`` and then one JSON line to the original
    stdout; whatever the plugin prints goes to stderr."""
    import resource

    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    group, ep_name, dist, backend = list(args if args is not None else sys.argv[1:5])
    # A crashing probe is reported; it should not leave a core file in the user's directory.
    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))

    def answer(data: dict[str, object]) -> None:
        out.write(json.dumps(data, default=str) + "\n")
        out.flush()

    eps = [(ep, first) for ep, first in entry_points(group) if ep.name == ep_name and dist_of(ep)[0] == dist]
    if not eps:
        answer({"started": False, "broken": f"entry point {ep_name!r} of {dist} not found"})
        return
    ep, first = eps[0]
    pm = PluginManager()
    try:
        plugin = pm.load_plugin(ep, ep_name, first)
        found = pm.backends_of(plugin) if plugin.obj is not None else plugin.error
    except Exception as exc:
        found = f"plugin failed in the probe process: {describe(exc)}"
    if isinstance(found, str):
        answer({"started": False, "broken": found})
        return
    descs = [d for d in found if d.name == backend]
    if not descs:
        answer({"started": False, "broken": f"plugin no longer declares backend {backend!r}"})
        return
    answer({"started": True})
    outcome = probe_once(descs[0])
    answer({"result": result_to_json(outcome.result), "broken": outcome.broken})


@attrs.frozen
class TimeLimit:
    """The time ``aml info`` gives all its isolated probes together (``AML_INFO_TIMEOUT``)."""

    seconds: float
    #: When it runs out, in ``time.monotonic()`` seconds.
    end: float
    #: The user set the limit (``AML_INFO_TIMEOUT``): a probe's interpreter may take all
    #: of it to start; otherwise its start is bounded by :func:`~.config.startup_limit` too.
    bounds_startup: bool = False

    @classmethod
    def start(cls, seconds: float, *, bounds_startup: bool = False) -> TimeLimit:
        return cls(seconds, time.monotonic() + seconds, bounds_startup)

    def ran_out(self) -> bool:
        return time.monotonic() >= self.end

    def outcome(self, what: str) -> Outcome:
        """A probe the limit stopped (``what``: "probe stopped") or kept from starting
        ("not probed"): unavailable, not broken (the probe did nothing wrong), and not
        seen to finish."""
        return Outcome(
            ProbeResult.unavailable(f"{what}: {self.ran_out_text()}"), broken=False, finished=False
        )

    def ran_out_text(self) -> str:
        return f"aml info's time limit of {self.seconds:g} s (AML_INFO_TIMEOUT) ran out"


def probe_isolated(
    targets: list[Backend], timeout: float, limit: TimeLimit | None = None
) -> dict[str, Outcome]:
    """Probe each backend in its own process, at most :func:`isolated_parallelism`
    at once, in rank order, all within ``limit``."""
    todo = sorted(targets, key=lambda b: (-b.desc.priority, b.desc.name))
    todo.reverse()  # pop() takes the best-ranked first
    outcomes: dict[str, Outcome] = {}
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                b = todo.pop()
            if limit is not None and limit.ran_out():
                outcome = limit.outcome("not probed")
            else:
                outcome = run_child(b, timeout, limit)
            with lock:
                outcomes[b.desc.name] = outcome

    threads = [
        threading.Thread(target=worker, name="aml-isolated-probe", daemon=True)
        for _ in range(min(len(todo), isolated_parallelism()))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    path = [p if p else os.getcwd() for p in sys.path if isinstance(p, str)]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def _failed(reason: str) -> Outcome:
    """The child did not finish the probe: broken, and not seen to probe safely."""
    return Outcome(ProbeResult.unavailable(reason), broken=True, finished=False)


def _lost() -> Outcome:
    """A forked probe whose exit status never came: the warm server that forked it ended
    (killed from outside). That says nothing against the backend: unavailable, not
    broken, not remembered."""
    reason = "probe lost: aml info's probe server ended before the probe's exit status came"
    return Outcome(ProbeResult.unavailable(reason), broken=False, finished=False)


def slow(waited: float, why: str = "") -> Outcome:
    """A child that had not started its probe (Python starting, the plugin loading) when
    the wait ran out: the machine is slow or busy, which says nothing against the
    backend. Unavailable, not broken, and not seen to finish (so not remembered)."""
    reason = (
        f"probe slow: its process had not started after {waited:.3g} s "
        f"(a slow or busy machine, not a broken backend){why}"
    )
    return Outcome(ProbeResult.unavailable(reason), broken=False, finished=False)


class _Interpreter:
    """A probe child that is a fresh interpreter (``python -P -c _CHILD ...``)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        assert proc.stderr is not None
        self._proc = proc
        self.out, self.err = proc.stdout.fileno(), proc.stderr.fileno()

    def kill(self) -> None:
        self._proc.kill()

    def wait(self, timeout: float | None) -> int | None:
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def lost(self) -> bool:
        return False

    def close(self) -> None:
        assert self._proc.stdout is not None
        assert self._proc.stderr is not None
        self._proc.stdout.close()
        self._proc.stderr.close()


class _Forked:
    """A probe child forked by the warm server (:mod:`.forkserver`)."""

    def __init__(self, server: ForkServer, n: int, out: int, err: int) -> None:
        self._server, self._n = server, n
        self.out, self.err = out, err

    def kill(self) -> None:
        self._server.kill(self._n)

    def wait(self, timeout: float | None) -> int | None:
        return self._server.wait(self._n, timeout)

    def lost(self) -> bool:
        """The server is gone, so this child's exit status will never come."""
        return self._server.lost

    def close(self) -> None:
        os.close(self.out)
        os.close(self.err)


def _start(args: list[str]) -> _Interpreter | _Forked | Outcome:
    """The probe child: a fork of the warm server while one runs, else (or when it is
    gone) a fresh interpreter; the outcome when neither could start."""
    server = forkserver.active()
    spawned = server.spawn(args) if server is not None else None
    if server is not None and spawned is not None:
        return _Forked(server, *spawned)
    # -P: the child's import path is the parent's (PYTHONPATH, from _child_env) and never the
    # current directory, where a source tree of aml_core would shadow the installed one.
    cmd = [sys.executable, "-P", "-c", _CHILD, *args]
    try:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env()
        )
    except OSError as exc:
        return _failed(f"cannot start the probe process: {exc}")
    return _Interpreter(proc)


def run_child(b: Backend, timeout: float, limit: TimeLimit | None = None) -> Outcome:
    """One isolated probe: the startup bounded by :func:`~.config.startup_limit` (scaled
    with the load), the probe by ``timeout``, both by ``limit``. A child that has not
    started when its startup budget or ``limit`` runs out is :func:`slow`, not broken;
    one that started and then outlives ``timeout`` is broken (timed out)."""
    assert b.plugin.entry_point is not None
    group, ep_name = b.plugin.entry_point
    spawned = time.monotonic()
    child = _start([group, ep_name, b.plugin.distribution, b.desc.name])
    if isinstance(child, Outcome):
        return child
    chunks: dict[int, bytearray] = {child.out: bytearray(), child.err: bytearray()}
    out, err = chunks[child.out], chunks[child.err]
    sel = selectors.DefaultSelector()
    sel.register(child.out, selectors.EVENT_READ)
    sel.register(child.err, selectors.EVENT_READ)
    started: float | None = None
    end = spawned + startup_limit()
    if limit is not None and limit.bounds_startup:
        end = max(end, limit.end)  # the user gave the probes this long: a slow start may use it
    stopped: Outcome | None = None
    rc: int | None = None

    def out_of_time(now: float) -> Outcome:
        """The outcome of a child still running at ``now``, past its deadline or the limit:
        the limit's, where it ran out first."""
        if limit is not None and limit.end < end and now >= limit.end:
            if started is not None:
                return limit.outcome("probe stopped")
            return slow(now - spawned, f", when {limit.ran_out_text()}")
        return _failed(timed_out(timeout)) if started is not None else slow(now - spawned)

    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= end or (limit is not None and now >= limit.end):
                stopped = out_of_time(now)
                break
            wait = end - now if limit is None else min(end, limit.end) - now
            for key, _ in sel.select(max(0.0, wait)):
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                chunks[key.fd] += data
            if started is None and b'"started": true' in out:
                started = time.monotonic()
                end = started + timeout
        if stopped is None:
            # Its output is closed; it ends now, unless it closed its output and hangs.
            deadline = end if limit is None else min(end, limit.end)
            rc = child.wait(max(0.0, deadline - time.monotonic()))
            if rc is None:  # no exit status by its deadline (or the limit's end)
                stopped = _lost() if child.lost() else out_of_time(max(time.monotonic(), deadline))
    finally:
        sel.close()
        if stopped is not None:
            child.kill()
            child.wait(None)
        child.close()
    if stopped is not None:
        return stopped
    assert rc is not None
    return _parse_child(bytes(out), bytes(err), rc)


def _parse_child(out: bytes, err: bytes, rc: int) -> Outcome:
    lines = [line for line in out.decode(errors="replace").splitlines() if line.strip()]
    last: dict[str, Any] = {}
    if lines:
        try:
            last = json.loads(lines[-1])
        except ValueError:
            last = {}
    if rc < 0:
        try:
            sig = f"signal {-rc}: {signal.Signals(-rc).name}"
        except ValueError:
            sig = f"signal {-rc}"
        return _failed(f"probe crashed ({sig})")
    if "result" in last:
        try:
            return Outcome(result_from_json(last["result"]), broken=bool(last.get("broken")))
        except Exception as exc:
            return _failed(f"unreadable probe answer: {describe(exc)}")
    if isinstance(last.get("broken"), str):
        return _failed(last["broken"])
    tail = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
    why = f": {tail[-1].strip()}" if tail else ""
    return _failed(f"probe process exited with status {rc}{why}")
