"""The registry: finds backend plugins, probes them, ranks them and explains itself.

Rules (docs/user-guide.md, "Backends and the registry", is the user-facing version):

* **Plugins.** Entry points of the group ``aml.backends`` (the built-in host backend
  is aml-core's own entry point ``host``; there is no other way it is registered) and
  plugin objects given to :func:`register` go through the same path: each is
  registered under its name with the registry's one, long-lived
  :class:`PluginManager` (pluggy's; entry points loaded with pluggy's
  ``load_setuptools_entrypoints``), and its ``aml_backends`` hook is called through
  ``pm.hook``, one plugin at a time (``subset_hook_caller``), so pluggy's tracing and
  hook wrappers apply. Loaded once per process (cached; :func:`reset` clears the
  cache). A plugin that fails to import, defines no hook, whose hook raises or returns
  junk is reported as ``broken`` with the error; it never stops the others.
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
* **Isolation.** ``aml info`` (``statuses(isolated=True)``) runs each third-party
  entry-point backend's probe in its own process (:mod:`.isolation`; a fork of the warm
  copy of itself that ``aml info`` forks before loading plugins, :mod:`.forkserver`,
  else a fresh interpreter), so a native
  crash or hang in a probe is reported ("probe crashed (signal 11: SIGSEGV)", "probe
  timed out after 5 s") instead of taking the command down; aml-core's own host backend
  is probed in-process. A probe process that has not started its probe within its
  budget (:func:`.config.startup_limit`, scaled with the load, or all of
  ``AML_INFO_TIMEOUT`` when the user sets it) is "probe slow",
  ``unavailable``, never ``broken``. At most :func:`.config.isolated_parallelism`
  such processes run at once, in rank order, and all of them within ``AML_INFO_TIMEOUT``
  seconds (default 60): a probe the limit stopped, or kept from starting, makes its
  backend ``unavailable`` with "probe stopped: ..." / "not probed: aml info's time limit
  of 60 s (AML_INFO_TIMEOUT) ran out". In-process, the probe of an entry-point
  plugin (other than aml-core's) not yet seen to finish in this Python, at this
  distribution version, runs isolated first; only once it finished there does it run
  in-process (:mod:`.trust` remembers it across processes).
* **Ranking.** :func:`backends`: available first, then priority (higher first), then
  name. :func:`area` tries backends by priority, then name: deterministic.
* **Options.** A backend whose descriptor declares the area options it honours
  (``BackendDescriptor.area_options``, for every kind or kind by kind) is a candidate
  only for a request whose options it honours all: otherwise it is passed over
  ("does not honour the area option(s) [...]"), unprobed, and the next candidate is
  tried (``aml_core.area(kind="host", memspace=...)`` reaches the host backend past a
  GPU backend's pinned host memory). Options that no candidate honours are
  :class:`~aml_core.errors.AMLTypeError`, before any probe. A backend that declares
  nothing gets every option and its factory refuses those it does not know.
* **Factories.** A ``create_area`` that raises :class:`AMLNotSupported` lets the next
  candidate try. Another :class:`~aml_core.errors.AMLError` (a bad option, an
  out-of-range device, no memory) is the answer to the request and reaches the caller
  as it is. Any other exception (a bug in the plugin), or a return value that is not
  an :class:`~aml_core.area.Area`, is reported with the plugin's name and the next
  candidate is tried. When none succeeds, the AMLNotSupported lists each backend's
  failure (and is chained to the first plugin exception).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Literal, overload

from ..descriptor import BackendDescriptor
from ..specs import AreaSpec, BackendStatus, Kind
from .config import (
    CORE_DISTRIBUTION,
    DEFAULT_INFO_TIMEOUT,
    DEFAULT_PROBE_TIMEOUT,
    ENTRY_POINT_GROUP,
    ISOLATED_STARTUP_LIMIT,
    MAX_PROBE_TIMEOUT,
    AMLConfigWarning,
    Settings,
    settings,
)
from .core import Registry
from .manager import PluginManager
from .ranking import Choice

if TYPE_CHECKING:
    from ..area import Area
    from ..host.area import HostArea

__all__ = [
    "AMLConfigWarning",
    "CORE_DISTRIBUTION",
    "DEFAULT_INFO_TIMEOUT",
    "DEFAULT_PROBE_TIMEOUT",
    "ENTRY_POINT_GROUP",
    "ISOLATED_STARTUP_LIMIT",
    "MAX_PROBE_TIMEOUT",
    "Choice",
    "PluginManager",
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
    """The status of every known backend, best first (available first, then by priority,
    then by name): name, state, distribution and version, priority, available, reason or
    detail, devices, capabilities, versions. Probes every backend (in-process; an
    entry-point probe not yet seen to finish runs isolated first, see :mod:`.trust`)."""
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
