"""The registry: finds backend plugins, probes them, ranks them and explains itself.

Rules (docs/user-guide.md, "Backends and the registry", is the user-facing version):

* **Plugins.** Entry points of the group ``aml.backends`` (the built-in host backend
  is aml-core's own entry point ``host``; there is no other way it is registered) and
  plugin objects given to :func:`register` go through the same path: each is
  registered with one :class:`pluggy.PluginManager` under its name, and its
  ``aml_backends`` hook is called. Loaded once per process (cached; :func:`reset`
  clears the cache). A plugin that fails to import, defines no hook, whose hook raises
  or returns junk is reported as ``broken`` with the error; it never stops the others.
* **Disabling.** ``AML_DISABLE_BACKENDS=a,b`` blocks plugins of those names in pluggy
  (``PluginManager.set_blocked``; a blocked entry point is not even imported) and
  disables backends of those names.
* **Duplicate names.** When several plugins declare a backend of the same name, the
  one with the highest priority wins; ties go to the distribution name, then the plugin
  name, in alphabetical order. The others are reported as ``shadowed`` (with their own
  priority) and are never probed or used.
* **Probes.** In-process probes run in daemon threads bounded by ``AML_PROBE_TIMEOUT``
  seconds (default 5); each backend is probed once (cached). :func:`backends` probes
  every backend, concurrently. :func:`area` and :func:`choose` probe only what they may
  use: with a backend forced (``backend=`` or ``AML_BACKEND``) only that one; otherwise
  the backends that provide the requested kind, one at a time in rank order, stopping
  at the first that builds the area, so a lower-ranked probe is not started once a
  better-ranked backend has answered. A probe that raises, hangs,
  or returns something other than a valid :class:`ProbeResult` makes its backend
  ``broken`` with the reason.
* **Isolation.** ``aml info`` (``statuses(isolated=True)``) runs each entry-point
  backend's probe in its own interpreter, so a native crash or hang in a probe is
  reported ("probe crashed (signal 11: SIGSEGV)", "probe timed out after 5 s")
  instead of taking the command down.
* **Ranking.** Priority (higher first), ties broken by name: deterministic.
* **Factories.** A ``create_area`` that raises :class:`AMLNotSupported` lets the next
  candidate try. Another :class:`~aml_core.errors.AMLError` (a bad option, an
  out-of-range device, no memory) is the answer to the request and reaches the caller
  as it is. Any other exception (a bug in the plugin), or a return value that is not
  an :class:`~aml_core.area.Area`, is reported with the plugin's name and the next
  candidate is tried. When none succeeds, the AMLNotSupported lists each backend's
  failure (and is chained to the first plugin exception).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Any, Literal, overload

import attrs
import pluggy

from . import hookspecs
from .descriptor import BackendDescriptor, ProbeResult
from .errors import AMLDomainError, AMLError, AMLNotSupported, AMLValueError
from .specs import AreaSpec, BackendStatus, Capability, DeviceInfo, Kind, as_kind

if TYPE_CHECKING:
    from .area import Area
    from .host.area import HostArea

__all__ = [
    "AMLConfigWarning",
    "CORE_DISTRIBUTION",
    "DEFAULT_PROBE_TIMEOUT",
    "ENTRY_POINT_GROUP",
    "MAX_PROBE_TIMEOUT",
    "Choice",
    "Registry",
    "Settings",
    "area",
    "backends",
    "choose",
    "default_registry",
    "descriptor",
    "register",
    "reset",
    "settings",
    "unregister",
]

ENTRY_POINT_GROUP = "aml.backends"
CORE_DISTRIBUTION = "aml-core"
DEFAULT_PROBE_TIMEOUT = 5.0
#: The largest AML_PROBE_TIMEOUT accepted; larger values are lowered to it.
MAX_PROBE_TIMEOUT = 3600.0
#: How long an isolated probe's interpreter may take to start and load its plugin.
ISOLATED_STARTUP_LIMIT = 30.0


class AMLConfigWarning(UserWarning):
    """An ``AML_*`` environment variable has a value aml cannot use (the default is
    used instead, or the value is ignored)."""


# -- environment --------------------------------------------------------------------------
@attrs.frozen
class Settings:
    """The registry's environment, parsed. Bad values never raise: they give a warning
    (``warnings``) and the default."""

    forced: str | None
    disabled: frozenset[str]
    timeout: float
    warnings: tuple[str, ...] = ()


def settings() -> Settings:
    """Read ``AML_BACKEND``, ``AML_DISABLE_BACKENDS`` and ``AML_PROBE_TIMEOUT``."""
    notes: list[str] = []
    raw = os.environ.get("AML_PROBE_TIMEOUT", "").strip()
    timeout = DEFAULT_PROBE_TIMEOUT
    if raw:
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            notes.append(
                f"AML_PROBE_TIMEOUT={raw!r} is not a positive, finite number of seconds; "
                f"using {DEFAULT_PROBE_TIMEOUT:g} s"
            )
        elif value > MAX_PROBE_TIMEOUT:
            notes.append(
                f"AML_PROBE_TIMEOUT={raw!r} is above {MAX_PROBE_TIMEOUT:g} s; using {MAX_PROBE_TIMEOUT:g} s"
            )
            timeout = MAX_PROBE_TIMEOUT
        else:
            timeout = value
    disabled = frozenset(
        p.strip() for p in os.environ.get("AML_DISABLE_BACKENDS", "").replace(",", " ").split() if p.strip()
    )
    forced = os.environ.get("AML_BACKEND", "").strip() or None
    return Settings(forced=forced, disabled=disabled, timeout=timeout, warnings=tuple(notes))


_warned: set[str] = set()


def _warn(notes: Iterable[str]) -> None:
    for note in notes:
        if note not in _warned:
            _warned.add(note)
            warnings.warn(note, AMLConfigWarning, stacklevel=4)


# -- what the registry holds ----------------------------------------------------------------
@attrs.frozen
class _Plugin:
    """One plugin: an entry point or an object given to :meth:`Registry.register`."""

    name: str
    distribution: str
    version: str
    obj: object | None
    error: str = ""
    state: str = "broken"
    #: (group, entry point name) for entry-point plugins: what an isolated probe loads.
    entry_point: tuple[str, str] | None = None

    def label(self) -> str:
        return f"{self.distribution}:{self.name}" if self.distribution else self.name


@attrs.frozen
class _Backend:
    desc: BackendDescriptor
    plugin: _Plugin
    shadowed_by: str | None = None


@attrs.frozen
class _Outcome:
    """A probe's result as the registry reads it: ``broken`` when the probe raised,
    hung, crashed or returned junk."""

    result: ProbeResult
    broken: bool = False


@attrs.frozen
class Choice:
    """Which backend ``area()`` would use for a request, and why the others were not."""

    backend: str | None
    rejected: tuple[tuple[str, str], ...]

    def explain(self) -> str:
        return "; ".join(f"{name}: {why}" for name, why in self.rejected) or "no backends installed"


class _ProbeJob:
    """One in-process probe in a daemon thread, with its deadline."""

    def __init__(self, desc: BackendDescriptor, timeout: float) -> None:
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self._done = threading.Event()
        self._outcome: _Outcome | None = None
        self._final: _Outcome | None = None
        self._desc = desc
        threading.Thread(target=self._run, name=f"aml-probe-{desc.name}", daemon=True).start()

    def _run(self) -> None:
        self._outcome = _probe_once(self._desc)
        self._done.set()

    def wait(self) -> _Outcome:
        """The outcome, waiting at most until the deadline; a probe past its deadline
        stays timed out for the life of the registry (its thread is abandoned)."""
        if self._final is None:
            if self._done.wait(max(0.0, self.deadline - time.monotonic())) and self._outcome is not None:
                self._final = self._outcome
            else:
                self._final = _Outcome(ProbeResult.unavailable(_timed_out(self.timeout)), broken=True)
        return self._final


def _timed_out(timeout: float) -> str:
    return f"probe timed out after {timeout:g} s"


class Registry:
    """Plugins, descriptors and probe results of one process (or one test).

    ``builtins=False`` leaves out aml-core's own entry points (the host backend).
    """

    def __init__(self, *, group: str = ENTRY_POINT_GROUP, builtins: bool = True) -> None:
        self.group = group
        self._builtins = builtins
        self._lock = threading.RLock()
        self._extra: list[_Plugin] = []
        self._loaded_for: frozenset[str] | None = None
        self._plugins: list[_Plugin] = []
        self._backends: dict[str, _Backend] = {}
        self._shadowed: list[_Backend] = []
        self._jobs: dict[str, _ProbeJob] = {}
        self._statuses: tuple[BackendStatus, ...] | None = None

    # -- plugins --------------------------------------------------------------------------
    def register(self, plugin: object, *, name: str, distribution: str = "", version: str = "") -> None:
        """Register a plugin object (a module, or any object with an ``@hookimpl``
        ``aml_backends`` method) under ``name``, through the same path an entry point
        takes. Clears cached probes. A second plugin of the same name is AMLValueError."""
        if not isinstance(name, str) or not name:
            raise AMLValueError(f"a plugin name must be a non-empty string, got {name!r}")
        with self._lock:
            if any(p.name == name for p in self._extra):
                raise AMLValueError(f"a plugin named {name!r} is already registered")
            self._extra.append(_Plugin(name, distribution, version, plugin, state="available"))
            self._invalidate()

    def unregister(self, name: str) -> None:
        """Remove a plugin given to :meth:`register` (AMLValueError if there is none)."""
        with self._lock:
            kept = [p for p in self._extra if p.name != name]
            if len(kept) == len(self._extra):
                known = ", ".join(p.name for p in self._extra) or "none"
                raise AMLValueError(f"no plugin named {name!r} was registered (registered: {known})")
            self._extra = kept
            self._invalidate()

    def _invalidate(self) -> None:
        self._loaded_for = None
        self._jobs = {}
        self._statuses = None

    def _entry_point_plugins(self, pm: pluggy.PluginManager) -> list[_Plugin]:
        plugins: list[_Plugin] = []
        seen: set[tuple[str, str]] = set()
        names: set[str] = set()
        eps = metadata.entry_points(group=self.group)
        for ep in sorted(eps, key=lambda e: (e.name, e.dist.name if e.dist else "")):
            dist = ep.dist.name if ep.dist is not None else ""
            version = ep.dist.version if ep.dist is not None else ""
            if not self._builtins and dist == CORE_DISTRIBUTION:
                continue
            if (dist, ep.name) in seen:  # the same distribution found twice on sys.path
                continue
            seen.add((dist, ep.name))
            # pluggy names plugins uniquely: a second distribution with the same entry
            # point name is registered as "name@distribution".
            name = ep.name if ep.name not in names else f"{ep.name}@{dist}"
            names.add(name)
            where = (self.group, ep.name)
            if pm.is_blocked(ep.name):
                plugins.append(
                    _Plugin(name, dist, version, None, "disabled by AML_DISABLE_BACKENDS", "disabled", where)
                )
                continue
            try:
                obj = ep.load()
            except BaseException as exc:  # a broken plugin must not break aml
                if isinstance(exc, KeyboardInterrupt):
                    raise
                plugins.append(
                    _Plugin(name, dist, version, None, f"import failed: {_describe(exc)}", "broken")
                )
                continue
            plugins.append(_Plugin(name, dist, version, obj, state="available", entry_point=where))
        return plugins

    def _load(self) -> Settings:
        cfg = settings()
        _warn(cfg.warnings)
        if self._loaded_for == cfg.disabled:
            return cfg
        pm = pluggy.PluginManager(hookspecs.PROJECT)
        pm.add_hookspecs(hookspecs)
        for name in sorted(cfg.disabled):
            pm.set_blocked(name)
        candidates = self._entry_point_plugins(pm)
        for extra in self._extra:
            if pm.is_blocked(extra.name):
                candidates.append(
                    attrs.evolve(extra, obj=None, error="disabled by AML_DISABLE_BACKENDS", state="disabled")
                )
            else:
                candidates.append(extra)
        plugins: list[_Plugin] = []
        declared: list[_Backend] = []
        for plugin in candidates:
            if plugin.obj is None:
                plugins.append(plugin)
                continue
            try:
                pm.register(plugin.obj, name=plugin.name)
            except Exception as exc:
                plugins.append(_broken(plugin, f"invalid plugin: {_describe(exc)}"))
                continue
            if not pm.get_hookcallers(plugin.obj):
                plugins.append(
                    _broken(plugin, "defines no aml_backends hook (decorate it with @aml_core.hookimpl)")
                )
                pm.unregister(plugin.obj)
                continue
            found = _call_hook(pm, plugin)
            if isinstance(found, str):
                plugins.append(_broken(plugin, found))
                continue
            plugins.append(plugin)
            declared.extend(_Backend(desc, plugin) for desc in found)
        self._plugins = plugins
        self._backends, self._shadowed = _resolve_duplicates(declared)
        self._jobs = {}
        self._statuses = None
        self._loaded_for = cfg.disabled
        return cfg

    # -- probing ----------------------------------------------------------------------------
    def _job(self, backend: _Backend, timeout: float) -> _ProbeJob:
        job = self._jobs.get(backend.desc.name)
        if job is None:
            job = self._jobs[backend.desc.name] = _ProbeJob(backend.desc, timeout)
        return job

    def statuses(self, *, isolated: bool = False) -> tuple[BackendStatus, ...]:
        """Every known backend, best first (cached after the first call).

        ``isolated=True`` (what ``aml info`` uses) probes each entry-point backend in a
        separate interpreter, so a probe that crashes the process or hangs in native
        code is reported instead of taking the caller down; it is not cached.
        Plugins given to :meth:`register` are probed in-process either way."""
        with self._lock:
            cfg = self._load()
            if self._statuses is not None and not isolated:
                return self._statuses
            active = [b for b in self._backends.values() if b.desc.name not in cfg.disabled]
            outcomes: dict[str, _Outcome] = {}
            if isolated:
                remote = [b for b in active if b.plugin.entry_point is not None]
                outcomes.update(_probe_isolated(remote, cfg.timeout))
            jobs = {b.desc.name: self._job(b, cfg.timeout) for b in active if b.desc.name not in outcomes}
            for name, job in jobs.items():
                outcomes[name] = job.wait()
            out = [_plugin_status(p) for p in self._plugins if p.obj is None or p.state != "available"]
            for b in self._backends.values():
                if b.desc.name in cfg.disabled:
                    out.append(_backend_status(b, None, "disabled", "disabled by AML_DISABLE_BACKENDS"))
                else:
                    out.append(_backend_status(b, outcomes[b.desc.name]))
            out.extend(
                _backend_status(b, None, "shadowed", f"shadowed by {b.shadowed_by}") for b in self._shadowed
            )
            out.sort(key=_rank_key)
            statuses = tuple(out)
            if not isolated:
                self._statuses = statuses
            return statuses

    def warnings(self) -> tuple[str, ...]:
        """What is wrong with the environment (bad values, unknown names), one line each."""
        with self._lock:
            cfg = self._load()
            notes = list(cfg.warnings)
            known = (
                set(self._backends) | {p.name for p in self._plugins} | {b.desc.name for b in self._shadowed}
            )
            if cfg.forced is not None and cfg.forced not in known:
                notes.append(
                    f"AML_BACKEND={cfg.forced!r} names no installed backend "
                    f"(installed: {', '.join(sorted(self._backends)) or 'none'}); aml_core.area() will fail"
                )
            if (
                self.group == ENTRY_POINT_GROUP
                and self._builtins
                and not any(p.distribution == CORE_DISTRIBUTION for p in self._plugins)
            ):
                notes.append(
                    "aml-core's entry points were not found, so there is no host backend: "
                    "install aml-core (pip install -e . in a checkout)"
                )
            unknown = sorted(cfg.disabled - known)
            if unknown:
                notes.append(f"AML_DISABLE_BACKENDS names unknown backends: {', '.join(unknown)}")
            return tuple(notes)

    def descriptor(self, name: str) -> BackendDescriptor:
        """The descriptor of a backend by name (AMLNotSupported if unknown)."""
        with self._lock:
            self._load()
            return self._backend(name).desc

    def _backend(self, name: str) -> _Backend:
        try:
            return self._backends[name]
        except KeyError:
            pass
        for plugin in self._plugins:
            if plugin.name == name and plugin.obj is None:
                raise AMLNotSupported(f"backend {name!r} is {plugin.state}: {plugin.error}")
        known = ", ".join(sorted(self._backends)) or "none"
        raise AMLNotSupported(f"unknown backend {name!r}; installed backends: {known}")

    def status(self, name: str) -> BackendStatus:
        """The status of one backend (AMLNotSupported if unknown)."""
        for st in self.statuses():
            if st.name == name and st.state != "shadowed":
                return st
        known = ", ".join(sorted(s.name for s in self.statuses())) or "none"
        raise AMLNotSupported(f"unknown backend {name!r}; installed backends: {known}")

    # -- selection ------------------------------------------------------------------------------
    def _plan(
        self, spec: AreaSpec, cfg: Settings
    ) -> tuple[list[_Backend], list[tuple[str, str]], str | None]:
        """The backends to probe for ``spec``, best first, and those rejected unprobed."""
        forced = spec.backend or cfg.forced
        if forced is not None:
            if forced in cfg.disabled:
                raise AMLNotSupported(f"backend {forced!r} is disabled by AML_DISABLE_BACKENDS")
            return [self._backend(forced)], [], forced
        ranked = sorted(self._backends.values(), key=lambda b: (-b.desc.priority, b.desc.name))
        candidates: list[_Backend] = []
        rejected: list[tuple[str, str]] = []
        for b in ranked:
            if b.desc.name in cfg.disabled:
                rejected.append((b.desc.name, "disabled by AML_DISABLE_BACKENDS"))
            elif spec.kind not in b.desc.kinds:
                rejected.append((b.desc.name, _kind_mismatch(spec.kind, b.desc.kinds)))
            else:
                candidates.append(b)
        return candidates, rejected, None

    def choose(
        self,
        kind: Kind | str,
        device: int | None = None,
        backend: str | None = None,
        *,
        statuses: Iterable[BackendStatus] | None = None,
    ) -> Choice:
        """Which backend :meth:`area` would try first for this request (no area is made).

        Probes as :meth:`area` does, unless ``statuses`` (from :meth:`statuses`) are
        given: then the choice is read from them and nothing is probed."""
        spec = AreaSpec(kind=as_kind(kind), device=device, backend=backend)
        if statuses is not None:
            return _choose_from(spec, tuple(statuses), spec.backend or settings().forced)
        with self._lock:
            cfg = self._load()
            candidates, rejected, _ = self._plan(spec, cfg)
            for b in candidates:
                why = _unfit(_backend_status(b, self._job(b, cfg.timeout).wait()), spec)
                if not why:
                    return Choice(b.desc.name, tuple(rejected))
                rejected.append((b.desc.name, why))
            return Choice(None, tuple(rejected))

    def area(self, spec: AreaSpec) -> Area:
        """Build an area for ``spec`` from the best available backend."""
        from .area import Area

        with self._lock:
            cfg = self._load()
            candidates, rejected, forced = self._plan(spec, cfg)
        first_error: BaseException | None = None
        for b in candidates:  # one at a time: a lower-ranked probe is not even started
            name = b.desc.name
            with self._lock:
                job = self._job(b, cfg.timeout)
            why = _unfit(_backend_status(b, job.wait()), spec)
            if why:
                rejected.append((name, why))
                continue
            try:
                made: object = b.desc.create_area(spec.kind, spec.device, **dict(spec.options))
            except AMLNotSupported as exc:
                rejected.append((name, str(exc)))
                continue
            except AMLError:
                raise  # aml's answer to this request (bad option, out of memory...): the caller's
            except Exception as exc:  # a bug in the plugin: contained, the next candidate tries
                first_error = first_error or exc
                rejected.append((name, f"create_area of plugin {b.plugin.label()} failed: {_describe(exc)}"))
                continue
            if not isinstance(made, Area):
                what = type(made).__name__
                rejected.append(
                    (name, f"create_area of plugin {b.plugin.label()} returned {what}, not an Area")
                )
                continue
            return made
        where = "" if spec.device is None else f" on device {spec.device}"
        via = f" (backend forced to {forced!r})" if forced else ""
        detail = "; ".join(f"{n}: {w}" for n, w in rejected) or "no backends installed"
        in_range = [w for _, w in rejected if w.startswith(_NO_DEVICE)]
        if in_range and first_error is None:
            # A backend that provides the kind is there, but not that device: the index is
            # outside the devices there are (for host memory, the NUMA nodes allowed): EDOM.
            raise AMLDomainError(
                f"device {spec.device} is outside the devices that provide {spec.kind.value} memory{via}: "
                + "; ".join(f"{n}: {w}" for n, w in rejected if w.startswith(_NO_DEVICE))
            )
        raise AMLNotSupported(
            f"no backend can provide {spec.kind.value} memory{where}{via}: {detail}"
        ) from first_error

    def reset(self) -> None:
        """Forget loaded plugins and probe results (for tests); registered plugins stay."""
        with self._lock:
            self._invalidate()
            self._plugins = []
            self._backends = {}
            self._shadowed = []


# -- helpers ------------------------------------------------------------------------------------
def _broken(plugin: _Plugin, error: str) -> _Plugin:
    return attrs.evolve(plugin, obj=None, error=error, state="broken")


def _call_hook(pm: pluggy.PluginManager, plugin: _Plugin) -> list[BackendDescriptor] | str:
    """The descriptors a plugin's hook returns, or why they could not be had."""
    impls = [i for i in pm.hook.aml_backends.get_hookimpls() if i.plugin_name == plugin.name]
    out: list[BackendDescriptor] = []
    for impl in impls:
        try:
            out.extend(_as_descriptors(impl.function()))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return f"aml_backends() failed: {_describe(exc)}"
    return out


