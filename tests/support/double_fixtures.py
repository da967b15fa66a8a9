"""The test side of a backend verified on a C driver double (see :mod:`tests.support.doubles`).

A backend's ``tests/<name>_helpers.py`` makes one :class:`DoubleSuite` and subclasses
:class:`DriverDouble`; its conftest builds its fixtures from them::

    # tests/<name>_helpers.py (after putting the repository root on sys.path: tests.support)
    SUITE = DoubleSuite(__file__, "aml_cxl", "AML_CXL_TEST_DOUBLE", "cxl_double.py", "the CXL double")
    import aml_cxl

    class CxlDouble(DriverDouble):
        suite, backend = SUITE, aml_cxl
        library_var = "AML_CXL_LIBRARY"
        clean_env = ("CXLDOUBLE_FAULTS",)

    # tests/conftest.py
    pytest_configure, pytest_collection_modifyitems, cxl, double_library = double_conftest(
        CxlDouble, "cxl", "emulated devices", "AML_CXL_TEST_DOUBLE=forward"
    )

The suite reads its mode from the environment (``host``, the default, or ``forward``), puts
the backend's tree on ``sys.path`` when it is not installed, loads the build helper under a
unique module name, builds the double once per variant (skipping with the reason when it
cannot be built) and gives child processes an environment that imports this checkout.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, TypeVar, cast

import pytest

from aml_core.testing import GPU2_MARKER, GPU_MARKER

from .doubles import DoubleBuildError, Mode

__all__ = [
    "DoubleSuite",
    "DriverDouble",
    "add_double_markers",
    "double_conftest",
    "double_mode",
    "load_module",
    "mark_double_items",
]

D = TypeVar("D", bound="DriverDouble")


def double_mode(variable: str) -> Mode:
    """The double's mode named by ``$variable``: ``host`` (default) or ``forward``."""
    mode = os.environ.get(variable, "host").strip() or "host"
    if mode not in ("host", "forward"):
        raise pytest.UsageError(f"{variable} must be 'host' or 'forward', not {mode!r}")
    return cast(Mode, mode)


