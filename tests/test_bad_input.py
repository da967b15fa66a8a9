"""Every rule for bad input, in one table: each case gets its documented exception and
AML code, and none crashes the interpreter or leaks a mapping."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aml_core
from aml_core import Buffer, ErrorCode
from aml_core import errors as E
from aml_core.host import HostArea
from aml_core.registry import Registry

from . import plugins as P


class Env:
    """A fresh area, a second area, a live buffer and a freed buffer per case."""

    def __init__(self) -> None:
        self.area = HostArea()
        self.other = HostArea()
        self.live = self.area.mmap(8192)
        self.freed = self.area.mmap(4096)
        self.freed_ptr = self.freed.ptr
        self.area.munmap(self.freed)
        self.foreign = self.other.mmap(4096)

    def closed_area(self) -> HostArea:
        area = HostArea()
        area.close()
        return area

    def close(self) -> None:
        self.area.close()
        self.other.close()


def _registry_with(plugin: object) -> Registry:
    reg = Registry(group="aml.backends.__isolated_for_tests__", builtins=False)
    reg.register(plugin, name="bad")
    return reg


def _status_reason(plugin: object) -> str:
    statuses = _registry_with(plugin).statuses()
    assert not any(s.available for s in statuses)
    return statuses[0].reason


def _plugin_failing_import(env: Env) -> Any:
    """An installed plugin whose module raises on import: its backend is unavailable."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "aml_broken_import_mod.py").write_text("raise ImportError('libfoo.so.1 not found')\n")
        dist = root / "aml_broken-0.1.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: aml-broken\nVersion: 0.1\n")
        (dist / "entry_points.txt").write_text("[aml.bad_input_backends]\nbroken = aml_broken_import_mod\n")
        sys.path.insert(0, tmp)
        try:
            reg = Registry(group="aml.bad_input_backends", builtins=False)
            assert "import failed" in reg.statuses()[0].reason
            return reg.area(aml_core.AreaSpec("host"))
        finally:
            sys.path.remove(tmp)


CASES: list[tuple[str, Callable[[Env], Any], type[BaseException], ErrorCode | None]] = [
    # sizes
    ("size zero", lambda e: e.area.mmap(0), E.AMLValueError, ErrorCode.EINVAL),
    ("size negative", lambda e: e.area.mmap(-4096), E.AMLValueError, ErrorCode.EINVAL),
    ("size float", lambda e: e.area.mmap(4096.0), E.AMLTypeError, ErrorCode.EINVAL),
    ("size str", lambda e: e.area.mmap("4096"), E.AMLTypeError, ErrorCode.EINVAL),
    ("size bool", lambda e: e.area.mmap(True), E.AMLTypeError, ErrorCode.EINVAL),
    ("size beyond the address space", lambda e: e.area.mmap(1 << 64), E.AMLDomainError, ErrorCode.EDOM),
    ("size the kernel refuses", lambda e: e.area.mmap((1 << 63) - 4096), E.AMLMemoryError, ErrorCode.ENOMEM),
    # options and flags
    ("options wrong type", lambda e: e.area.mmap(4096, options=[1]), E.AMLTypeError, ErrorCode.EINVAL),
    (
        "options unknown key",
        lambda e: e.area.mmap(4096, options={"colour": 1}),
        E.AMLTypeError,
        ErrorCode.EINVAL,
    ),
    (
        "unknown mmap flag bits",
        lambda e: e.area.mmap(4096, options={"flags": 1 << 30}),
        E.AMLValueError,
        ErrorCode.EINVAL,
    ),
    ("bad prot", lambda e: e.area.mmap(4096, options={"prot": 7}), E.AMLValueError, ErrorCode.EINVAL),
    ("alignment not a power of two", lambda e: HostArea(alignment=3000), E.AMLValueError, ErrorCode.EINVAL),
    ("unknown policy", lambda e: HostArea("scatter", [0]), E.AMLValueError, ErrorCode.EINVAL),
    # node sets
    ("node outside the allowed set", lambda e: HostArea("bind", [4096]), E.AMLDomainError, ErrorCode.EDOM),
    ("negative node", lambda e: HostArea("bind", [-1]), E.AMLDomainError, ErrorCode.EDOM),
    ("node not an int", lambda e: HostArea("bind", ["0"]), E.AMLTypeError, ErrorCode.EINVAL),
    ("bind without nodes", lambda e: HostArea("bind", []), E.AMLValueError, ErrorCode.EINVAL),
    ("default policy with nodes", lambda e: HostArea("default", [0]), E.AMLValueError, ErrorCode.EINVAL),
    # munmap
    ("munmap foreign pointer", lambda e: e.area.munmap(e.foreign.ptr), E.AMLValueError, ErrorCode.EINVAL),
    ("munmap another area's buffer", lambda e: e.area.munmap(e.foreign), E.AMLValueError, ErrorCode.EINVAL),
    ("munmap offset pointer", lambda e: e.area.munmap(e.live.ptr + 100), E.AMLValueError, ErrorCode.EINVAL),
    ("munmap freed buffer", lambda e: e.area.munmap(e.freed), E.AMLValueError, ErrorCode.EINVAL),
    ("munmap freed pointer", lambda e: e.area.munmap(e.freed_ptr), E.AMLValueError, ErrorCode.EINVAL),
    ("munmap wrong size", lambda e: e.area.munmap(e.live, 4096), E.AMLValueError, ErrorCode.EINVAL),
    ("munmap wrong type", lambda e: e.area.munmap(3.0), E.AMLTypeError, ErrorCode.EINVAL),
    ("munmap NULL", lambda e: e.area.munmap(0), E.AMLValueError, ErrorCode.EINVAL),
    # closed area, freed buffer
    ("mmap on a closed area", lambda e: e.closed_area().mmap(4096), E.AMLValueError, ErrorCode.EINVAL),
    ("munmap on a closed area", lambda e: e.closed_area().munmap(1), E.AMLValueError, ErrorCode.EINVAL),
    ("view a freed buffer", lambda e: memoryview(e.freed), BufferError, None),
    ("DLPack of a freed buffer", lambda e: e.freed.__dlpack__(), BufferError, None),
    ("freed buffer via free()", lambda e: e.freed.free(), E.AMLValueError, ErrorCode.EINVAL),
    # plugins
    ("plugin import raises", _plugin_failing_import, E.AMLNotSupported, ErrorCode.ENOTSUP),
    (
        "plugin hook raises",
        lambda e: _registry_with(P.RaisingHook()).area(aml_core.AreaSpec("host")),
        E.AMLNotSupported,
        ErrorCode.ENOTSUP,
    ),
    (
        "plugin probe raises",
        lambda e: _registry_with(P.Plugin(P.descriptor("x", 1, probe=P.raising_probe))).area(
            aml_core.AreaSpec("host")
        ),
        E.AMLNotSupported,
        ErrorCode.ENOTSUP,
    ),
    (
        "plugin area creation raises",
        lambda e: _registry_with(P.Plugin(P.descriptor("x", 1, create=P.raising_create))).area(
            aml_core.AreaSpec("host")
        ),
        E.AMLNotSupported,
        ErrorCode.ENOTSUP,
    ),
    (
        "plugin area creation returns None",
        lambda e: _registry_with(P.Plugin(P.descriptor("x", 1, create=P.none_create))).area(
            aml_core.AreaSpec("host")
        ),
        E.AMLNotSupported,
        ErrorCode.ENOTSUP,
    ),
]


