"""The :class:`Registry`: plugins (through one long-lived pluggy manager), their
backends, probe results and the choice of a backend for a request."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..descriptor import BackendDescriptor
from ..errors import AMLDomainError, AMLError, AMLNotSupported, AMLTypeError, AMLValueError
from ..specs import AreaSpec, BackendStatus, Kind, as_kind
from .config import CORE_DISTRIBUTION, ENTRY_POINT_GROUP, Settings, settings, warn
from .isolation import TimeLimit, probe_isolated, run_child
from .manager import DISABLED, Plugin, PluginManager, describe
from .probes import Outcome, ProbeJob, backend_status, plugin_status
from .ranking import (
    NO_DEVICE,
    Backend,
    Choice,
    choose_from,
    kind_mismatch,
    options_unhonoured,
    rank_key,
    resolve_duplicates,
    unfit,
    unknown_options,
)
from .trust import ProbeTrust

if TYPE_CHECKING:
    from ..area import Area

__all__ = ["Registry"]


class Registry:
    """Plugins, descriptors and probe results of one process (or one test).

    ``builtins=False`` leaves out aml-core's own entry points (the host backend).
    :attr:`pm` is the registry's pluggy ``PluginManager`` for its whole life: use its
    tracing (``pm.trace.root.setwriter(print); pm.enable_tracing()``) or
    ``add_hookcall_monitoring`` to watch the hook calls.
    """

    def __init__(self, *, group: str = ENTRY_POINT_GROUP, builtins: bool = True) -> None:
        self.group = group
        self._builtins = builtins
        self.pm = PluginManager()
        self._lock = threading.RLock()
        self._extra: list[Plugin] = []
        self._loaded_for: frozenset[str] | None = None
        self._plugins: list[Plugin] = []
        self._backends: dict[str, Backend] = {}
        self._shadowed: list[Backend] = []
        self._jobs: dict[str, ProbeJob] = {}
        self._statuses: tuple[BackendStatus, ...] | None = None
        self._trust = ProbeTrust()

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
            self._extra.append(Plugin(name, distribution, version, plugin, state="available"))
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

    def _load(self) -> Settings:
        cfg = settings()
        warn(cfg.warnings)
        if self._loaded_for == cfg.disabled:
            return cfg
        pm = self.pm
        pm.clear()
        pm.block_only(cfg.disabled)
        candidates = pm.load_entry_points(self.group, skip=None if self._builtins else CORE_DISTRIBUTION)
        candidates.extend(pm.add(extra) for extra in self._extra)
        plugins: list[Plugin] = []
        declared: list[Backend] = []
        for candidate in candidates:
            found = pm.backends_of(candidate) if candidate.obj is not None else candidate.error
            plugin = (
                candidate.broken(found) if candidate.obj is not None and isinstance(found, str) else candidate
            )
            plugins.append(plugin)
            if not isinstance(found, str):
                declared.extend(Backend(desc, plugin) for desc in found)
        self._plugins = plugins
        self._backends, self._shadowed = resolve_duplicates(declared)
        self._jobs = {}
        self._statuses = None
        self._loaded_for = cfg.disabled
        return cfg

    # -- probing ----------------------------------------------------------------------------
    def _job(self, backend: Backend, timeout: float) -> ProbeJob:
        job = self._jobs.get(backend.desc.name)
        if job is None:
            first = None if self._trusted(backend) else (lambda: self._check_isolated(backend, timeout))
            job = self._jobs[backend.desc.name] = ProbeJob(backend.desc, timeout, first)
        return job

    def _trusted(self, b: Backend) -> bool:
        """Whether ``b``'s probe may run in this process without an isolated check first:
        aml-core's and in-process plugins', and those seen to finish (:mod:`.trust`)."""
        return not b.plugin.third_party or self._trust.trusted(b.plugin, b.desc.name)

    def _check_isolated(self, b: Backend, timeout: float) -> Outcome | None:
        """The isolated check: None when the probe finished there (it then runs here),
        else the isolated outcome (crashed, timed out...), which is the answer."""
        outcome = run_child(b, timeout)
        self._trust.record(b.plugin, b.desc.name, outcome)
        return None if outcome.finished else outcome

    def statuses(self, *, isolated: bool = False) -> tuple[BackendStatus, ...]:
        """Every known backend, best first (cached after the first call): available
        backends first, then by priority (higher first), then by name.

        ``isolated=True`` (what ``aml info`` uses) probes each third-party entry-point
        backend (not aml-core's host backend) in a separate process, so a probe that
        crashes the process or hangs in native code is reported instead of taking the
        caller down; it is not cached. At most
        :func:`~.config.isolated_parallelism` run at once, in rank order, all within
        ``AML_INFO_TIMEOUT`` seconds (default 60): a probe the limit stopped or kept from
        starting is ``unavailable``, saying so. Plugins given to :meth:`register` are
        probed in-process either way."""
        with self._lock:
            cfg = self._load()
            if self._statuses is not None and not isolated:
                return self._statuses
            active = [b for b in self._backends.values() if b.desc.name not in cfg.disabled]
            outcomes: dict[str, Outcome] = {}
            # aml-core's own backend (host) is probed here, as backends() does: it never
            # needs a process of its own (issue 29: aml info on a slow machine). Its job
            # starts first, so it runs while the isolated probes do.
            remote = [b for b in active if isolated and b.plugin.third_party]
            isolated_names = {b.desc.name for b in remote}
            jobs = {
                b.desc.name: self._job(b, cfg.timeout) for b in active if b.desc.name not in isolated_names
            }
            if remote:
                outcomes.update(
                    probe_isolated(
                        remote,
                        cfg.timeout,
                        TimeLimit.start(cfg.info_timeout, bounds_startup=cfg.info_timeout_given),
                    )
                )
                for b in remote:
                    self._trust.record(b.plugin, b.desc.name, outcomes[b.desc.name])
            for name, job in jobs.items():
                outcomes[name] = job.wait()
            out = [plugin_status(p) for p in self._plugins if p.obj is None or p.state != "available"]
            for b in self._backends.values():
                if b.desc.name in cfg.disabled:
                    out.append(backend_status(b, None, "disabled", DISABLED))
                else:
                    out.append(backend_status(b, outcomes[b.desc.name]))
            out.extend(
                backend_status(b, None, "shadowed", f"shadowed by {b.shadowed_by}") for b in self._shadowed
            )
            out.sort(key=rank_key)
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

    def notes(self) -> tuple[str, ...]:
        """What was ignored and why, for ``aml info --verbose``: a probe cache that fails
        the trust rules (:mod:`.trust`; a FIFO, a device, a huge file, one of another
        user or writable by others), one line each. Reads the cache (bounded)."""
        return self._trust.check()

    def descriptor(self, name: str) -> BackendDescriptor:
        """The descriptor of a backend by name (AMLNotSupported if unknown)."""
        with self._lock:
            self._load()
            return self._backend(name).desc

    def plugin_of(self, name: str) -> tuple[str, str] | None:
        """The plugin and the distribution that declare backend ``name``
        (``("cuda", "aml-cuda")``), or None if no plugin declares it; AMLNotSupported,
        saying why, for a plugin of that name that failed. Probes nothing."""
        with self._lock:
            self._load()
            try:
                b = self._backend(name)
            except AMLNotSupported:
                if any(p.name == name for p in self._plugins):
                    raise
                return None
            return (b.plugin.name, b.plugin.distribution)

    def _backend(self, name: str) -> Backend:
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
    def _plan(self, spec: AreaSpec, cfg: Settings) -> tuple[list[Backend], list[tuple[str, str]], str | None]:
        """The backends to probe for ``spec``, best first, and those rejected unprobed."""
        forced = spec.backend or cfg.forced
        if forced is not None:
            if forced in cfg.disabled:
                raise AMLNotSupported(f"backend {forced!r} is disabled by AML_DISABLE_BACKENDS")
            return [self._backend(forced)], [], forced
        ranked = sorted(self._backends.values(), key=lambda b: (-b.desc.priority, b.desc.name))
        candidates: list[Backend] = []
        rejected: list[tuple[str, str]] = []
        for b in ranked:
            if b.desc.name in cfg.disabled:
                rejected.append((b.desc.name, DISABLED))
            elif spec.kind not in b.desc.kinds:
                rejected.append((b.desc.name, kind_mismatch(spec.kind, b.desc.kinds)))
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
            return choose_from(spec, tuple(statuses), spec.backend or settings().forced)
        with self._lock:
            cfg = self._load()
            candidates, rejected, _ = self._plan(spec, cfg)
            for b in candidates:
                why = unfit(backend_status(b, self._job(b, cfg.timeout).wait()), spec)
                if not why:
                    return Choice(b.desc.name, tuple(rejected))
                rejected.append((b.desc.name, why))
            return Choice(None, tuple(rejected))

    def area(self, spec: AreaSpec) -> Area:
        """Build an area for ``spec`` from the best available backend."""
        from ..area import Area

        with self._lock:
            cfg = self._load()
            candidates, rejected, forced = self._plan(spec, cfg)
        # each candidate's options it declares it does not honour (() where it takes them all)
        missing_of = [b.desc.unhonoured(spec.kind, spec.options) for b in candidates]
        if candidates and all(missing_of):
            # the caller's mistake: nothing probed
            raise AMLTypeError(unknown_options(spec, candidates, missing_of))
        first_error: BaseException | None = None
        # one at a time: a lower-ranked probe is not even started
        for b, missing in zip(candidates, missing_of, strict=True):
            name = b.desc.name
            if missing:  # declared: it does not take these options, so it is not probed
                rejected.append((name, options_unhonoured(missing, spec.kind)))
                continue
            with self._lock:
                job = self._job(b, cfg.timeout)
            why = unfit(backend_status(b, job.wait()), spec)
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
                rejected.append((name, f"create_area of plugin {b.plugin.label()} failed: {describe(exc)}"))
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
        in_range = [w for _, w in rejected if w.startswith(NO_DEVICE)]
        if in_range and first_error is None:
            # A backend that provides the kind is there, but not that device: the index is
            # outside the devices there are (for host memory, the NUMA nodes allowed): EDOM.
            raise AMLDomainError(
                f"device {spec.device} is outside the devices that provide {spec.kind.value} memory{via}: "
                + "; ".join(f"{n}: {w}" for n, w in rejected if w.startswith(NO_DEVICE))
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