def _resolve_duplicates(declared: list[_Backend]) -> tuple[dict[str, _Backend], list[_Backend]]:
    """The documented rule: for each name the highest priority wins, ties going to the
    distribution name, then the plugin name, alphabetically; the others are shadowed."""
    groups: dict[str, list[_Backend]] = {}
    for b in declared:
        groups.setdefault(b.desc.name, []).append(b)
    winners: dict[str, _Backend] = {}
    shadowed: list[_Backend] = []
    for name, group in groups.items():
        group.sort(key=lambda b: (-b.desc.priority, b.plugin.distribution, b.plugin.name))
        winner = group[0]
        winners[name] = winner
        label = f"{winner.plugin.label()} (priority {winner.desc.priority})"
        shadowed.extend(attrs.evolve(b, shadowed_by=label) for b in group[1:])
    return winners, shadowed


def _kind_mismatch(kind: Kind, kinds: frozenset[Kind]) -> str:
    provided = ", ".join(sorted(k.value for k in kinds)) or "nothing"
    return f"does not provide {kind.value} memory (provides {provided})"


def _unfit(st: BackendStatus, spec: AreaSpec) -> str:
    if not st.available:
        return f"{st.state} ({st.reason})" if st.state in ("unavailable", "broken") else st.reason
    if spec.kind not in st.kinds:
        return _kind_mismatch(spec.kind, st.kinds)
    if spec.device is not None and spec.device >= 0 and st.devices and spec.device >= len(st.devices):
        return f"{_NO_DEVICE} {spec.device} ({len(st.devices)} found)"
    return ""


