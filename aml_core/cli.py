"""The ``aml`` command.

``aml info`` lists every backend (name, distribution and version, available or why not,
devices, capabilities, priority) and which backend ``aml_core.area()`` would choose for
each kind of memory; ``aml info --json`` prints the same for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import __version__
from .errors import AMLError
from .registry import backends, choose
from .specs import BackendStatus, Kind

__all__ = ["main"]


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n else "?"


def _info_data() -> dict[str, object]:
    statuses = backends()
    chosen: dict[str, object] = {}
    for kind in Kind:
        choice = choose(kind)
        chosen[kind.value] = {"backend": choice.backend, "rejected": [list(r) for r in choice.rejected]}
    return {
        "aml_core": __version__,
        "backends": [s.to_json() for s in statuses],
        "chosen": chosen,
    }


def _print_status(st: BackendStatus, out: list[str]) -> None:
    state = "available" if st.available else "unavailable"
    out.append(f"{st.name}  ({st.distribution} {st.version}, priority {st.priority})")
    out.append(f"  {state}: {st.reason}")
    if st.kinds:
        out.append("  kinds: " + ", ".join(sorted(k.value for k in st.kinds)))
    caps = st.capabilities.names()
    if caps:
        out.append("  capabilities: " + ", ".join(caps))
    for dev in st.devices:
        out.append(f"  device {dev.index}: {dev.name}, {_gib(dev.total_memory)}")
        dcaps = dev.capabilities.names()
        if dcaps and dcaps != caps:
            out.append("    " + ", ".join(dcaps))
        for key, value in dev.details.items():
            out.append(f"    {key}: {value}")


def info(as_json: bool) -> int:
    data = _info_data()
    if as_json:
        print(json.dumps(data, indent=2, sort_keys=True))
        return 0
    out = [f"aml {__version__}", "", "backends (best first):"]
    for st in backends():
        _print_status(st, out)
    out += ["", "aml_core.area(kind=...) would use:"]
    chosen = data["chosen"]
    assert isinstance(chosen, dict)
    for kind, entry in chosen.items():
        name = entry["backend"]
        if name:
            out.append(f"  {kind:8} -> {name}")
        else:
            why = "; ".join(f"{n}: {r}" for n, r in entry["rejected"]) or "no backends installed"
            out.append(f"  {kind:8} -> none ({why})")
    print("\n".join(out))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aml",
        description="aml: place, advise, map and share memory on heterogeneous nodes.",
        epilog="Environment: AML_BACKEND forces a backend, AML_DISABLE_BACKENDS=a,b blocks some, "
        "AML_PROBE_TIMEOUT bounds each probe (seconds), AML_<NAME>_LIBRARY points a ctypes "
        "backend at a library.",
    )
    parser.add_argument("--version", action="version", version=f"aml {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p_info = sub.add_parser(
        "info",
        help="list backends, their devices and capabilities, and the backend chosen for each kind",
        description="List every installed backend (available or the reason it is not), its devices "
        "and capabilities, and which backend aml_core.area() would choose for each kind of memory.",
    )
    p_info.add_argument("--json", action="store_true", help="print JSON for scripts")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return info(args.json)
    except AMLError as exc:
        print(f"aml: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
