"""aml's pluggy plugin manager: one per :class:`~aml_core.registry.Registry`, for its
whole life.

Entry points are loaded with pluggy's own loader (``load_setuptools_entrypoints``, one
name at a time, so that a plugin failing to import is reported and never stops the
others); ``AML_DISABLE_BACKENDS`` is pluggy's blocking (``set_blocked``); each plugin's
``aml_backends`` hook is called through ``pm.hook`` with pluggy's
``subset_hook_caller``, so that a plugin that raises or returns junk is contained, while
pluggy's tracing (``pm.trace``, ``enable_tracing``), hook monitoring and the hook
wrappers of other plugins apply to every call.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from importlib import metadata

import attrs
import pluggy

from .. import hookspecs
from ..descriptor import BackendDescriptor
from .config import CORE_DISTRIBUTION

__all__ = ["NO_HOOK", "Plugin", "PluginManager", "describe"]

#: The reason given for a plugin that registers no ``aml_backends`` hook.
NO_HOOK = "defines no aml_backends hook (decorate it with @aml_core.hookimpl)"
DISABLED = "disabled by AML_DISABLE_BACKENDS"


def describe(exc: BaseException) -> str:
    """``Type: message`` (or ``Type``): how the registry reports an exception."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@attrs.frozen
class Plugin:
    """One plugin: an entry point or an object given to ``Registry.register``."""

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

    @property
    def third_party(self) -> bool:
        """An entry point of a distribution other than aml-core: the plugins whose probes
        ``aml info`` runs in their own interpreter, and that run isolated first
        in-process until seen to finish (:mod:`.trust`). aml-core's own entry point (the
        built-in host backend) and plugins given to ``register`` never need it."""
        return self.entry_point is not None and self.distribution != CORE_DISTRIBUTION

    def broken(self, error: str) -> Plugin:
        return attrs.evolve(self, obj=None, error=error, state="broken")


def entry_points(group: str) -> list[tuple[metadata.EntryPoint, bool]]:
    """The entry points of ``group`` in the order pluggy's loader walks them (installed
    distributions in ``importlib.metadata`` order), each with whether it is the first
    of its name: the one ``load_setuptools_entrypoints(group, name)`` loads."""
    found: list[tuple[metadata.EntryPoint, bool]] = []
    names: set[str] = set()
    for dist in metadata.distributions():
        for ep in dist.entry_points:
            if ep.group == group:
                found.append((ep, ep.name not in names))
                names.add(ep.name)
    return found


def third_party_declared(group: str) -> bool:
    """Whether a distribution other than aml-core declares an entry point of ``group``
    (a plugin that :attr:`Plugin.third_party` would be), found without loading any."""
    return any(dist_of(ep)[0] != CORE_DISTRIBUTION for ep, _ in entry_points(group))


def dist_of(ep: metadata.EntryPoint) -> tuple[str, str]:
    return (ep.dist.name, ep.dist.version) if ep.dist is not None else ("", "")