_NO_DEVICE = "has no device"


def _rank_key(st: BackendStatus) -> tuple[int, int, str, str]:
    known = 0 if st.priority is not None else 1
    return (known, -(st.priority or 0), st.name, st.distribution)


def _choose_from(spec: AreaSpec, statuses: tuple[BackendStatus, ...], forced: str | None) -> Choice:
    active = [s for s in statuses if s.state != "shadowed"]
    if forced is not None:
        active = [s for s in active if s.name == forced]
        if not active:
            return Choice(None, ((forced, "not installed (forced by AML_BACKEND or backend=)"),))
    else:
        active = [s for s in active if s.priority is not None]
    rejected: list[tuple[str, str]] = []
    for st in active:
        why = _unfit(st, spec)
        if not why:
            return Choice(st.name, tuple(rejected))
        rejected.append((st.name, why))
    return Choice(None, tuple(rejected))


def _probe_once(desc: BackendDescriptor) -> _Outcome:
    """Run a probe and check what it returned."""
    try:
        found: object = desc.probe()
    except BaseException as exc:
        return _Outcome(ProbeResult.unavailable(f"probe failed: {_describe(exc)}"), broken=True)
    problem = _invalid_result(found)
    if problem:
        return _Outcome(ProbeResult.unavailable(f"probe returned an invalid result: {problem}"), broken=True)
    assert isinstance(found, ProbeResult)
    return _Outcome(found)


