"""Reading a memory snapshot's pickle without trusting it (docs/reliability.md, "Snapshot
files"): what ``Pool.snapshot().dump(path)`` and PyTorch's
``torch.cuda.memory._dump_snapshot`` write, read back by :func:`load` for the plot tool
and every other reader of snapshots in aml.

A snapshot is plain data: dicts, lists, tuples, sets, str, bytes, int, float, bool and
None.
``pickle.load`` would run whatever a crafted file names (a ``__reduce__`` calling
``os.system``); :class:`PlainUnpickler` admits only the plain types, so a file that names
any class or function (``posix.system``, ``builtins.eval``, ``torch.Tensor``) is refused
before anything of it runs. Then :func:`check` checks the shape the readers rely on.
Every failure is an :class:`~aml_core.errors.AMLError`: a bad path or a file error by
:mod:`aml_core.files`, anything wrong in the file :class:`~aml_core.errors.AMLValueError`
naming what and where.
"""

from __future__ import annotations

import io
import os
import pickle
import pickletools
import warnings
from typing import Any

from . import files
from .errors import AMLValueError

__all__ = ["MAX_BYTES", "PlainUnpickler", "check", "load", "loads"]

#: The largest snapshot file read (bytes): 1 GiB, far past any snapshot of a real pool.
MAX_BYTES = 1 << 30

#: The only globals a snapshot's pickle may name: the sets, which older pickle protocols
#: (0-3) build by a call. Not ``bytearray``: ``bytearray(2**40)`` from a few bytes of
#: pickle would allocate and zero a TiB.
_ADMITTED = {
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("__builtin__", "set"): set,  # protocol 0-2 pickles written by Python 2
    ("__builtin__", "frozenset"): frozenset,
}


#: Opcodes a snapshot never needs: objects of classes, persistent ids, the extension
#: registry, out-of-band buffers, state set on an object.
_REFUSED_OPS = frozenset(
    {"INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "BUILD", "PERSID", "BINPERSID", "EXT1", "EXT2", "EXT4"}
    | {"NEXT_BUFFER", "READONLY_BUFFER"}
)
_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"})


def _scan(data: bytes, what: str) -> None:
    """Read every opcode of the pickle in ``data`` without building anything
    (``pickletools.genops``, which reads each argument's bytes before it makes it: a
    length past the data is an error, never an allocation) and refuse what a snapshot
    never holds: an opcode of :data:`_REFUSED_OPS`, a memo index past the opcodes read
    (the C unpickler sizes its memo table by the largest index named: ``LONG_BINPUT
    0xffffffff`` in a few bytes would zero 64 GiB), a frame longer than the data."""
    ops = 0
    try:
        with warnings.catch_warnings():  # a protocol 0 string's bad escape: genops warns
            warnings.simplefilter("ignore", DeprecationWarning)
            for op, arg, pos in pickletools.genops(data):
                ops += 1
                if op.name in _REFUSED_OPS:
                    raise AMLValueError(f"{what} holds a {op.name} opcode: a snapshot holds only plain data")
                if op.name in _PUTS and isinstance(arg, int) and arg > ops:
                    raise AMLValueError(f"{what} names memo entry {arg} after {ops} opcodes: malformed")
                if op.name == "FRAME" and isinstance(arg, int) and arg > len(data) - (pos or 0):
                    raise AMLValueError(f"{what} has a frame of {arg} bytes past its end: truncated")
    except AMLValueError:
        raise
    except Exception as exc:  # genops' every complaint of a malformed pickle
        kind = "empty" if not data else "not a pickle, or truncated"
        raise AMLValueError(f"{what} is {kind} ({type(exc).__name__}: {exc})") from None


class PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds only plain data: any class or function the pickle
    names, other than ``set`` and ``frozenset``, is refused
    (:class:`~aml_core.errors.AMLValueError`), and persistent ids too. :func:`loads`
    scans the pickle first (:func:`_scan`), so what it reads is bounded by the file."""

    def find_class(self, module: str, name: str) -> Any:
        found = _ADMITTED.get((module, name))
        if found is None:
            raise AMLValueError(
                f"the snapshot names {module}.{name}: a snapshot holds only plain data (dicts, "
                "lists, str, int, float, bool, None), so this file is refused unread"
            )
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise AMLValueError("the snapshot holds a persistent id: a snapshot holds only plain data")


def loads(data: bytes, what: str = "the snapshot") -> dict[str, Any]:
    """The snapshot in ``data`` (a pickle), read with :class:`PlainUnpickler` and
    checked (:func:`check`); AMLValueError for anything else."""
    if len(data) > MAX_BYTES:
        raise AMLValueError(f"{what} has {len(data)} bytes, more than a snapshot's {MAX_BYTES}")
    _scan(data, what)
    try:
        value = PlainUnpickler(io.BytesIO(data)).load()
    except AMLValueError as exc:
        raise AMLValueError(f"{what}: {exc}") from None
    except RecursionError:
        raise AMLValueError(f"{what} is nested too deeply to be a snapshot") from None
    except MemoryError:
        raise AMLValueError(f"{what} does not fit in memory: not a snapshot") from None
    except Exception as exc:  # the unpickler's every complaint of a malformed file
        kind = "empty" if not data else "not a pickle, or truncated"
        raise AMLValueError(f"{what} is {kind} ({type(exc).__name__}: {exc})") from None
    return check(value, what)


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The snapshot at ``path``, read untrusted (:func:`loads`); a bad path or a file
    error is the AML error of :mod:`aml_core.files`."""
    files.path(path, "the snapshot's path")
    what = f"the snapshot {os.fsdecode(path)!r}"
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise files.error(exc, f"reading {what}") from None
    return loads(data, what)


def _fail(what: str, where: str, why: str) -> AMLValueError:
    return AMLValueError(f"{what} is not a memory snapshot: {where} {why}")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: object) -> bool:
    return (isinstance(v, int | float)) and not isinstance(v, bool)


