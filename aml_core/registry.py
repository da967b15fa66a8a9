"""The registry: finds backend plugins, probes them, ranks them and explains itself.

* Entry points of the group ``aml.backends`` are loaded once per process (cached;
  :func:`reset` clears the cache). A plugin that fails to import, whose hook raises,
  or whose probe raises or runs past the probe time is reported as unavailable with
  the error; it never stops the others.
* Probes run concurrently, each in a daemon thread, bounded by ``AML_PROBE_TIMEOUT``
  seconds (default 5).
* ``AML_BACKEND=name`` forces a backend (an unavailable one fails with its reason);
  ``AML_DISABLE_BACKENDS=a,b`` blocks some.
* Backends are ranked by priority (higher first), ties broken by name, so the choice
  is deterministic.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from importlib import import_module, metadata
from types import ModuleType
from typing import TYPE_CHECKING, Any

import attrs
import pluggy

from . import hookspecs
from .descriptor import BackendDescriptor, ProbeResult
from .errors import AMLNotSupported, AMLValueError
from .specs import AreaSpec, BackendStatus, Capability, Kind, as_kind

if TYPE_CHECKING:
    from .area import Area

__all__ = [
    "ENTRY_POINT_GROUP",
    "Choice",
    "Registry",
    "area",
    "backends",
    "choose",
    "default_registry",
    "descriptor",
    "reset",
]

ENTRY_POINT_GROUP = "aml.backends"
_BUILTIN = ("host", "aml_core.host.plugin")
DEFAULT_PROBE_TIMEOUT = 5.0


@attrs.frozen
class _Plugin:
    name: str
    distribution: str
    version: str
    module: ModuleType | None
    error: str = ""


@attrs.frozen
class Choice:
    """Which backend ``area()`` would use for a request, and why the others were not."""

    backend: str | None
    rejected: tuple[tuple[str, str], ...]

    def explain(self) -> str:
        return "; ".join(f"{name}: {why}" for name, why in self.rejected) or "no backends installed"


def _probe_timeout() -> float:
    raw = os.environ.get("AML_PROBE_TIMEOUT", "")
    if not raw:
        return DEFAULT_PROBE_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise AMLValueError(f"AML_PROBE_TIMEOUT must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise AMLValueError(f"AML_PROBE_TIMEOUT must be > 0, got {raw!r}")
    return value


def _disabled() -> frozenset[str]:
    raw = os.environ.get("AML_DISABLE_BACKENDS", "")
    return frozenset(p.strip() for p in raw.replace(",", " ").split() if p.strip())


def _forced() -> str | None:
    raw = os.environ.get("AML_BACKEND", "").strip()
    return raw or None


class Registry:
    """Plugins, descriptors and probe results of one process (or one test)."""

    def __init__(self, *, group: str = ENTRY_POINT_GROUP, builtins: bool = True) -> None:
        self.group = group
        self._builtins = builtins
        self._lock = threading.RLock()
        self._plugins: list[_Plugin] | None = None
        self._descriptors: dict[str, tuple[BackendDescriptor, _Plugin]] = {}
        self._broken: list[BackendStatus] = []
        self._statuses: tuple[BackendStatus, ...] | None = None
        self._extra: list[tuple[ModuleType | object, str, str, str]] = []

    # -- loading ----------------------------------------------------------------------
    def register(self, plugin: object, *, name: str, distribution: str = "", version: str = "") -> None:
        """Register a plugin object (a module or any object with ``aml_backends``)
        by hand, as an entry point would. Clears cached probes."""
        with self._lock:
            self._extra.append((plugin, name, distribution, version))
            self._plugins = None
            self._statuses = None

    def _entry_points(self) -> list[_Plugin]:
        plugins: list[_Plugin] = []
        seen: set[str] = set()
        for ep in sorted(metadata.entry_points(group=self.group), key=lambda e: e.name):
            dist = ep.dist.name if ep.dist is not None else "?"
            version = ep.dist.version if ep.dist is not None else "?"
            key = f"{dist}:{ep.name}"
            if key in seen:  # the same distribution found twice on sys.path
                continue
            seen.add(key)
            try:
                module = ep.load()
            except BaseException as exc:  # a broken plugin must not break aml
                if isinstance(exc, KeyboardInterrupt):
                    raise
                plugins.append(_Plugin(ep.name, dist, version, None, f"import failed: {_describe(exc)}"))
                continue
            plugins.append(_Plugin(ep.name, dist, version, module))
        if self._builtins and not any(p.name == _BUILTIN[0] for p in plugins):
            # Running from a source tree without installed metadata: register the
            # built-in host backend through the same hook anyway.
            plugins.insert(
                0,
                _Plugin(_BUILTIN[0], "aml-core (not installed)", _core_version(), import_module(_BUILTIN[1])),
            )
        for plugin, name, dist, version in self._extra:
            plugins.append(_Plugin(name, dist or "(registered)", version or "?", plugin))  # type: ignore[arg-type]
        return plugins

    def _load(self) -> None:
        if self._plugins is not None:
            return
        plugins = self._entry_points()
        pm = pluggy.PluginManager(hookspecs.PROJECT)
        pm.add_hookspecs(hookspecs)
        descriptors: dict[str, tuple[BackendDescriptor, _Plugin]] = {}
        broken: list[BackendStatus] = []
        for plugin in plugins:
            if plugin.module is None:
                broken.append(_broken_status(plugin, plugin.error))
                continue
            try:
                pm.register(plugin.module, name=f"{plugin.distribution}:{plugin.name}")
            except Exception as exc:
                broken.append(_broken_status(plugin, f"invalid plugin: {_describe(exc)}"))
                continue
        for impl in pm.hook.aml_backends.get_hookimpls():
            plugin = next(p for p in plugins if f"{p.distribution}:{p.name}" == impl.plugin_name)
            try:
                result = impl.function()
                found = _as_descriptors(result)
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                broken.append(_broken_status(plugin, f"aml_backends() failed: {_describe(exc)}"))
                continue
            for desc in found:
                if desc.name in descriptors:
                    other = descriptors[desc.name][1]
                    broken.append(
                        _broken_status(
                            plugin,
                            f"duplicate backend name {desc.name!r}, already provided by {other.distribution}",
                            name=desc.name,
                        )
                    )
                    continue
                descriptors[desc.name] = (desc, plugin)
        self._plugins = plugins
        self._descriptors = descriptors
        self._broken = broken

    # -- probing ---------------------------------------------------------------------------
    def statuses(self) -> tuple[BackendStatus, ...]:
        """Every known backend, best first (cached after the first call)."""
        with self._lock:
            if self._statuses is None:
                self._load()
                self._statuses = self._probe_all()
            return self._statuses

    def _probe_all(self) -> tuple[BackendStatus, ...]:
        timeout = _probe_timeout()
        disabled = _disabled()
        boxes: dict[str, list[Any]] = {}
        threads: dict[str, threading.Thread] = {}
        for name, (desc, _plugin) in self._descriptors.items():
            if name in disabled:
                continue
            box: list[Any] = []
            boxes[name] = box
            thread = threading.Thread(
                target=_run_probe, args=(desc, box), name=f"aml-probe-{name}", daemon=True
            )
            threads[name] = thread
            thread.start()
        deadline = time.monotonic() + timeout
        for thread in threads.values():
            thread.join(max(0.0, deadline - time.monotonic()))
        out: list[BackendStatus] = list(self._broken)
        for name, (desc, plugin) in self._descriptors.items():
            if name in disabled:
                result = ProbeResult.unavailable("disabled by AML_DISABLE_BACKENDS")
            elif not boxes[name]:
                result = ProbeResult.unavailable(f"probe did not finish within {timeout:g} s")
            else:
                result = boxes[name][0]
            out.append(
                BackendStatus(
                    name=name,
                    distribution=plugin.distribution,
                    version=plugin.version,
                    priority=desc.priority,
                    available=result.available,
                    reason=result.reason or ("available" if result.available else "unavailable"),
                    kinds=desc.kinds,
                    devices=result.devices,
                    capabilities=desc.capabilities | result.capabilities,
                    description=desc.description,
                )
            )
        out.sort(key=lambda s: (-s.priority, s.name))
        return tuple(out)

    def descriptor(self, name: str) -> BackendDescriptor:
        """The descriptor of a backend by name (AMLNotSupported if unknown)."""
        with self._lock:
            self._load()
            try:
                return self._descriptors[name][0]
            except KeyError:
                known = ", ".join(sorted(self._descriptors)) or "none"
                raise AMLNotSupported(f"unknown backend {name!r}; installed backends: {known}") from None

    def status(self, name: str) -> BackendStatus:
        """The status of one backend (AMLNotSupported if unknown)."""
        for st in self.statuses():
            if st.name == name:
                return st
        known = ", ".join(sorted(s.name for s in self.statuses())) or "none"
        raise AMLNotSupported(f"unknown backend {name!r}; installed backends: {known}")

    # -- selection ----------------------------------------------------------------------------
    def choose(self, kind: Kind | str, device: int | None = None, backend: str | None = None) -> Choice:
        """Which backend :meth:`area` would try first for this request (no area is made)."""
        spec = AreaSpec(kind=as_kind(kind), device=device, backend=backend)
        candidates, rejected = self._candidates(spec)
        return Choice(candidates[0].name if candidates else None, tuple(rejected))

    def _candidates(self, spec: AreaSpec) -> tuple[list[BackendStatus], list[tuple[str, str]]]:
        forced = spec.backend or _forced()
        statuses = self.statuses()
        if forced is not None:
            known = [s for s in statuses if s.name == forced]
            if not known:
                self.descriptor(forced)  # raises: unknown backend
            statuses = tuple(known)
        ok: list[BackendStatus] = []
        rejected: list[tuple[str, str]] = []
        for st in statuses:
            why = _unfit(st, spec)
            if why:
                rejected.append((st.name, why))
            else:
                ok.append(st)
        return ok, rejected

    def area(self, spec: AreaSpec) -> Area:
        """Build an area for ``spec`` from the best available backend."""
        candidates, rejected = self._candidates(spec)
        for st in candidates:
            desc = self.descriptor(st.name)
            try:
                return desc.create_area(spec.kind, spec.device, **dict(spec.options))
            except AMLNotSupported as exc:
                rejected.append((st.name, str(exc)))
        where = "" if spec.device is None else f" on device {spec.device}"
        forced = spec.backend or _forced()
        via = f" (backend forced to {forced!r})" if forced else ""
        detail = "; ".join(f"{n}: {w}" for n, w in rejected) or "no backends installed"
        raise AMLNotSupported(f"no backend can provide {spec.kind.value} memory{where}{via}: {detail}")

    def reset(self) -> None:
        """Forget loaded plugins and probe results (for tests)."""
        with self._lock:
            self._plugins = None
            self._statuses = None
            self._descriptors = {}
            self._broken = []


def _unfit(st: BackendStatus, spec: AreaSpec) -> str:
    if not st.available:
        return f"unavailable ({st.reason})"
    if spec.kind not in st.kinds:
        provided = ", ".join(sorted(k.value for k in st.kinds)) or "nothing"
        return f"does not provide {spec.kind.value} memory (provides {provided})"
    if spec.device is not None and spec.device >= 0 and st.devices and spec.device >= len(st.devices):
        return f"has no device {spec.device} ({len(st.devices)} found)"
    return ""


def _run_probe(desc: BackendDescriptor, box: list[Any]) -> None:
    try:
        found: object = desc.probe()
        if isinstance(found, ProbeResult):
            result = found
        else:
            result = ProbeResult.unavailable(f"probe returned {type(found).__name__}, not ProbeResult")
    except BaseException as exc:
        result = ProbeResult.unavailable(f"probe failed: {_describe(exc)}")
    box.append(result)


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


def _broken_status(plugin: _Plugin, reason: str, *, name: str | None = None) -> BackendStatus:
    return BackendStatus(
        name=name or plugin.name,
        distribution=plugin.distribution,
        version=plugin.version,
        priority=0,
        available=False,
        reason=reason,
        capabilities=Capability.NONE,
    )


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _core_version() -> str:
    try:
        return metadata.version("aml-core")
    except metadata.PackageNotFoundError:
        return "?"


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


def backends() -> tuple[BackendStatus, ...]:
    """The status of every known backend, best first: name, distribution and
    version, priority, available, reason, devices, capabilities."""
    return default_registry().statuses()


def descriptor(name: str) -> BackendDescriptor:
    return default_registry().descriptor(name)


def choose(kind: Kind | str = Kind.DEVICE, device: int | None = None, backend: str | None = None) -> Choice:
    """Which backend :func:`area` would pick for this request, and why not the others."""
    return default_registry().choose(kind, device, backend)


def area(
    kind: Kind | str = Kind.DEVICE,
    device: int | None = None,
    backend: str | None = None,
    **options: Any,
) -> Area:
    """An area of ``kind`` memory from the best available backend.

    ``device`` picks a device index (None: the backend's default); ``backend``
    forces one by name (as ``AML_BACKEND`` does); other keyword arguments are
    passed to the backend's area factory. Raises
    :class:`~aml_core.errors.AMLNotSupported` listing every candidate with the
    reason it could not serve the request.
    """
    spec = AreaSpec(kind=kind, device=device, backend=backend, options=options)
    return default_registry().area(spec)
