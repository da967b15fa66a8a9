"""How backends are ranked and chosen: the duplicate-name rule, the order of
``aml_core.backends()`` and whether a backend fits a request."""

from __future__ import annotations

import attrs

from ..descriptor import BackendDescriptor
from ..specs import AreaSpec, BackendStatus, Kind
from .manager import Plugin

__all__ = [
    "NO_DEVICE",
    "Backend",
    "Choice",
    "choose_from",
    "kind_mismatch",
    "options_unhonoured",
    "rank_key",
    "resolve_duplicates",
    "unfit",
    "unknown_options",
]

NO_DEVICE = "has no device"


@attrs.frozen
class Backend:
    """A backend as a plugin declared it."""

    desc: BackendDescriptor
    plugin: Plugin
    shadowed_by: str | None = None


@attrs.frozen
class Choice:
    """Which backend ``area()`` would use for a request, and why the others were not."""

    backend: str | None
    rejected: tuple[tuple[str, str], ...]

    def explain(self) -> str:
        return "; ".join(f"{name}: {why}" for name, why in self.rejected) or "no backends installed"


def resolve_duplicates(declared: list[Backend]) -> tuple[dict[str, Backend], list[Backend]]:
    """The documented rule: for each name the highest priority wins, ties going to the
    distribution name, then the plugin name, alphabetically; the others are shadowed."""
    groups: dict[str, list[Backend]] = {}
    for b in declared:
        groups.setdefault(b.desc.name, []).append(b)
    winners: dict[str, Backend] = {}
    shadowed: list[Backend] = []
    for name, group in groups.items():
        group.sort(key=lambda b: (-b.desc.priority, b.plugin.distribution, b.plugin.name))
        winner = group[0]
        winners[name] = winner
        label = f"{winner.plugin.label()} (priority {winner.desc.priority})"
        shadowed.extend(attrs.evolve(b, shadowed_by=label) for b in group[1:])
    return winners, shadowed


def rank_key(st: BackendStatus) -> tuple[int, int, int, str, str]:
    """The documented order of ``aml_core.backends()``: available backends first, then
    by priority (higher first; unknown last), then by name (and distribution)."""
    known = 0 if st.priority is not None else 1
    return (0 if st.available else 1, known, -(st.priority or 0), st.name, st.distribution)


def kind_mismatch(kind: Kind, kinds: frozenset[Kind]) -> str:
    provided = ", ".join(sorted(k.value for k in kinds)) or "nothing"
    return f"does not provide {kind.value} memory (provides {provided})"


def options_unhonoured(missing: tuple[str, ...], kind: Kind) -> str:
    """Why a backend was passed over for the options of a request (it declares the area
    options it honours, and not these)."""
    return f"does not honour the area option(s) {list(missing)} of {kind.value} memory"


def unknown_options(spec: AreaSpec, candidates: list[Backend], missing_of: list[tuple[str, ...]]) -> str:
    """The message of the AMLTypeError of a request whose options no candidate honours:
    each candidate's unhonoured options (``missing_of``, in the candidates' order)."""
    declined = "; ".join(
        f"{b.desc.name} does not honour {list(missing)}"
        for b, missing in zip(candidates, missing_of, strict=True)
    )
    return (
        f"unknown area option(s) {sorted(spec.options)} of {spec.kind.value} memory: "
        f"no backend honours them all ({declined})"
    )


def unfit(st: BackendStatus, spec: AreaSpec) -> str:
    """Why a backend cannot serve ``spec`` (``""``: it can)."""
    if not st.available:
        return f"{st.state} ({st.reason})" if st.state in ("unavailable", "broken") else st.reason
    if spec.kind not in st.kinds:
        return kind_mismatch(spec.kind, st.kinds)
    if spec.device is not None and spec.device >= 0 and st.devices and spec.device >= len(st.devices):
        return f"{NO_DEVICE} {spec.device} ({len(st.devices)} found)"
    return ""


def choose_from(spec: AreaSpec, statuses: tuple[BackendStatus, ...], forced: str | None) -> Choice:
    """The choice read from statuses already probed (``aml info``)."""
    active = [s for s in statuses if s.state != "shadowed"]
    if forced is not None:
        active = [s for s in active if s.name == forced]
        if not active:
            return Choice(None, ((forced, "not installed (forced by AML_BACKEND or backend=)"),))
    else:
        active = [s for s in active if s.priority is not None]
        active.sort(key=lambda s: (-(s.priority or 0), s.name, s.distribution))
    rejected: list[tuple[str, str]] = []
    for st in active:
        why = unfit(st, spec)
        if not why:
            return Choice(st.name, tuple(rejected))
        rejected.append((st.name, why))
    return Choice(None, tuple(rejected))