def _invalid_result(found: object) -> str:
    if not isinstance(found, ProbeResult):
        return f"{type(found).__name__}, not a ProbeResult"
    try:
        attrs.validate(found)
    except Exception as exc:
        return str(exc) or type(exc).__name__
    return ""


def _as_descriptors(result: object) -> list[BackendDescriptor]:
    if isinstance(result, BackendDescriptor):
        return [result]
    if not isinstance(result, Iterable) or isinstance(result, (str, bytes)):
        raise TypeError(f"aml_backends() must return BackendDescriptor objects, got {type(result).__name__}")
    out = list(result)
    for item in out:
        if not isinstance(item, BackendDescriptor):
            raise TypeError(f"aml_backends() returned a {type(item).__name__}, not a BackendDescriptor")
    return out


def _plugin_status(plugin: _Plugin) -> BackendStatus:
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


def _backend_status(
    b: _Backend, outcome: _Outcome | None, state: str = "", reason: str = ""
) -> BackendStatus:
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


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- isolated probes (aml info) ----------------------------------------------------------------
_CHILD = "import aml_core.registry as r; r._probe_child()"


def _result_to_json(result: ProbeResult) -> dict[str, object]:
    return {
        "available": result.available,
        "reason": result.reason,
        "detail": result.detail,
        "devices": [d.to_json() for d in result.devices],
        "capabilities": result.capabilities.names(),
        "versions": dict(result.versions),
    }


