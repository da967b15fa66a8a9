"""The ``aml`` command.

``aml info`` (or bare ``aml``) shows at a glance which backends are installed, which
are available (first) and why the others are not, their versions and the versions of
the drivers and runtimes they found, their devices (NUMA nodes with CPUs and memory,
GPUs with total and free memory, PCI bus id, NUMA node and links to the other GPUs),
huge pages, the NUMA distances, and which backend ``aml_core.area()`` would choose for
each kind of memory. Lines fit the terminal (``--verbose`` prints
every text in full); ``aml info --json`` prints the same for scripts
(docs/aml-info-json.md).

Each third-party entry-point backend is probed in its own process, so a probe that
crashes or hangs is reported and the command still answers (each such process is a fork
of a warm copy of the command, made before any plugin is loaded, so it does not start
Python and import aml-core again; aml-core's own host backend is probed in-process); a
bounded number run at once, all within ``AML_INFO_TIMEOUT`` seconds (default 60), and
those the limit stopped say so. A bad environment (``AML_BACKEND``,
``AML_DISABLE_BACKENDS``, ``AML_PROBE_TIMEOUT``...) gives a warning line and the rest of
the report, with exit status 0. When the output cannot be written (a closed pipe, a full
disk, a closed stdout), the command says so in one line on stderr and exits with status
1; text the output's encoding cannot show is escaped (``\\xe9``).

What plugins print while the parent imports them and calls their hooks (``print``,
``os.write(1, ...)``, a C library's ``printf``) goes to stderr: only the report is
written to stdout, so ``aml info --json`` stays valid JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import json
import os
import platform
import re
import shutil
import sys
import textwrap
import warnings
from collections.abc import Iterator, Sequence

from . import __version__, codec, topology
from .errors import AMLError
from .registry import AMLConfigWarning, default_registry
from .registry.forkserver import warm_probes
from .specs import BackendStatus, Kind, format_size

__all__ = ["JSON_SCHEMA_VERSION", "info_data", "main", "render"]

#: Bumped when a field of ``aml info --json`` changes meaning or disappears.
JSON_SCHEMA_VERSION = 1
_STATE_ORDER = {"available": 0, "unavailable": 1, "broken": 2, "disabled": 3, "shadowed": 4}
_ELLIPSIS = "..."
#: Below this many columns left of a table row, its text goes on the next line.
_INLINE_MIN = 50


def info_data() -> dict[str, object]:
    """What ``aml info --json`` prints (docs/aml-info-json.md)."""
    reg = default_registry()
    with warnings.catch_warnings():  # the report shows them as warning lines
        warnings.simplefilter("ignore", AMLConfigWarning)
        statuses = reg.statuses(isolated=True)
    chosen: dict[str, object] = {}
    for kind in Kind:
        choice = reg.choose(kind, statuses=statuses)
        chosen[kind.value] = {"backend": choice.backend, "rejected": [list(r) for r in choice.rejected]}
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "aml_core": __version__,
        "aml_core_path": os.path.dirname(os.path.abspath(__file__)),
        "python": platform.python_version(),
        "warnings": list(reg.warnings()),
        "notes": list(reg.notes()),
        "backends": [s.to_json() for s in _display_order(statuses)],
        "chosen": chosen,
        "topology": topology_data(),
    }


def topology_data() -> dict[str, object]:
    """The node's topology that no backend reports: the NUMA nodes sysfs lists and the
    distance table between them (``numactl --hardware``'s), row i for ``numa_nodes[i]``;
    and the memory as what it is (each node's CPUs, memory, HMAT access attributes and
    memory tier, and the tiers: :func:`aml_core.codec.memory_topology_to_json`)."""
    table = topology.numa_distances()
    nodes = sorted(table)
    return {
        "numa_nodes": nodes,
        "numa_distances": [[table[a][b] for b in nodes] for a in nodes],
        **codec.memory_topology_to_json(topology.memory_topology()),
    }


def _display_order(statuses: Sequence[BackendStatus]) -> list[BackendStatus]:
    return sorted(
        statuses,
        key=lambda s: (_STATE_ORDER.get(s.state, 9), -(s.priority if s.priority is not None else -1), s.name),
    )


# -- text ---------------------------------------------------------------------------------------
def compact(text: str) -> str:
    """A native error message without its repetitions: ``"x.so: x.so: msg"`` becomes
    ``"x.so: msg"``, a path or library name already said is not said again, and a
    ``"; "``-separated part already said is dropped."""
    text = re.sub(r"(\S+): \1: ", r"\1: ", text)
    seen: list[str] = []
    for token in re.findall(r"[\w./+-]*(?:/[\w.+-]+|\.so[\w.]*)", text):
        if token in seen:
            continue
        seen.append(token)
        first = text.find(token) + len(token)
        rest = text[first:]
        rest = re.sub(r"\b(AML_\w+)='" + re.escape(token) + "'", r"\1", rest)
        rest = re.sub(r"(?<![\w/.])" + re.escape(token) + r": ", "", rest)
        text = text[:first] + rest
    parts: list[str] = []
    for part in text.split("; "):
        if not any(part in said for said in parts):
            parts.append(part)
    return "; ".join(parts)


def _shorten(text: str, width: int) -> tuple[str, bool]:
    if len(text) <= width:
        return text, False
    return text[: max(0, width - len(_ELLIPSIS))].rstrip() + _ELLIPSIS, True


def _size(n: int | None) -> str:
    return "?" if n is None else format_size(n)


#: Device details that the topology line shows (not repeated by --verbose's details).
_TOPOLOGY_DETAILS = ("pci_bus_id", "numa_node", "links")


def _topology_line(details: dict[str, object]) -> str | None:
    """``"PCI 0000:19:00.0, NUMA node 0, links: 1 NV18, 2 SYS"`` for a device whose
    backend reports its place in the topology; None for one that does not (a NUMA node)."""
    if not any(key in details for key in _TOPOLOGY_DETAILS):
        return None
    bus, node, links = (details.get(key) for key in _TOPOLOGY_DETAILS)
    text = f"PCI {bus or 'unknown'}, NUMA node {'unknown' if node is None else node}"
    if isinstance(links, dict) and links:
        text += ", links: " + ", ".join(f"{peer} {link}" for peer, link in links.items())
    return text


def _distance_lines(data: dict[str, object]) -> list[str]:
    """The NUMA distance table as ``numactl --hardware`` prints it (none for one node)."""
    topo = data.get("topology")
    if not isinstance(topo, dict):
        return []
    nodes, rows = topo.get("numa_nodes") or [], topo.get("numa_distances") or []
    if len(nodes) < 2:
        return []
    w = max(4, *(len(str(x)) + 1 for row in rows for x in row), *(len(str(n)) + 1 for n in nodes))
    out = ["NUMA distances:", "  node" + "".join(f"{n:>{w}}" for n in nodes)]
    out += [f"  {n:>4}" + "".join(f"{d:>{w}}" for d in row) for n, row in zip(nodes, rows, strict=True)]
    return out


def _ids(ids: Sequence[object]) -> str:
    """``[0, 1, 2, 5]`` as ``"0-2,5"`` (the kernel's list form); ``"none"`` when empty."""
    parts: list[str] = []
    run: list[int] = []
    for x in sorted(i for i in ids if isinstance(i, int)):
        if run and x == run[-1] + 1:
            run.append(x)
            continue
        if run:
            parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [x]
    if run:
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(parts) or "none"


def _tier_lines(data: dict[str, object]) -> list[str]:
    """The memory as what it is: a row per NUMA node (CPUs, memory, memory tier, and the
    HMAT bandwidth and latency from its initiators; a second row for access class 1, the
    best CPU initiators, when it differs from class 0), then the memory tiers. None for
    a machine of one node without HMAT (the host backend's device says it all)."""
    topo = data.get("topology")
    if not isinstance(topo, dict):
        return []
    nodes = [n for n in topo.get("nodes") or [] if isinstance(n, dict)]
    hmat = bool(topo.get("hmat"))
    if len(nodes) < 2 and not hmat:
        return []
    head: tuple[str, ...] = ("node", "CPUs", "memory", "tier")
    if hmat:
        head += ("from", "rd MiB/s", "wr MiB/s", "rd ns", "wr ns")
    rows: list[tuple[str, ...]] = [head]
    for n in nodes:
        memory = n.get("memory")
        left: tuple[str, ...] = (
            str(n.get("node")),
            _ids(n.get("cpus") or []),
            _size(memory) if isinstance(memory, int) else "?",
            "-" if n.get("tier") is None else str(n.get("tier")),
        )
        access = [a for a in n.get("access") or [] if isinstance(a, dict)]
        shown: list[dict[str, object]] = []
        for a in access:  # class 1 repeats class 0 on most machines: shown once
            if not any({**a, "access_class": 0} == {**b, "access_class": 0} for b in shown):
                shown.append(a)
        if not hmat:
            rows.append(left)
            continue
        if not shown:
            rows.append((*left, "none", "", "", "", ""))
        for i, a in enumerate(shown):
            initiators = a.get("initiators")
            where = _ids(initiators if isinstance(initiators, list) else [])
            c = a.get("access_class")
            if c != 0:
                where = f"CPUs of {where}" if c == 1 else f"class {c}: {where}"
            values = tuple(
                "?" if a.get(k) is None else str(a.get(k))
                for k in ("read_bandwidth", "write_bandwidth", "read_latency", "write_latency")
            )
            rows.append(((*left,) if i == 0 else ("",) * 4) + (where, *values))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    align = "><>><>>>>"
    out = ['Memory nodes (HMAT: bandwidth and latency from the initiator nodes in "from"):']
    for r in rows:
        cells = (f"{x:{a}{w}}" for x, a, w in zip(r, align, widths, strict=False))
        out.append(("  " + "  ".join(cells)).rstrip())
    if not hmat:
        out.append("  (no HMAT attributes: memspaces rank bandwidth and latency by NUMA distance)")
    tiers = topo.get("memory_tiers")
    if tiers is None:
        out.append("Memory tiers: none listed (no /sys/devices/virtual/memory_tiering)")
    elif isinstance(tiers, list):
        out.append("Memory tiers (fastest first):")
        for t in tiers:
            if isinstance(t, dict):
                span = t.get("abstract_distance")
                lo, hi = span if isinstance(span, list) and len(span) == 2 else ("?", "?")
                nodes_text = _ids(t.get("nodes") or [])
                out.append(f"  memory_tier{t.get('tier')}: nodes {nodes_text} (abstract distance {lo}-{hi})")
    return out


def render(data: dict[str, object], *, width: int = 80, verbose: bool = False) -> str:
    """The text of ``aml info`` from :func:`info_data`, no line wider than ``width``
    (unless ``verbose``, which prints every text in full, wrapped)."""
    width = max(width, 40)
    out: list[str] = []
    cut = False

    def line(text: str) -> None:
        nonlocal cut
        if verbose:
            out.extend(textwrap.wrap(text, width, subsequent_indent="    ", break_on_hyphens=False) or [""])
        else:
            short, was_cut = _shorten(text, width)
            cut |= was_cut
            out.append(short)

    def wrapped(text: str, indent: str = "  ") -> None:
        out.extend(textwrap.wrap(text, width, subsequent_indent=indent + "  ", break_on_hyphens=False))

    line(f"aml-core {data['aml_core']} (Python {data['python']}) at {data['aml_core_path']}")
    notes = data["warnings"]
    assert isinstance(notes, list)
    for note in notes:
        wrapped(f"warning: {note}")
    if verbose:  # what was ignored, and why (the probe cache's trust rules)
        notes_ignored = data.get("notes") or []
        assert isinstance(notes_ignored, list)
        for note in notes_ignored:
            wrapped(f"note: {note}")
    backends = data["backends"]
    assert isinstance(backends, list)
    out.append("")
    if not backends:
        out.append("no backends installed (is aml-core installed? pip install aml-core)")
    names_w = max((len(str(b["name"])) for b in backends), default=4)
    labels = [
        f"{b['name']!s:<{names_w}}  ({b['distribution'] or 'registered'} {b['version']})".replace(" )", ")")
        for b in backends
    ]
    label_w = max((len(x) for x in labels), default=7)
    inline = width - (label_w + 21) >= _INLINE_MIN and not verbose  # one layout for every row
    line(f"{'BACKEND':<{label_w}}  PRIO  {'STATE':<11}  {'DETAIL OR REASON' if inline else ''}".rstrip())
    for b, label in zip(backends, labels, strict=True):
        prio = "-" if b["priority"] is None else str(b["priority"])
        text = str(b["detail"] if b["available"] else b["reason"])
        left = f"{label:<{label_w}}  {prio:>4}  {b['state']:<11}  "
        if verbose:
            out.append(left.rstrip())
            out.extend(textwrap.wrap(text, width, initial_indent="    ", subsequent_indent="    ") or [])
        elif inline:
            line(left + compact(text))
        else:  # a narrow terminal: the text on its own line
            line(left.rstrip())
            line("    " + compact(text))
    for b in backends:
        versions = b["versions"]
        assert isinstance(versions, dict)
        if not (b["available"] or versions):
            continue
        out.append("")
        head = f"{b['name']}: " + (
            ", ".join(f"{k} {v}" for k, v in versions.items()) or "no versions reported"
        )
        line(head)
        if not b["available"]:  # what an unavailable backend found: its versions only
            continue
        caps = b["capabilities"]
        assert isinstance(caps, list)
        wrapped("  capabilities: " + (", ".join(caps) or "none"), "  ")
        devices = b["devices"]
        assert isinstance(devices, list)
        for dev in devices:
            mem = _size(dev["total_memory"]) if dev["total_memory"] else "memory ?"
            if dev["free_memory"] is not None:
                mem += f", {_size(dev['free_memory'])} free"
            details = dev["details"]
            extra = ""
            if "cpus" in details:
                extra = f", cpus {details['cpus']}"
            if verbose:
                extra = "".join(f", {k} {v}" for k, v in details.items() if k not in _TOPOLOGY_DETAILS)
            line(f"  {dev['index']}: {dev['name']}, {mem}{extra}")
            where = _topology_line(details)
            if where is not None:
                line(f"     {where}")
    distances = _distance_lines(data)
    if distances:
        out.append("")
        out.extend(distances)
    tiers = _tier_lines(data)
    if tiers:
        out.append("")
        for text in tiers:
            line(text)
    out.append("")
    out.append("aml_core.area(kind=...) would use:")
    chosen = data["chosen"]
    assert isinstance(chosen, dict)
    for kind, entry in chosen.items():
        line(f"  {kind:8} -> {entry['backend'] or 'none'}")
    if cut:
        out.append("")
        out.extend(textwrap.wrap("(texts shortened to fit; aml info --verbose prints them in full)", width))
    return "\n".join(out) + "\n"


# -- command ------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aml",
        description="aml: place, advise, map and share memory on heterogeneous nodes. "
        "Without a command, runs 'aml info'.",
        epilog="Environment: AML_BACKEND forces a backend, AML_DISABLE_BACKENDS=a,b blocks some, "
        "AML_PROBE_TIMEOUT bounds each probe (seconds), AML_INFO_TIMEOUT all of aml info's probes "
        "together, AML_<NAME>_LIBRARY points a ctypes backend at a library.",
    )
    parser.add_argument("--version", action="version", version=f"aml {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p_info = sub.add_parser(
        "info",
        help="list backends, their devices and capabilities, and the backend chosen for each kind",
        description="List every installed backend (available first, or the reason it is not), its "
        "versions, devices and capabilities, and which backend aml_core.area() would choose for each "
        "kind of memory. Each probe runs in its own process.",
    )
    p_info.add_argument("--json", action="store_true", help="print JSON for scripts (docs/aml-info-json.md)")
    p_info.add_argument("-v", "--verbose", action="store_true", help="print every text in full")
    return parser


def _write(text: str) -> int:
    """Write to stdout; a closed pipe, a full disk or a closed stdout is one line on
    stderr and status 1. What the output's encoding cannot show is escaped."""
    out = sys.stdout
    if out is None:
        return _cannot_write("it is closed")
    encoding = getattr(out, "encoding", None) or "utf-8"
    with contextlib.suppress(LookupError):
        text = text.encode(encoding, "backslashreplace").decode(encoding, "replace")
    try:
        out.write(text)
        out.flush()
        return 0
    except ValueError:  # the file object was closed
        return _cannot_write("it is closed")
    except OSError as exc:
        _drop_stdout()
        if isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE:
            return _cannot_write("the reader closed the pipe (broken pipe)")
        return _cannot_write(exc.strerror or str(exc))


def _cannot_write(why: str) -> int:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(f"aml: error: cannot write to standard output: {why}", file=sys.stderr)
    return 1


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not fail again."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass


@contextlib.contextmanager
def _plugin_output_to_stderr() -> Iterator[None]:
    """While plugins are imported and probed in this process, what they write to stdout
    (``print``, ``sys.__stdout__``, ``os.write(1, ...)``, C's ``printf``) goes to
    stderr, so that stdout carries the report only. File descriptor 1 is restored, and
    everything written meanwhile flushed to stderr, before the report is written."""
    saved_stdout = sys.stdout
    _flush(saved_stdout)
    saved = _point_fd1_at_stderr()
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        for stream in {id(s): s for s in (sys.stdout, sys.__stdout__, sys.stderr)}.values():
            _flush(stream)
        _flush_c_stdio()
        sys.stdout = saved_stdout
        if saved >= 0:
            os.dup2(saved, 1)
            os.close(saved)


def _point_fd1_at_stderr() -> int:
    """Point fd 1 at stderr (at /dev/null without one); the saved fd 1, or -1 when there
    is no fd 1 to protect."""
    try:
        os.fstat(1)
        # Taken before fd 1 is saved, so that a closed fd 2 is not reused for the copy.
        try:
            target = os.dup(2)
        except OSError:
            target = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return -1
    try:
        saved = os.dup(1)
    except OSError:  # no file descriptor left
        os.close(target)
        return -1
    os.dup2(target, 1)
    os.close(target)
    return saved


def _flush(stream: object) -> None:
    with contextlib.suppress(Exception):
        stream.flush()  # type: ignore[attr-defined]


def _flush_c_stdio() -> None:
    """``fflush(NULL)``: what a C library buffered for stdout goes where fd 1 points now."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    as_json = bool(getattr(args, "json", False))
    verbose = bool(getattr(args, "verbose", False))
    if sys.stdout is None:  # started with stdout closed (aml info >&-): nothing to probe for
        return _cannot_write("it is closed")
    try:
        # First, before any plugin is loaded or thread started: the isolated probes are then
        # forks of this warm process, not fresh interpreters (aml_core.registry.forkserver).
        with warm_probes(), _plugin_output_to_stderr():
            data = info_data()
    except AMLError as exc:
        print(f"aml: error: {exc}", file=sys.stderr)
        return 1
    if as_json:
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    else:
        text = render(data, width=shutil.get_terminal_size((80, 24)).columns, verbose=verbose)
    return _write(text)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