def check(value: object, what: str = "the snapshot") -> dict[str, Any]:
    """``value`` as a snapshot dict: PyTorch's ``_snapshot()`` format (``segments``, a
    list of dicts with an int ``address`` and ``total_size`` and a list of ``blocks``,
    each a dict with an int ``size`` and a str ``state``; ``device_traces``, a list of
    lists of dicts with a str ``action`` and an int ``size``), or an old PyTorch
    snapshot, a list of segments (read as ``{"segments": value, "device_traces": []}``).
    Other keys are kept unchecked. AMLValueError naming the first thing wrong."""
    if isinstance(value, list):
        value = {"segments": value, "device_traces": []}
    if not isinstance(value, dict):
        raise _fail(what, "its top level is", f"a {type(value).__name__}, not a dict")
    segments = value.get("segments", [])
    traces = value.get("device_traces", [])
    if not isinstance(segments, list):
        raise _fail(what, "'segments' is", f"a {type(segments).__name__}, not a list")
    if not isinstance(traces, list):
        raise _fail(what, "'device_traces' is", f"a {type(traces).__name__}, not a list")
    for i, s in enumerate(segments):
        where = f"segment {i}"
        if not isinstance(s, dict):
            raise _fail(what, where, f"is a {type(s).__name__}, not a dict")
        for key in ("address", "total_size"):
            if not _is_int(s.get(key)):
                raise _fail(what, where, f"has no int {key!r}")
        if "device" in s and not _is_int(s["device"]):
            raise _fail(what, where, "has a 'device' that is not an int")
        blocks = s.get("blocks")
        if not isinstance(blocks, list):
            raise _fail(what, where, "has no list of 'blocks'")
        for j, b in enumerate(blocks):
            if not isinstance(b, dict) or not _is_int(b.get("size")) or not isinstance(b.get("state"), str):
                raise _fail(
                    what, f"block {j} of {where}", "is not a dict with an int 'size' and a str 'state'"
                )
            if "requested_size" in b and not _is_int(b["requested_size"]):
                raise _fail(what, f"block {j} of {where}", "has a 'requested_size' that is not an int")
    for d, trace in enumerate(traces):
        if not isinstance(trace, list):
            raise _fail(what, f"the trace of device {d}", f"is a {type(trace).__name__}, not a list")
        for k, e in enumerate(trace):
            where = f"event {k} of device {d}'s trace"
            if not isinstance(e, dict) or not isinstance(e.get("action"), str) or not _is_int(e.get("size")):
                raise _fail(what, where, "is not a dict with a str 'action' and an int 'size'")
            if e.get("time_us") is not None and not _number(e["time_us"]):
                raise _fail(what, where, "has a 'time_us' that is not a number")
    return value
