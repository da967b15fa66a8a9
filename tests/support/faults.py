"""Fault injection into every native function a driver double exports (issue 9), written
once for every backend tested on a C double (:mod:`tests.support.doubles`).

A backend describes its table with a :class:`FaultTable` in ``tests/<name>_faults.py``:
its public operations (each registers what it makes in ``made``, so that a failed run can
be closed again), the native codes to inject (one for each AML class its error table
gives, and one the table does not know), the functions no operation calls (with why) and
the failures an operation may absorb (with why). Run as ``python <name>_faults.py
OPERATION`` with the double's environment, the file calls :func:`main`:

1. the operation runs once without faults, to learn which native functions it calls and
   how often (the double's call counters);
2. for each such function, each of its first :attr:`FaultTable.max_occurrences` calls and
   each injected code, the operation runs again with that one call failing;
3. each run must raise the :class:`~aml_core.errors.AMLError` the backend's table gives the
   code (its class and code), whose native cause is the failed function with that code and
   its native name; or succeed, where :attr:`FaultTable.tolerated` says why the operation
   absorbs that failure;
4. the objects the run made are closed again (the caller's retry), the backend's tracking
   must be empty and, once the backend is forgotten, every live counter of the double zero;
5. double faults (issue 20): for each run of step 2 that raised (with the first injected
   code), each give-back function (:meth:`FaultTable.give_back_functions`) that the failed run
   called is failed too, at its last call of that run (the give-back the first failure
   triggered): the run must raise the first failure's documented error (the give-back's
   failure is a note), and what it could not give back must stay tracked: closing again
   (retried once, when the first retry reports the failed free) frees it, and every live
   counter is zero after. A last call that was not a give-back of the first failure fails
   before it, so the run raises with the give-back as its cause: that is a single fault of
   step 2, and is dropped.

The test side (:class:`FaultSuite`) runs each operation in its own process, so that a
crash is one failed operation with its signal, and checks that every native function
:func:`exported_functions` finds in the library (``nm -D``) is called by an operation or
listed in :attr:`FaultTable.not_called`: a function added to a double cannot go untested.
A backend's ``test_<name>_faults.py`` takes its two tests from :func:`fault_tests`; the
operations every GPU backend's table has (IPC export and open, virtual memory) are
:class:`GpuOperations`.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import attrs

from aml_core.area import Area
from aml_core.errors import AMLError, ErrorCode, error_class
from aml_core.gpu._vmm_api import VirtualMemoryApi
from aml_core.gpu.vmm import Access
from aml_core.ipc import IpcHandle

from .ipc_peer import IpcPeer

__all__ = [
    "DEVICE_COUNT",
    "FaultSuite",
    "FaultTable",
    "GIVE_BACK",
    "GpuOperations",
    "Made",
    "Operation",
    "PeerExport",
    "Rule",
    "Tolerated",
    "Undo",
    "exported_functions",
    "fault_tests",
    "main",
    "run",
    "undo",
]

#: What an operation made and must be closed again after a failure (objects with
#: ``close()``; closed newest first).
Made = list[Any]
#: A public operation of the backend: makes its objects, uses them and closes them.
Operation = Callable[[Made], None]


class Undo:
    """A pending clean-up step as an object with ``close()`` (for the calls that make no
    object: a raw reservation, a handle, a mapping). Register it in ``made`` when the
    thing exists, and finish it with :func:`undo`, which drops it from ``made`` only once
    it succeeded: a failed clean-up stays for the retry."""

    def __init__(self, what: str, close: Callable[[], object]) -> None:
        self.what = what
        self._close = close

    def close(self) -> None:
        self._close()

    def __repr__(self) -> str:
        return f"<undo {self.what}>"


def undo(made: Made, step: Undo) -> None:
    """Run ``step`` now; on success it leaves ``made`` (on failure it stays there)."""
    step.close()
    made.remove(step)


class PeerExport:
    """A device buffer exported by a second process, for operations that open IPC handles
    (the importer's calls): an :class:`~tests.support.ipc_peer.IpcPeer` on the same
    double, started on first use, maps ``size`` bytes starting with ``data``, exports them
    and keeps them until the fault process ends. Each run then opens, reads and closes."""

    def __init__(self, double: type[Any], size: int, data: bytes) -> None:
        self.double, self.size, self.data = double, size, data
        self._handle: IpcHandle | None = None

    def handle(self) -> IpcHandle:
        if self._handle is None:
            double = self.double(Path(os.environ[self.double.library_var]))
            peer = IpcPeer(f"{self.double.__module__}:{self.double.__qualname__}", double.env())
            atexit.register(peer.stop)
            _, self._handle = peer.export(self.size, self.data)
        return self._handle


class GpuOperations:
    """The operations of a GPU backend's table written once over :mod:`aml_core.gpu`'s API:
    ``ipc-export``, ``ipc-open``, ``vm-mmap-growable`` and ``vm-steps``.

    ``backend``: the backend's package (``ipc_open``, ``ipc_close``, ``virtual_memory``);
    ``double``: its :class:`~tests.support.double_fixtures.DriverDouble` (the peer that
    exports the handle ``ipc-open`` opens); ``area(made)``: a device area whose buffers
    export IPC handles, registered in ``made``; ``read(buffer, size)``: how ``ipc-open``
    reads the peer's bytes through the opened buffer (None: it does not read); ``share``:
    what ``vm-steps`` does with an fd of its physical allocation (None: nothing, not
    exportable; ``"export"``: export and close it; ``"import"``: export, import and release
    the import)."""

    def __init__(
        self,
        backend: Any,
        double: type[Any],
        area: Callable[[Made], Any],
        *,
        read: Callable[[Any, int], bytes] | None = None,
        share: str | None = None,
    ) -> None:
        self.backend, self.area, self.read, self.share = backend, area, read, share
        #: A buffer another process exported (the ipc-open operation is the importer).
        self.shared = PeerExport(double, 8192, b"exported by the peer")

    def ipc_export(self, made: Made) -> None:
        """Export a device buffer; freeing it releases the handle."""
        area = self.area(made)
        buf = area.mmap(8192)
        export = area.ipc_export(buf)
        assert export.handle.size == 8192
        area.munmap(buf)
        area.close()

    def ipc_open(self, made: Made) -> None:
        """Open a handle another process exported (twice: the importer's cache), read
        through it, close both opens."""
        backend, handle = self.backend, self.shared.handle()
        buf = backend.ipc_open(handle)
        opened = Undo("ipc_close", lambda: backend.ipc_close(buf))
        made.append(opened)
        if self.read is not None:
            assert self.read(buf, len(self.shared.data)) == self.shared.data
        backend.ipc_close(backend.ipc_open(handle))
        undo(made, opened)

    def vm_mmap(self, made: Made) -> None:
        """Virtual memory in one step: a buffer, and a growable buffer grown."""
        vm = self.backend.virtual_memory(0)
        made.append(vm)
        g = vm.granularity()
        buf = vm.mmap(g)
        vm.munmap(buf)
        grow = vm.growable(4 * g)
        grow.grow(2 * g)
        vm.munmap(grow)
        vm.close()

    def vm_steps(self, made: Made) -> None:
        """The shared virtual-memory API step by step (and the fd of ``share``)."""
        vm = self.backend.virtual_memory(0)
        made.append(vm)
        g = vm.granularity(recommended=True)
        res = vm.reserve(g)
        phys = vm.create(g, exportable=self.share is not None)
        vm.map(res.ptr, g, phys)
        vm.set_access(res.ptr, g, Access.READWRITE)
        vm.get_access(res.ptr)
        vm.properties(phys)
        again = vm.retain(res.ptr)
        vm.release(again)
        if self.share == "export":
            os.close(vm.export_fd(phys))
        elif self.share == "import":
            fd = vm.export_fd(phys)
            made.append(Undo(f"close fd {fd}", lambda: os.close(fd)))
            vm.release(vm.import_fd(fd, g))
        vm.unmap(res.ptr, g)
        vm.release(phys)
        vm.address_free(res)
        vm.close()


def exported_functions(library: Path | str, control_prefix: str) -> list[str]:
    """The functions a double exports (``nm -D --defined-only``: its defined text
    symbols), less its control functions ``<control_prefix>_*``, sorted."""
    proc = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"nm -D {library} failed (binutils is needed): {proc.stderr.strip()}")
    names = set()
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in ("T", "t", "W", "i"):
            names.add(parts[2].split("@", 1)[0])
    return sorted(n for n in names if not n.startswith(f"{control_prefix}_"))


def _mapping(value: Mapping[Any, Any]) -> dict[Any, Any]:
    return dict(value)


@attrs.frozen
class Rule:
    """A call whose failure the specification gives other AML codes than the table:
    ``codes(native code, the table's AML code)`` are the codes it may raise; ``why`` says
    where that is written."""

    why: str
    codes: Callable[[int, ErrorCode], Collection[ErrorCode]]


#: Counting devices (``hipGetDeviceCount``, ``cuDeviceGetCount``...): where aml_core.gpu
#: checks that a device is usable before making an area, a stream or virtual memory
#: (:func:`aml_core.gpu.devices.usable_device_count`) a failure other than ENOTSUP is
#: FAILURE; anywhere else (a device index checked later) it is the table's code.
DEVICE_COUNT = Rule(
    "aml_core.gpu.devices.usable_device_count: a failure to count other than ENOTSUP is FAILURE "
    "when a device is first checked usable",
    lambda native, code: {code, ErrorCode.FAILURE},
)


#: A native function that gives back what another made, by its name (HIP, Level Zero, HSA,
#: CUDA spellings): the second failure of a double fault.
GIVE_BACK = re.compile(
    r"(Free|FreeAsync|Release|Destroy|Unregister|Unmap|CloseMemHandle|CloseIpcHandle"
    r"|_free|_release|_destroy|_unmap|_detach|_deregister)$"
)


@attrs.frozen
class Tolerated:
    """A function whose failure with one of ``codes`` an operation absorbs (the
    specification says so, ``why``); its other codes must raise their error."""

    codes: frozenset[int] = attrs.field(converter=frozenset)
    why: str

    def names(self, names: Mapping[int, str]) -> str:
        return ", ".join(names.get(c, str(c)) for c in sorted(self.codes))


@attrs.frozen
class FaultTable:
    """One backend's fault table (see the module doc)."""

    #: The backend's test double class (a :class:`~tests.support.double_fixtures.DriverDouble`):
    #: its ``ctl``, ``forget()``, ``live()``, ``tracked()`` and ``emulate_devices()``.
    double: type[Any]
    #: The public operations, by name.
    operations: Mapping[str, Operation] = attrs.field(converter=_mapping)
    #: The native codes injected, each with its native name (from the headers).
    codes: Mapping[int, str] = attrs.field(converter=_mapping)
    #: The backend's translation of a native code (its error table's ``translate``).
    translate: Callable[[int], ErrorCode]
    #: Exported functions no operation calls, with why (the coverage test checks the list).
    not_called: Mapping[str, str] = attrs.field(converter=_mapping, factory=dict)
    #: Functions whose failure an operation may absorb (it succeeds anyway), with why;
    #: ``"function@operation"`` tolerates it in that operation only. A :class:`Tolerated`
    #: names the native codes absorbed (any other code must raise); a str absorbs every code.
    tolerated: Mapping[str, str | Tolerated] = attrs.field(converter=_mapping, factory=dict)
    #: Functions whose failure the specification gives its own AML code.
    rules: Mapping[str, Rule] = attrs.field(converter=_mapping, factory=dict)
    #: Devices the double emulates during a run (and the memory of each).
    devices: int = 1
    device_memory: int = 1 << 30
    #: Calls of one function failed in turn, per operation.
    max_occurrences: int = 3
    #: The native functions that give back what another call made, the second failures of
    #: the double-fault runs; empty: the double's exported functions whose name says so
    #: (:data:`GIVE_BACK`: frees, releases, unregisters, destroys, unmaps, IPC closes).
    give_backs: frozenset[str] = attrs.field(converter=frozenset, factory=frozenset)

    #: The double's live kinds that count the memory an area maps (``device``, ``host``...):
    #: after a double fault, before closing again, they must sum to the live mappings the
    #: operation's areas track (nothing untracked). Empty: not checked.
    memory_kinds: tuple[str, ...] = ()
    #: Double faults that still lose what they took (a bug, reported: the test of each is
    #: an xfail with ``strict=True``): ``"operation:function+give_back"`` with the path.
    double_fault_leaks: Mapping[str, str] = attrs.field(converter=_mapping, factory=dict)

    def give_back_functions(self, functions: Collection[str]) -> frozenset[str]:
        """The give-back functions among ``functions`` (:attr:`give_backs`, or by name)."""
        if self.give_backs:
            return self.give_backs & frozenset(functions)
        return frozenset(f for f in functions if GIVE_BACK.search(f))

    def expected(self, function: str, code: int) -> frozenset[ErrorCode]:
        """The AML codes a failure of ``function`` with ``code`` may raise (the table's,
        unless a rule says otherwise)."""
        aml = self.translate(code)
        rule = self.rules.get(function)
        return frozenset(rule.codes(code, aml)) if rule is not None else frozenset({aml})


def _close_again(made: Made, retries: int = 0) -> list[str]:
    """The caller's retry: close everything the operation made (newest first); an object
    whose close fails is closed again up to ``retries`` more times (its problem reported
    only if the last close fails too)."""
    problems: list[str] = []
    for obj in reversed(made):
        for attempt in range(retries + 1):
            try:
                obj.close()
                break
            except AMLError as exc:  # the fault was one call: a second close must work
                if attempt == retries:
                    problems.append(f"closing {obj!r} again failed: {exc}")
    return problems


def _area_mappings(obj: object) -> int:
    """The live mappings ``obj`` tracks if it is an area of :attr:`FaultTable.memory_kinds`
    (a pool's slabs are its area's; virtual memory is counted by its own kinds, and its
    leaks by the live counters after closing again)."""
    if isinstance(obj, Area) and not isinstance(obj, VirtualMemoryApi):
        return int(obj._stats()[2])
    return 0


def _describe(exc: AMLError) -> dict[str, Any]:
    cause = exc.native
    return {
        "error": type(exc).__name__,
        "aml_code": exc.code.name,
        "cause": None if cause is None else [cause.function, cause.code, cause.name],
        "text": (str(exc) + " " + " ".join(getattr(exc, "__notes__", [])))[:400],
    }


def run(table: FaultTable, name: str) -> dict[str, Any]:
    """Run operation ``name`` of ``table`` once without faults, then once per (function it
    calls, occurrence, injected code); return ``{"used": {function: calls}, "runs": [...]}``
    (what each run raised, what closing again reported, what the backend still tracked and
    the double's live counters after)."""
    double = table.double(Path(os.environ[table.double.library_var]))
    ctl = double.ctl
    operation = table.operations[name]
    functions = exported_functions(double.path, ctl.PREFIX)

    def fresh() -> None:
        ctl.reset()
        double.forget()
        double.emulate_devices(table.devices, table.device_memory)

    fresh()
    operation([])
    used = {f: n for f in functions if (n := int(ctl.calls(f)))}
    double.forget()
    runs: list[dict[str, Any]] = []
    give_backs = table.give_back_functions(functions)

    def attempt(entry: dict[str, Any], retries: int) -> dict[str, int]:
        """Run the operation with the injections made, record into ``entry``; return the
        give-back calls it made (before closing again). With ``retries`` (a double fault),
        also record the memory the double holds that no area of the operation tracks."""
        made: Made = []
        try:
            operation(made)
        except AMLError as exc:
            entry.update(_describe(exc))
        except BaseException as exc:  # a bare error: reported, the table test fails it
            entry["bare"] = f"{type(exc).__name__}: {exc}"[:400]
        gave_back = {g: n for g in sorted(give_backs) if (n := int(ctl.calls(g)))}
        if retries and table.memory_kinds:
            held = sum(int(ctl.live(kind)) for kind in table.memory_kinds)
            tracked = sum(_area_mappings(obj) for obj in made)
            if held != tracked:
                entry["untracked"] = f"the double holds {held} mappings, the areas track {tracked}"
        entry["close_problems"] = _close_again(made, retries)
        entry["tracked"] = {k: v for k, v in double.tracked().items() if v}
        try:
            double.forget()
        except AMLError as exc:  # the backend's own objects could not be destroyed
            entry["close_problems"].append(f"forgetting the backend failed: {exc}")
        entry["live"] = {k: v for k, v in double.live().items() if v}
        return gave_back

    first_code = next(iter(table.codes))
    for function, n in sorted(used.items()):
        for k in range(min(n, table.max_occurrences)):
            for code in table.codes:
                fresh()
                ctl.inject(function, code, k, 1)
                entry: dict[str, Any] = {"function": function, "occurrence": k, "code": code}
                gave_back = attempt(entry, 0)
                runs.append(entry)
                if code != first_code or "error" not in entry:
                    continue
                for give_back, calls in gave_back.items():
                    if give_back == function:
                        continue
                    fresh()
                    ctl.inject(function, code, k, 1)
                    ctl.inject(give_back, code, calls - 1, 1)
                    double_entry: dict[str, Any] = {
                        "function": function,
                        "occurrence": k,
                        "code": code,
                        "give_back": give_back,
                        "give_back_occurrence": calls - 1,
                    }
                    attempt(double_entry, 1)
                    cause = double_entry.get("cause")
                    if cause is None or cause[0] == function:  # else a single fault of give_back
                        runs.append(double_entry)
    ctl.reset()
    return {"operation": name, "used": used, "runs": runs}


def main(table: FaultTable, argv: list[str] | None = None) -> int:
    """The fault process: ``python <name>_faults.py OPERATION`` prints :func:`run`'s result
    as one JSON line."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in table.operations:
        print(f"usage: {sys.argv[0]} OPERATION ({', '.join(table.operations)})", file=sys.stderr)
        return 2
    print(json.dumps(run(table, args[0])))
    return 0


class FaultSuite:
    """The test side of a fault table: run an operation's process and judge its runs,
    and check that the table covers every function the double exports."""

    def __init__(self, table: FaultTable, script: Path | str) -> None:
        self.table = table
        self.script = Path(script)
        self._used: dict[str, set[str]] = {}
        self._results: dict[str, dict[str, Any]] = {}

    def run(self, operation: str, env: Mapping[str, str], timeout: float = 300) -> dict[str, Any]:
        """Run ``operation`` in its own process; its result (a crash fails with its stderr).
        Run once per suite: a later call gives the same result."""
        if operation in self._results:
            return self._results[operation]
        proc = subprocess.run(
            [sys.executable, str(self.script), operation],
            capture_output=True,
            text=True,
            env=dict(env),
            timeout=timeout,
            check=False,
        )
        if proc.returncode != 0:
            raise AssertionError(
                f"{operation}: the fault process died (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
            )
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        self._used[operation] = set(result["used"])
        self._results[operation] = result
        return result

    def problems(self, result: Mapping[str, Any], only: str | None = None) -> list[str]:
        """What is wrong with an operation's runs (empty: every run was clean): all but the
        known :attr:`FaultTable.double_fault_leaks`, or ``only`` that one."""
        table = self.table
        found: list[str] = []
        for run_ in result["runs"]:
            key = f"{result['operation']}:{run_['function']}+{run_.get('give_back')}"
            if (key == only) != (only is not None) or (only is None and key in table.double_fault_leaks):
                continue
            function, code = run_["function"], run_["code"]
            name = table.codes[code]
            where = f"{function} (call {run_['occurrence'] + 1}) failing with {name}"
            if "give_back" in run_:
                where += f", and its give-back {run_['give_back']} (call {run_['give_back_occurrence'] + 1})"
            if run_.get("bare"):
                found.append(f"{where}: a bare {run_['bare']}")
            elif "error" not in run_:
                scoped = f"{function}@{result['operation']}"
                rule = table.tolerated.get(scoped, table.tolerated.get(function))
                if rule is None:
                    found.append(f"{where}: the operation succeeded (add it to tolerated, with why?)")
                elif isinstance(rule, Tolerated) and code not in rule.codes:
                    found.append(
                        f"{where}: the operation succeeded; only {rule.names(table.codes)} are absorbed"
                    )
            else:
                wanted = {(error_class(c).__name__, c.name) for c in table.expected(function, code)}
                got = (run_["error"], run_["aml_code"])
                if got not in wanted:
                    want = " or ".join(f"{cls} ({c})" for cls, c in sorted(wanted))
                    found.append(f"{where}: {got[0]} ({got[1]}), not {want}: {run_['text']}")
                if run_["cause"] != [function, code, name]:
                    found.append(f"{where}: native cause {run_['cause']}: {run_['text']}")
            if run_["close_problems"]:
                found.append(f"{where}: {run_['close_problems']}")
            if run_.get("untracked"):
                found.append(f"{where}: {run_['untracked']}")
            if run_["tracked"]:
                found.append(f"{where}: still tracked after closing again: {run_['tracked']}")
            if run_["live"]:
                found.append(f"{where}: leaked {run_['live']}")
        return found

    def check(self, operation: str, env: Mapping[str, str]) -> None:
        """Assert that every run of ``operation`` is clean."""
        result = self.run(operation, env)
        assert result["runs"], f"{operation} calls no native function"
        found = self.problems(result)
        assert not found, "\n".join(found)

    def check_double_fault(self, known: str, env: Mapping[str, str]) -> None:
        """Assert that the double fault ``known`` (``"operation:function+give_back"``) is
        clean; its test is an xfail while the table lists it as a leak."""
        result = self.run(known.split(":", 1)[0], env)
        found = self.problems(result, only=known)
        assert any(
            known.split(":", 1)[1] == f"{r['function']}+{r.get('give_back')}" for r in result["runs"]
        ), f"{known}: no such double-fault run (the operation no longer triggers it): drop it"
        assert not found, "\n".join(found)

    def coverage(self, library: Path | str, env: Mapping[str, str]) -> tuple[list[str], list[str]]:
        """(exported functions no operation calls and not listed in ``not_called``,
        functions listed in ``not_called`` that an operation calls)."""
        used: set[str] = set()
        for operation in self.table.operations:
            if operation not in self._used:
                self.run(operation, env)
            used |= self._used[operation]
        functions = exported_functions(library, self.table.double.suite.build.DoubleControl.PREFIX)
        missing = [f for f in functions if f not in used and f not in self.table.not_called]
        stale = sorted(f for f in self.table.not_called if f in used or f not in functions)
        return missing, stale

    def check_coverage(self, library: Path | str, env: Mapping[str, str]) -> None:
        """Assert that every exported function is called by an operation or listed with why
        it is not (and that the list names nothing called or not exported)."""
        missing, stale = self.coverage(library, env)
        assert not missing, f"no operation calls {missing}: add one to the fault table's operations"
        assert not stale, f"{stale} are called now or not exported: drop them from not_called"


def fault_tests(
    table_module: Any, fixture: str
) -> tuple[Callable[..., None], Callable[..., None], Callable[..., None]]:
    """A backend's two fault tests, on the table of ``table_module`` (its ``TABLE`` and
    ``OPERATIONS``; the file is the script each operation's process runs) and the double of
    its fixture ``fixture``; assign them to module names starting with ``test_``:

    * every call of each operation fails cleanly (:meth:`FaultSuite.check`, one test per
      operation);
    * the table covers every function the double exports (:meth:`FaultSuite.check_coverage`);
    * each double fault the table lists in ``double_fault_leaks`` is still a leak (an xfail,
      strict, with the path as its reason: :meth:`FaultSuite.check_double_fault`).
    """
    import pytest

    suite = FaultSuite(table_module.TABLE, Path(table_module.__file__))

    @pytest.mark.host_double
    @pytest.mark.usefixtures(fixture)
    @pytest.mark.parametrize("operation", list(table_module.OPERATIONS))
    def test_every_call_of_the_operation_fails_cleanly(
        request: pytest.FixtureRequest, operation: str
    ) -> None:
        suite.check(operation, request.getfixturevalue(fixture).env())

    @pytest.mark.host_double
    @pytest.mark.usefixtures(fixture)
    def test_the_table_covers_every_exported_function(request: pytest.FixtureRequest) -> None:
        """Every function the double exports is called by an operation of the table, or
        listed in ``not_called`` with the reason."""
        double = request.getfixturevalue(fixture)
        suite.check_coverage(double.path, double.env())

    leaks = table_module.TABLE.double_fault_leaks

    @pytest.mark.host_double
    @pytest.mark.usefixtures(fixture)
    @pytest.mark.parametrize(
        "known",
        [pytest.param(k, marks=pytest.mark.xfail(strict=True, reason=why)) for k, why in leaks.items()]
        or [pytest.param("", marks=pytest.mark.skip(reason="no double fault loses an allocation"))],
    )
    def test_known_double_fault_leak(request: pytest.FixtureRequest, known: str) -> None:
        """A double fault the table lists as still losing what it took (an xfail, strict:
        it passes, and fails the suite, once the path is fixed)."""
        suite.check_double_fault(known, request.getfixturevalue(fixture).env())

    return (
        test_every_call_of_the_operation_fails_cleanly,
        test_the_table_covers_every_exported_function,
        test_known_double_fault_leak,
    )