def load_module(path: Path, name: str) -> ModuleType:
    """Import the file ``path`` as module ``name`` (a build helper outside any package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class DoubleSuite:
    """One backend's tests on its double: where the tree is, the mode, the build helper."""

    def __init__(self, helpers_file: str, package: str, mode_variable: str, build_helper: str, what: str):
        #: the tests directory, the backend's root and the repository's
        self.here = Path(helpers_file).resolve().parent
        self.backend_root = self.here.parent
        self.repo = self.here.parents[2]
        # A checkout without the backend installed: import it from the tree.
        if importlib.util.find_spec(package) is None:
            sys.path.insert(0, str(self.backend_root))
        self.package = package
        self.mode = double_mode(mode_variable)
        #: the build helper (``native/<build_helper>``): build_double, DoubleControl...
        self.build = load_module(self.here / "native" / build_helper, f"{package}_tests_double_build")
        self.what = what
        self._built: dict[tuple[Any, ...], Path | str] = {}

    def child_env(self, drop: Iterable[str] = (), **extra: str) -> dict[str, str]:
        """The environment of a child process that imports this checkout (less ``drop``)."""
        dropped = set(drop)
        env = {k: v for k, v in os.environ.items() if k not in dropped}
        paths = [str(self.repo), str(self.backend_root), str(self.here), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env.update(extra)
        return env

    def build_double(self, *args: Any, **kwargs: Any) -> Path:
        """The double in this session's mode (``build.build_double(mode, *args, **kwargs)``,
        once per variant); skip with the reason if it cannot be built."""
        key = (self.mode, *args, *sorted(kwargs.items()))
        if key not in self._built:
            try:
                self._built[key] = self.build.build_double(self.mode, *args, **kwargs)
            except DoubleBuildError as exc:
                self._built[key] = f"{self.what} cannot be built in {self.mode} mode: {exc}"
        found = self._built[key]
        if isinstance(found, str):
            pytest.skip(found)
        return found


class DriverDouble:
    """The double a test runs against, and helpers to drive it. A backend's subclass names
    its library variable and its double's environment, and may override the hooks
    (:meth:`forget`, :meth:`probe`, :meth:`tracked`, :meth:`emulate_devices`) and give
    :meth:`read_memory` and :meth:`write_memory` (the IPC peer and state machines use them)."""

    #: the suite of the backend (its mode and build helper)
    suite: ClassVar[DoubleSuite]
    #: the backend's package (``aml_hip``): its ``BACKEND`` and ``get_runtime``
    backend: ClassVar[Any]
    #: the variable naming the library the backend loads (``AML_HIP_LIBRARY``)
    library_var: ClassVar[str]
    #: variables of the double that must not leak in from the caller
    clean_env: ClassVar[tuple[str, ...]] = ()
    #: the live kinds :meth:`live` reports (default: the control's)
    live_kinds: ClassVar[tuple[str, ...] | None] = None
    #: what a forward-mode probe may raise when there is no GPU: the test skips
    probe_errors: ClassVar[tuple[type[BaseException], ...]] = (Exception,)

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mode = self.suite.mode
        self.ctl: Any = self.suite.build.DoubleControl(path)

    @classmethod
    def in_child(cls: type[D]) -> D:
        """The double of a child process run with :meth:`env`: the library its
        environment names (the IPC conformance kit's ``child_memory`` factory)."""
        return cls(Path(os.environ[cls.library_var]))

    # -- hooks ----------------------------------------------------------------------------
    def forget(self) -> None:
        """Drop the backend's runtime, so that the next use loads the library afresh."""
        self.backend.BACKEND.reset()

    def probe(self) -> None:
        """Forward mode: fail with one of :attr:`probe_errors` when there is no GPU."""
        self.backend.get_runtime().device_count()

    def tracked(self) -> dict[str, int]:
        """What the backend still tracks (checked empty after a test; nothing by default)."""
        return {}

    def emulate_devices(self, count: int, memory: int) -> None:
        """Host mode: emulate ``count`` devices of ``memory`` bytes each."""
        self.ctl.set_devices(count, memory)
        self.forget()

    def copy(self, dst: int, src: int, size: int) -> None:
        """Copy ``size`` bytes from ``src`` to ``dst``, device memory included (the backend's
        copy or the double's), and wait until they are there."""
        raise NotImplementedError(f"{type(self).__name__} does not say how to copy device memory")

    def read_memory(self, ptr: int, size: int) -> bytes:
        """``size`` bytes at ``ptr``, device memory included (:meth:`copy`): how IPC tests
        see the bytes behind a buffer."""
        out = ctypes.create_string_buffer(size)
        if size:
            self.copy(ctypes.addressof(out), ptr, size)
        return out.raw

    def write_memory(self, ptr: int, data: bytes) -> None:
        """Write ``data`` at ``ptr``, device memory included (:meth:`copy`)."""
        if data:
            src = ctypes.create_string_buffer(data, len(data))
            self.copy(ptr, ctypes.addressof(src), len(data))

    # -- control --------------------------------------------------------------------------
    def inject(self, function: str, error: int, skip: int = 0, times: int = 1) -> None:
        self.ctl.inject(function, error, skip, times)

    def calls(self, function: str) -> int:
        return int(self.ctl.calls(function))

    def live(self) -> dict[str, int]:
        kinds = self.live_kinds if self.live_kinds is not None else self.ctl.LIVE_KINDS
        return {kind: int(self.ctl.live(kind)) for kind in kinds}

    def env(self, **extra: str) -> dict[str, str]:
        """A child process's environment: the same double."""
        return self.suite.child_env(**{self.library_var: str(self.path), **extra})

    def need_devices(self, count: int, memory: int = 1 << 30) -> None:
        """Host mode: emulate ``count`` devices; forward mode: skip if the machine has fewer."""
        if self.mode == "host":
            self.emulate_devices(count, memory)
            return
        have = self.backend.get_runtime().device_count()
        if have < count:
            pytest.skip(f"needs {count} GPUs, this machine has {have}")

    def run_child(
        self, args: Sequence[str], request: object, env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Run ``python *args`` with ``request`` as JSON on its stdin and this double's
        environment (:meth:`env`, or ``env``); assert that it exits 0 and reports no ignored
        exception, and return the JSON object on its last line (``kwargs``: ``pass_fds``...)."""
        proc = subprocess.run(
            [sys.executable, *args],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=dict(self.env() if env is None else env),
            timeout=120,
            check=False,
            **kwargs,
        )
        assert proc.returncode == 0, (
            f"the child crashed or raised (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
        assert "Exception ignored" not in proc.stderr, proc.stderr
        report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return report

    # -- a test's life --------------------------------------------------------------------
    def enter(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Point the backend at this double, reset both; forward mode: skip without a GPU."""
        self.forget()
        for var in self.clean_env:
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv(self.library_var, str(self.path))
        self.ctl.reset()
        self.forget()
        if self.mode == "forward":
            try:
                self.probe()
            except self.probe_errors as exc:
                pytest.skip(f"forward mode needs a CUDA GPU: {exc}")

    def leave(self) -> None:
        """Reset both; fail if the test leaked objects (the double's live counts not 0)."""
        tracked = {k: n for k, n in self.tracked().items() if n}
        self.forget()
        leaks = {kind: n for kind, n in self.live().items() if n}
        self.ctl.reset()
        self.forget()
        assert not tracked, f"{self.backend.__name__} still tracks objects: {tracked}"
        assert not leaks, f"the test leaked native objects: {leaks}"

    @classmethod
    @contextlib.contextmanager
    def running(cls: type[D], path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[D]:
        """The backend on the double at ``path`` for the block (a fixture's body)."""
        double = cls(path)
        double.enter(monkeypatch)
        yield double
        double.leave()

    @classmethod
    def fixture(cls, name: str) -> Any:
        """The backend's fixture ``name`` for a conftest: the backend on the suite's default
        double (:meth:`running`: reset before, leak-checked after)."""

        def running(monkeypatch: pytest.MonkeyPatch) -> Iterator[DriverDouble]:
            with cls.running(cls.suite.build_double(), monkeypatch) as double:
                yield double

        running.__doc__ = (
            f"{cls.suite.package} running on {cls.suite.what} (reset before, leak-checked after)."
        )
        return pytest.fixture(name=name)(running)

    @classmethod
    @contextlib.contextmanager
    def factory(cls: type[D], monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., D]]:
        """``make(*variant)``: the backend on the double built for that variant (the suite's
        ``build_double(*variant)``), each left at the end of the block."""
        used: list[D] = []

        def make(*args: Any, **kwargs: Any) -> D:
            double = cls(cls.suite.build_double(*args, **kwargs))
            double.enter(monkeypatch)
            used.append(double)
            return double

        yield make
        for double in used:
            double.leave()


def add_double_markers(config: pytest.Config, double: str, host_double: str) -> None:
    """Register the markers: ``gpu``, ``double`` (``double`` says what the tests run
    against) and ``host_double`` (``host_double`` says what of the host mode they need)."""
    config.addinivalue_line("markers", GPU_MARKER)
    config.addinivalue_line("markers", GPU2_MARKER)
    config.addinivalue_line("markers", f"double: runs against {double} (needs gcc)")
    config.addinivalue_line("markers", f"host_double: needs the double's host mode ({host_double})")


def double_conftest(
    double: type[DriverDouble], fixture: str, host_double: str, forward: str, also: Collection[str] = ()
) -> tuple[Callable[[pytest.Config], None], Callable[[pytest.Config, list[pytest.Item]], None], Any, Any]:
    """What a backend's conftest takes from here, to assign to these names::

        pytest_configure, pytest_collection_modifyitems, <fixture>, double_library = double_conftest(...)

    ``pytest_configure`` registers the markers (:func:`add_double_markers`; ``host_double``
    says what of the host mode the ``host_double`` tests need);
    ``pytest_collection_modifyitems`` marks the tests using ``fixture`` or one of ``also``
    (:func:`mark_double_items`; ``forward`` says what the forward mode runs); the fixture
    ``fixture`` is :meth:`DriverDouble.fixture`; ``double_library`` (session) the path of
    the suite's default double."""

    def pytest_configure(config: pytest.Config) -> None:
        add_double_markers(config, double.suite.what, host_double)

    def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
        mark_double_items(items, (fixture, *also), double.suite.mode, forward)

    def double_library() -> Path:
        return double.suite.build_double()

    library = pytest.fixture(scope="session", name="double_library")(double_library)
    return pytest_configure, pytest_collection_modifyitems, double.fixture(fixture), library


def mark_double_items(items: list[pytest.Item], fixtures: Collection[str], mode: str, why: str) -> None:
    """Mark the tests using one of ``fixtures`` ``double`` (and ``gpu`` in forward mode), and
    skip those marked ``host_double`` in forward mode (``why`` says what runs instead)."""
    for item in items:
        if any(name in fixtures for name in getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.double)
            if mode == "forward":
                item.add_marker(pytest.mark.gpu)
        if mode == "forward" and item.get_closest_marker("host_double"):
            item.add_marker(pytest.mark.skip(reason=f"needs the double's host mode ({why})"))
