"""Draw a memory snapshot as a PNG, for those who do not run PyTorch's viewer:
``python -m aml_core.plot snapshot.pickle -o out.png``.

The input is the pickle ``Pool.snapshot().dump(path)`` writes — PyTorch's
``torch.cuda.memory._snapshot()`` format, so PyTorch's own snapshots draw too. It is read
untrusted (:mod:`aml_core.snapshot_file`): only plain data is unpickled, nothing the file
names is run, and a missing, empty, truncated or malformed file ends in one
``aml: error:`` line and status 1, as the ``aml`` command's errors do. The
picture has two panels: over time (the trace's ``time_us``, else the event's index), the
bytes reserved in segments and the bytes of live blocks; and the segments at the
snapshot, one bar each, their blocks coloured by state (live or free) with the bytes
asked for of a live block darker. Needs matplotlib, which aml-core does not depend on
(``pip install matplotlib``)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import files, snapshot_file
from .errors import AMLError, AMLNotSupported, AMLValueError

__all__ = ["draw", "main", "timeline"]

#: What the timeline counts for each action of a trace: (reserved, allocated) deltas' signs.
_DELTAS = {
    "segment_alloc": (1, 0),
    "segment_map": (1, 0),
    "segment_free": (-1, 0),
    "segment_unmap": (-1, 0),
    "alloc": (0, 1),
    "free_completed": (0, -1),
}


def timeline(trace: Sequence[dict[str, Any]]) -> tuple[list[float], list[int], list[int]]:
    """The trace's (times in seconds from its first event, or event indices where it
    has no times; reserved bytes; live block bytes) after each event, from zero at the
    start of the trace."""
    xs: list[float] = []
    reserved: list[int] = []
    allocated: list[int] = []
    r = a = 0
    t0 = trace[0].get("time_us") if trace else None
    for i, e in enumerate(trace):
        dr, da = _DELTAS.get(e["action"], (0, 0))
        r += dr * e["size"]
        a += da * e["size"]
        t = e.get("time_us")
        xs.append((t - t0) / 1e6 if t is not None and t0 is not None else float(i))
        reserved.append(r)
        allocated.append(a)
    return xs, reserved, allocated


def _pyplot() -> Any:
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        raise AMLNotSupported(
            "aml_core.plot needs matplotlib, which aml-core does not install: pip install matplotlib"
        ) from None
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def draw(
    snapshot: dict[str, Any],
    path: str | os.PathLike[str],
    *,
    device: int | None = None,
    pyplot: Any = None,
) -> None:
    """Draw ``snapshot`` (a dict of PyTorch's format, checked by
    :func:`aml_core.snapshot_file.check`) to the image ``path`` (its suffix picks the
    format). ``device``: the device whose trace and segments are drawn (None: the only
    one with either)."""
    snapshot = snapshot_file.check(snapshot)
    plt = pyplot if pyplot is not None else _pyplot()
    traces = snapshot.get("device_traces", [])
    segments = snapshot.get("segments", [])
    if device is None:
        devices = {i for i, t in enumerate(traces) if t} | {s.get("device", 0) for s in segments}
        if len(devices) > 1:
            raise AMLValueError(f"the snapshot has devices {sorted(devices)}: choose one with --device")
        device = devices.pop() if devices else 0
    trace = traces[device] if device < len(traces) else []
    segs = sorted((s for s in segments if s.get("device", 0) == device), key=lambda s: s["address"])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 8), gridspec_kw={"height_ratios": [1, 1.3]})
    mib = float(1 << 20)
    if trace:
        xs, reserved, allocated = timeline(trace)
        timed = trace[0].get("time_us") is not None
        top.step(xs, [r / mib for r in reserved], where="post", label="reserved (segments)")
        top.step(xs, [a / mib for a in allocated], where="post", label="live blocks")
        top.set_xlabel("seconds since the first event" if timed else "event")
        top.legend(loc="upper left")
    else:
        top.text(0.5, 0.5, "no history recorded (record_history)", ha="center", va="center")
    top.set_ylabel("MiB")
    top.set_title(f"device {device}: memory over time ({len(trace)} events)")
    for row, seg in enumerate(segs):
        offset = 0
        for b in seg["blocks"]:
            live = b["state"] in ("active_allocated", "active_pending_free")
            colour = "tab:blue" if live else "0.9"
            bottom.barh(row, b["size"] / mib, left=offset / mib, color=colour, edgecolor="0.4", linewidth=0.3)
            asked = b.get("requested_size", b["size"]) if live else 0
            if asked:
                bottom.barh(row, asked / mib, left=offset / mib, height=0.4, color="tab:orange")
            offset += b["size"]
    bottom.set_yticks(range(len(segs)), [f"0x{s['address']:x}" for s in segs], fontsize=7)
    bottom.invert_yaxis()
    bottom.set_xlabel("MiB into the segment")
    total = sum(s["total_size"] for s in segs)
    bottom.set_title(
        f"{len(segs)} segments, {total / mib:.1f} MiB: live blocks blue (bytes asked for orange), free grey"
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aml_core.plot",
        description="Draw a memory snapshot (Pool.snapshot().dump(), or PyTorch's _snapshot()) as an image.",
    )
    parser.add_argument("input", help="the snapshot's pickle")
    parser.add_argument("-o", "--output", default="snapshot.png", help="the image (default: snapshot.png)")
    parser.add_argument(
        "-d", "--device", type=int, default=None, help="the device to draw (default: the only one)"
    )
    args = parser.parse_args(argv)
    try:
        if args.device is not None and args.device < 0:
            raise AMLValueError(f"--device must be a device index (0 or more), not {args.device}")
        data = snapshot_file.load(args.input)  # an old PyTorch snapshot (a list) too
        plt = _pyplot()
        try:
            draw(data, args.output, device=args.device, pyplot=plt)
        except OSError as exc:
            raise files.error(exc, f"writing the image {args.output!r}") from None
    except AMLError as exc:
        print(f"aml: error: {exc}", file=sys.stderr)
        return 1
    print(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
