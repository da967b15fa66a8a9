"""The fuzz targets (issue 32, item 9): aml's parsers and handle decoders, each fed
arbitrary bytes. A target may raise an :class:`~aml_core.errors.AMLError` (the input is
refused) and nothing else: any other exception, a crash or a hang is a bug.

* ``snapshot``: a snapshot file's bytes (``aml_core.snapshot_file.loads``: the plot tool
  and every reader of snapshots);
* ``ipc_handle``: an IPC handle's fields as a tampered pickle gives them (every type):
  made (the validators), set on a real handle and opened as every importer checks it
  (``importable``), restored from a pickle's state (``__setstate__``), the host memfd
  handle's decoder, and each GPU backend's decoder of its native handle, as its importer
  runs it before any native call (:data:`NATIVE_DECODERS`: CUDA's and HIP's 64 bytes,
  HSA's ``hsa_amd_ipc_memory_t``, aml-ze's handle with its exporter's pid, device and fd);
* ``info_json``: JSON read back by the ``aml info --json`` codec (a probe's answer);
* ``cli_args``: the ``aml`` command's arguments (usage errors are argparse's exit 2).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from aml_core import checks, codec, snapshot_file
from aml_core.cli import build_parser
from aml_core.errors import AMLError
from aml_core.host import ipc as host_ipc
from aml_core.ipc import IpcHandle, importable, revalidate

__all__ = ["TARGETS", "run"]


def snapshot(data: bytes) -> None:
    snapshot_file.loads(data)


_VALID = IpcHandle(backend="host", device=0, size=4096, data=b"x" * 41, pid=1)
_FIELDS = ("backend", "device", "size", "data", "pid", "offset")


def _values(data: bytes) -> list[object]:
    """Values of every type a tampered pickle can hold, drawn from ``data``."""
    out: list[object] = []
    i = 0
    while i < len(data) and len(out) < len(_FIELDS):
        kind, i = data[i] % 8, i + 1
        chunk = data[i : i + 9]
        i += 9
        n = int.from_bytes(chunk[1:], "little", signed=True) if chunk else 0
        out.append(
            [
                n,
                n << (chunk[0] % 80) if chunk else 0,
                chunk,
                chunk.decode("latin-1"),
                None,
                float(n),
                bool(n & 1),
                [n],
            ][kind]
        )
    return out


def ipc_handle(data: bytes) -> None:
    values = _values(data)
    fields = dict(zip(_FIELDS, values, strict=False))
    with contextlib.suppress(AMLError):
        IpcHandle(**{**_fields(_VALID), **fields})  # type: ignore[arg-type]
    tampered = copy.copy(_VALID)
    for name, value in fields.items():
        object.__setattr__(tampered, name, value)
    with contextlib.suppress(AMLError):
        revalidate(tampered)
    with contextlib.suppress(AMLError):
        handle = importable(tampered, "host")
        host_ipc._parse(handle)
    with contextlib.suppress(AMLError):
        host_ipc._parse(IpcHandle(backend="host", device=0, size=4096, data=data[:1024] or b"\0", pid=2))
    state = {**_fields(_VALID), **fields}
    if data[:1] == b"\0":
        state.pop("offset", None)  # aml 0.2's handles
    elif data[:1] == b"\1":
        state["extra"] = 1
    restored = IpcHandle.__new__(IpcHandle)
    with contextlib.suppress(AMLError):
        restored.__setstate__(state)
    for size in (64, 8, 1024):
        with contextlib.suppress(AMLError):
            checks.handle_bytes(fields.get("data", data[:64]), size, "a fuzzed native IPC handle")
    native = fields.get("data", data)
    _native(native if isinstance(native, bytes) else data)


def _backend_module(package: str, module: str) -> object | None:
    """``package.module`` of a backend, installed or from this checkout's backends/
    (None where it cannot be imported)."""
    if importlib.util.find_spec(package) is None:
        tree = Path(__file__).resolve().parents[2] / "backends" / package.removeprefix("aml_")
        if not (tree / package).is_dir():
            return None
        sys.path.append(str(tree))
    try:
        return importlib.import_module(f"{package}.{module}")
    except ImportError:
        return None


def _native_decoders() -> dict[str, Callable[[bytes], object]]:
    """Each GPU backend's decoder of the native part of an IPC handle: the bytes its
    importer reads before any native call (aml_core.gpu.ops_sharing.ipc_open_handle: the
    size check, then the backend's own decoding where it has one)."""
    from aml_core.gpu.runtime import RuntimeTraits

    generic = RuntimeTraits.__attrs_attrs__.ipc_handle_size.default  # type: ignore[attr-defined]
    decoders: dict[str, Callable[[bytes], object]] = {
        name: lambda data, n=generic, name=name: checks.handle_bytes(data, n, f"a {name} IPC handle")
        for name in ("cuda", "hip")  # their runtimes keep the traits' default: 64 bytes, opaque
    }
    hsa = _backend_module("aml_hsa", "abi")
    if hsa is not None:
        size = hsa.IPC_HANDLE_SIZE  # type: ignore[attr-defined]
        decoders["hsa"] = lambda data: checks.handle_bytes(data, size, "an hsa IPC handle")
    ze = _backend_module("aml_ze", "ipc")
    if ze is not None:
        decoders["ze"] = ze.ZeIpc.parse_ipc_handle  # type: ignore[attr-defined]
    return decoders


#: The GPU backends' native-handle decoders the ``ipc_handle`` target runs (by backend).
NATIVE_DECODERS = _native_decoders()


def _native(data: bytes) -> None:
    """Each backend's native decoder on ``data``, and on ``data`` made to look like that
    backend's handle (aml-ze's magic and a zero reserved word in place, so that the
    decoder reaches its pid, device and fd checks)."""
    ze = _backend_module("aml_ze", "ipc") if "ze" in NATIVE_DECODERS else None
    for name, decode in NATIVE_DECODERS.items():
        candidates = [data, data[:64], data[:32]]
        if name == "ze" and ze is not None:
            body = (data[1:] + bytes(80))[: ze.IPC_HANDLE_SIZE]  # type: ignore[attr-defined]
            tail = 64
            candidates.append(body[:tail] + b"AMZE" + body[tail + 4 : tail + 12] + bytes(4))
        for candidate in candidates:
            with contextlib.suppress(AMLError):
                decode(candidate)


def _fields(handle: IpcHandle) -> dict[str, object]:
    return {f: getattr(handle, f) for f in _FIELDS}


def info_json(data: bytes) -> None:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):  # not JSON: json's error, before aml reads anything
        return
    with contextlib.suppress(AMLError):
        codec.result_from_json(value)
    with contextlib.suppress(AMLError):
        codec.device_from_json(value)
    if isinstance(value, dict) and isinstance(value.get("devices"), list):
        for d in value["devices"]:
            with contextlib.suppress(AMLError):
                codec.device_from_json(d)


def cli_args(data: bytes) -> None:
    argv = data.decode("utf-8", "replace").split("\0")[:8]
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:  # argparse: --help/--version 0, a usage error 2
            if exc.code not in (0, 2):
                raise AssertionError(f"the parser exited with {exc.code!r}") from None


TARGETS: dict[str, Callable[[bytes], None]] = {
    "snapshot": snapshot,
    "ipc_handle": ipc_handle,
    "info_json": info_json,
    "cli_args": cli_args,
}

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def run(name: str, data: bytes) -> None:
    """``TARGETS[name](data)``: an AMLError is a refusal, fine."""
    with contextlib.suppress(AMLError):
        TARGETS[name](data)