def _result_from_json(data: Mapping[str, Any]) -> ProbeResult:
    devices = tuple(
        DeviceInfo(
            index=d["index"],
            name=d["name"],
            total_memory=d["total_memory"],
            free_memory=d["free_memory"],
            capabilities=Capability.parse(d["capabilities"]),
            details=d["details"],
        )
        for d in data["devices"]
    )
    return ProbeResult(
        available=data["available"],
        reason=data["reason"],
        detail=data["detail"],
        devices=devices,
        capabilities=Capability.parse(data["capabilities"]),
        versions=data["versions"],
    )


def _probe_child() -> None:
    """The isolated probe: ``argv = [group, entry point, distribution, backend]``.
    Writes ``started`` and then one JSON line to the original stdout; whatever the
    plugin prints goes to stderr."""
    import resource

    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    group, ep_name, dist, backend = sys.argv[1:5]
    # A crashing probe is reported; it should not leave a core file in the user's directory.
    with contextlib.suppress(OSError, ValueError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))

    def answer(data: dict[str, object]) -> None:
        out.write(json.dumps(data, default=str) + "\n")
        out.flush()

    eps = [
        ep
        for ep in metadata.entry_points(group=group)
        if ep.name == ep_name and (ep.dist.name if ep.dist is not None else "") == dist
    ]
    if not eps:
        answer({"started": False, "broken": f"entry point {ep_name!r} of {dist} not found"})
        return
    try:
        plugin = _Plugin(ep_name, dist, "", eps[0].load(), state="available")
        pm = pluggy.PluginManager(hookspecs.PROJECT)
        pm.add_hookspecs(hookspecs)
        pm.register(plugin.obj, name=ep_name)
        found = _call_hook(pm, plugin)
    except Exception as exc:
        found = f"plugin failed in the probe process: {_describe(exc)}"
    if isinstance(found, str):
        answer({"started": False, "broken": found})
        return
    descs = [d for d in found if d.name == backend]
    if not descs:
        answer({"started": False, "broken": f"plugin no longer declares backend {backend!r}"})
        return
    answer({"started": True})
    outcome = _probe_once(descs[0])
    answer({"result": _result_to_json(outcome.result), "broken": outcome.broken})