class PluginManager(pluggy.PluginManager):
    """The ``aml`` project's pluggy manager, with aml's hookspecs."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.add_hookspecs(hookspecs)
        #: The names this manager registered for the registry (cleared on reload).
        self._ours: set[str] = set()

    # -- blocking and reloading ------------------------------------------------------------
    def block_only(self, names: Iterable[str]) -> None:
        """Block exactly ``names`` (``AML_DISABLE_BACKENDS``), unblocking the others."""
        wanted = set(names)
        for name, plugin in self.list_name_plugin():
            if plugin is None and name not in wanted:
                self.unblock(name)
        for name in sorted(wanted):
            self.set_blocked(name)

    def clear(self) -> None:
        """Unregister every plugin the registry registered (before loading again)."""
        for name in sorted(self._ours):
            self.unregister(name=name)
        self._ours.clear()

    # -- loading ---------------------------------------------------------------------------
    def load(self, ep: metadata.EntryPoint, name: str, first: bool) -> object:
        """Load one entry point and register it under ``name``: with pluggy's loader when
        it is the first of its name, else (a second distribution using the same entry point
        name) the same way by hand, under the unique ``name``. Raises what the import or
        the registration raised; nothing stays registered then."""
        if first and name == ep.name:
            self.load_setuptools_entrypoints(ep.group, name=ep.name)
            obj = self.get_plugin(name)
        else:
            obj = ep.load()
            self.register(obj, name=name)
        self._ours.add(name)
        return obj

    def load_entry_points(self, group: str, *, skip: str | None = None) -> list[Plugin]:
        """Every entry point of ``group`` (``skip``: a distribution left out), loaded
        and registered; those that fail, or are blocked, come back without an object."""
        plugins: list[Plugin] = []
        seen: set[tuple[str, str]] = set()
        names: set[str] = set()
        for ep, first in entry_points(group):
            dist, version = dist_of(ep)
            if dist == skip or (dist, ep.name) in seen:  # the same distribution twice on sys.path
                continue
            seen.add((dist, ep.name))
            # pluggy names plugins uniquely: a second distribution with the same entry
            # point name is registered as "name@distribution".
            name = ep.name if ep.name not in names else f"{ep.name}@{dist}"
            names.add(name)
            if self.is_blocked(ep.name):
                plugins.append(Plugin(name, dist, version, None, DISABLED, "disabled", (group, ep.name)))
                continue
            try:
                plugin = self.load_plugin(ep, name, first)
            except pluggy.PluginValidationError as exc:
                plugins.append(Plugin(name, dist, version, None, f"invalid plugin: {describe(exc)}"))
                continue
            except BaseException as exc:  # a broken plugin must not break aml
                if isinstance(exc, KeyboardInterrupt):
                    raise
                plugins.append(Plugin(name, dist, version, None, f"import failed: {describe(exc)}"))
                continue
            plugins.append(plugin)
        return plugins

    def load_plugin(self, ep: metadata.EntryPoint, name: str, first: bool) -> Plugin:
        """One entry point loaded (:meth:`load`) and checked for the hook; raises what
        the import or the registration raised."""
        dist, version = dist_of(ep)
        obj = self.load(ep, name, first)
        return self._checked(
            Plugin(name, dist, version, obj, state="available", entry_point=(ep.group, ep.name)), ep
        )

    def add(self, plugin: Plugin) -> Plugin:
        """Register an in-process plugin (``Registry.register``) as an entry point is."""
        if self.is_blocked(plugin.name):
            return attrs.evolve(plugin, obj=None, error=DISABLED, state="disabled")
        try:
            self.register(plugin.obj, name=plugin.name)
        except Exception as exc:
            return plugin.broken(f"invalid plugin: {describe(exc)}")
        self._ours.add(plugin.name)
        return self._checked(plugin, None)

    def _checked(self, plugin: Plugin, ep: metadata.EntryPoint | None) -> Plugin:
        if self.get_hookcallers(plugin.obj):
            return plugin
        self.unregister(name=plugin.name)
        self._ours.discard(plugin.name)
        return plugin.broken(_no_hook(plugin.obj, ep))

    # -- calling the hook ---------------------------------------------------------------
    def backends_of(self, plugin: Plugin) -> list[BackendDescriptor] | str:
        """The descriptors one plugin's hook returns, or why they could not be had. The
        call goes through ``pm.hook`` without the other backend plugins (their failures
        are their own), keeping hook wrappers and pluggy's tracing."""
        others = [
            p
            for p in self.get_plugins()
            if p is not plugin.obj and any(not i.hookwrapper and not i.wrapper for i in _impls(self, p))
        ]
        caller = self.subset_hook_caller("aml_backends", others)
        answering = sum(1 for i in _impls(self, plugin.obj) if not i.hookwrapper and not i.wrapper)
        out: list[BackendDescriptor] = []
        try:
            results = caller()
            if len(results) < answering:  # pluggy leaves out a hook's None
                _as_descriptors(None)
            for result in results:
                out.extend(_as_descriptors(result))
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            return f"aml_backends() failed: {describe(exc)}"
        return out


def _impls(pm: PluginManager, plugin: object) -> list[pluggy.HookImpl]:
    return [i for i in pm.hook.aml_backends.get_hookimpls() if i.plugin is plugin]


def _no_hook(obj: object, ep: metadata.EntryPoint | None) -> str:
    """Why a plugin has no hook; says so when the entry point names the hook function
    itself (``mod:aml_backends``) instead of its module."""
    marker = f"{hookspecs.PROJECT}_impl"
    if ep is not None and inspect.isroutine(obj) and hasattr(obj, marker):
        module = ep.value.partition(":")[0].strip()
        return (
            f"the entry point names the function {ep.value!r}, not the module that defines "
            f"the hook: write {ep.name} = {module!r} in [project.entry-points.{ep.group!r}]"
        )
    return NO_HOOK


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