def _run(action: Callable[[Env], Any], env: Env) -> None:
    result = action(env)
    if isinstance(result, (Buffer, aml_core.Area)):  # a failure of the test: don't leak it
        result.close() if isinstance(result, aml_core.Area) else result.free()


@pytest.mark.parametrize(("case", "action", "error", "code"), CASES, ids=[c[0] for c in CASES])
def test_bad_input(
    case: str, action: Callable[[Env], Any], error: type[BaseException], code: ErrorCode | None
) -> None:
    env = Env()
    try:
        before = env.area.stats
        with pytest.raises(error) as info:
            _run(action, env)
        if code is not None:
            assert isinstance(info.value, E.AMLError)
            assert info.value.code is code
            assert str(info.value)
        after = env.area.stats
        assert after.live_mappings == before.live_mappings, "a failed call must not leak a mapping"
        assert not env.live.freed
    finally:
        env.close()


def test_plugin_failure_reasons_are_reported() -> None:
    assert "hook exploded" in _status_reason(P.RaisingHook())
    assert "probe failed: OSError: driver crashed" in _status_reason(
        P.Plugin(P.descriptor("x", 1, probe=P.raising_probe))
    )


_HANDLE_FIELDS: dict[str, object] = {"backend": "memfd", "device": 0, "size": 4096, "data": b"x", "pid": 1}


@pytest.mark.parametrize(
    "state",
    [
        {**_HANDLE_FIELDS, "offset": 0, "generation": 2},  # a later aml's extra field
        {"backend": "memfd", "size": 4096},  # fields missing
        "not a state",
        (1, 2, 3),
    ],
)
def test_an_ipc_handle_of_another_aml_version_is_a_clear_error(state: object) -> None:
    # What pickle.loads does with a handle whose state this aml does not know (the
    # __reduce_ex__ of a frozen attrs record): AMLValueError naming both versions.
    import copyreg
    import pickle

    class Foreign:
        def __reduce_ex__(self, protocol: object) -> tuple[object, ...]:
            return (copyreg._reconstructor, (aml_core.IpcHandle, object, None), state)

    data = pickle.dumps(Foreign())
    with pytest.raises(
        E.AMLValueError, match=f"aml {aml_core.__version__} cannot read.*aml 0.2 and later"
    ) as info:
        pickle.loads(data)
    assert info.value.code is ErrorCode.EINVAL


def test_an_ipc_handle_round_trips_and_reads_attrs_tuple_states() -> None:
    import pickle

    handle = aml_core.IpcHandle(**_HANDLE_FIELDS, offset=4096)  # type: ignore[arg-type]
    assert pickle.loads(pickle.dumps(handle)) == handle
    old = aml_core.IpcHandle.__new__(aml_core.IpcHandle)
    old.__setstate__(tuple(_HANDLE_FIELDS.values()))  # attrs < 22.2 pickled a tuple (aml 0.2's five fields)
    assert old == aml_core.IpcHandle(**_HANDLE_FIELDS)  # type: ignore[arg-type]
    assert old.offset == 0