def _probe_isolated(targets: list[_Backend], timeout: float) -> dict[str, _Outcome]:
    """Probe each backend in its own interpreter, all at once."""
    boxes: dict[str, list[_Outcome]] = {b.desc.name: [] for b in targets}
    threads = [
        threading.Thread(target=lambda b=b: boxes[b.desc.name].append(_run_child(b, timeout)), daemon=True)
        for b in targets
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {name: box[0] for name, box in boxes.items()}


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    path = [p if p else os.getcwd() for p in sys.path if isinstance(p, str)]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def _run_child(b: _Backend, timeout: float) -> _Outcome:
    assert b.plugin.entry_point is not None
    group, ep_name = b.plugin.entry_point
    # -P: the child's import path is the parent's (PYTHONPATH, from _child_env) and never the
    # current directory, where a source tree of aml_core would shadow the installed one.
    cmd = [sys.executable, "-P", "-c", _CHILD, group, ep_name, b.plugin.distribution, b.desc.name]
    try:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env()
        )
    except OSError as exc:
        return _Outcome(ProbeResult.unavailable(f"cannot start the probe process: {exc}"), broken=True)
    assert proc.stdout is not None
    assert proc.stderr is not None
    chunks: dict[int, bytearray] = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    out, err = chunks[proc.stdout.fileno()], chunks[proc.stderr.fileno()]
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    started: float | None = None
    end = time.monotonic() + ISOLATED_STARTUP_LIMIT
    late = ""
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= end:
                late = (
                    _timed_out(timeout)
                    if started is not None
                    else (f"the probe process did not start within {ISOLATED_STARTUP_LIMIT:g} s")
                )
                break
            for key, _ in sel.select(end - now):
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                chunks[key.fd] += data
            if started is None and b'"started": true' in out:
                started = time.monotonic()
                end = started + timeout
    finally:
        sel.close()
        if late:
            proc.kill()
        rc = proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    if late:
        return _Outcome(ProbeResult.unavailable(late), broken=True)
    return _parse_child(bytes(out), bytes(err), rc)


def _parse_child(out: bytes, err: bytes, rc: int) -> _Outcome:
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
        return _Outcome(ProbeResult.unavailable(f"probe crashed ({sig})"), broken=True)
    if "result" in last:
        try:
            return _Outcome(_result_from_json(last["result"]), broken=bool(last.get("broken")))
        except Exception as exc:
            return _Outcome(
                ProbeResult.unavailable(f"unreadable probe answer: {_describe(exc)}"), broken=True
            )
    if isinstance(last.get("broken"), str):
        return _Outcome(ProbeResult.unavailable(last["broken"]), broken=True)
    tail = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
    why = f": {tail[-1].strip()}" if tail else ""
    return _Outcome(ProbeResult.unavailable(f"probe process exited with status {rc}{why}"), broken=True)


# -- the process-wide registry -----------------------------------------------------------------
_default: Registry | None = None
_default_lock = threading.Lock()


def default_registry() -> Registry:
    """The process-wide registry."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Registry()
        return _default


def reset() -> None:
    """Clear the process-wide registry's cache (entry points are reloaded and
    backends re-probed on next use)."""
    default_registry().reset()


def register(plugin: object, *, name: str, distribution: str = "", version: str = "") -> None:
    """Register an in-process plugin with the process-wide registry: a module or an
    object with an ``@aml_core.hookimpl`` ``aml_backends`` method, under ``name``. It
    goes through the same path as an entry point (pluggy, duplicate rule,
    ``AML_DISABLE_BACKENDS``); its probe runs in-process, also under ``aml info``."""
    default_registry().register(plugin, name=name, distribution=distribution, version=version)


def unregister(name: str) -> None:
    """Remove a plugin given to :func:`register`."""
    default_registry().unregister(name)


def backends() -> tuple[BackendStatus, ...]:
    """The status of every known backend, best first: name, state, distribution and
    version, priority, available, reason or detail, devices, capabilities, versions.
    Probes every backend (in-process)."""
    return default_registry().statuses()


def descriptor(name: str) -> BackendDescriptor:
    return default_registry().descriptor(name)


def choose(kind: Kind | str = Kind.DEVICE, device: int | None = None, backend: str | None = None) -> Choice:
    """Which backend :func:`area` would pick for this request, and why not the others."""
    return default_registry().choose(kind, device, backend)


#: The kinds of memory by name, as ``aml_core.area(kind=...)`` takes them.
KindName = Literal["device", "host", "managed", "mapped"]


@overload
def area(
    kind: Kind | KindName = Kind.DEVICE,
    device: int | None = None,
    *,
    backend: Literal["host"],
    **options: Any,
) -> HostArea: ...
@overload
def area(
    kind: Kind | KindName = Kind.DEVICE,
    device: int | None = None,
    backend: str | None = None,
    **options: Any,
) -> Area: ...
def area(
    kind: Kind | KindName = Kind.DEVICE,
    device: int | None = None,
    backend: str | None = None,
    **options: Any,
) -> Area:
    """An area of ``kind`` memory from the best available backend.

    Typed for ``mypy --strict`` user code: ``kind`` is a :class:`~aml_core.specs.Kind` or
    one of its names (a misspelt name is a type error), the result is an
    :class:`~aml_core.area.Area` (``backend="host"``: a
    :class:`~aml_core.host.HostArea`, whose ``mmap`` options are typed).

    ``device`` picks a device index (None: the backend's default); ``backend``
    forces one by name (as ``AML_BACKEND`` does) and only that backend is probed;
    other keyword arguments are passed to the backend's area factory. Raises
    :class:`~aml_core.errors.AMLNotSupported` listing every candidate with the
    reason it could not serve the request.
    """
    spec = AreaSpec(kind=kind, device=device, backend=backend, options=options)
    return default_registry().area(spec)
