"""Each package's public names are declared once, in its ``__init__.pyi``: every declared
name resolves lazily at run time, ``dir()`` and ``__all__`` list them, mypy types them,
and importing the package loads none of them (aml_core.lazy)."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from types import ModuleType

import pytest

from aml_core import backend_list
from aml_core.lazy import read_stub

from .test_typing import _mypy

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = tuple(b.package for b in backend_list.BACKENDS)
PACKAGES = ("aml_core.gpu", *BACKENDS)


def _package(name: str) -> ModuleType:
    return pytest.importorskip(name, reason=f"{name} is not installed")


@pytest.mark.parametrize("name", PACKAGES)
def test_every_declared_name_resolves_and_is_listed(name: str) -> None:
    package = _package(name)
    assert package.__all__ == sorted(set(package.__all__) - {"__version__"}) + (
        ["__version__"] if "__version__" in package.__all__ else []
    )
    listed = set(dir(package))
    for public in package.__all__:
        assert getattr(package, public) is not None, public
        assert public in listed, public
    with pytest.raises(AttributeError, match="has no attribute 'not_declared'"):
        package.not_declared  # noqa: B018


@pytest.mark.parametrize("name", BACKENDS)
def test_functions_are_the_backend_s_bound_methods(name: str) -> None:
    package = _package(name)
    functions = [n for n in package.__all__ if callable(getattr(type(package.BACKEND), n, None))]
    assert {"destroy", "ipc_open", "ipc_close", "probe", "virtual_memory"} <= set(functions)
    for function in functions:
        assert getattr(package, function) == getattr(package.BACKEND, function), function
    assert isinstance(package.__version__, str)


def test_cuda_and_hip_export_the_same_names() -> None:
    cuda, hip = _package("aml_cuda"), _package("aml_hip")
    own = {"cuda": {"MIN_BINDINGS"}, "hip": set()}
    assert {n.replace("Cuda", "") for n in set(cuda.__all__) - own["cuda"]} == {
        n.replace("Hip", "") for n in hip.__all__
    }
    assert cuda.CudaArea is hip.HipArea
    assert cuda.CudaFlags is hip.HipFlags


@pytest.mark.parametrize("name", BACKENDS)
def test_importing_the_package_loads_none_of_its_names(name: str) -> None:
    package = _package(name)
    code = f"import sys, {name}; print(sorted(m for m in sys.modules if m.startswith('{name}.')))"
    # The child imports the package from where this process found it (tox's core environment
    # installs no backend: the tests import them from the source tree).
    assert package.__file__ is not None
    where = [str(Path(package.__file__).parent.parent), *(p or os.getcwd() for p in sys.path)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(where))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_a_stub_declares_names_only(tmp_path: Path) -> None:
    stub = tmp_path / "shared.pyi"
    stub.write_text(
        textwrap.dedent(
            '''
            """A docstring."""
            from typing import Any
            from .sub import Thing as Thing
            from .sub import Hidden
            from os.path import join as join
            BACKEND: Any
            run = BACKEND.run
            Alias = Hidden
            _private = Hidden.attr
            __version__: str
            '''
        )
    )
    where, public = read_stub(str(stub), "pkg", "home")
    assert public == ["Alias", "BACKEND", "Thing", "join", "run", "__version__"]
    assert where == {
        "Alias": "pkg.sub:Hidden",
        "BACKEND": "home.api:BACKEND",
        "Thing": "pkg.sub:Thing",
        "join": "os.path:join",
        "run": "home.api:BACKEND.run",
    }
    for bad in ("x = 1", "x = undeclared.attr", "def f(): ...", "from . import sub", "a = b = Hidden"):
        stub.write_text(f"from .sub import Hidden\n{bad}\n")
        with pytest.raises(TypeError, match=r"shared\.pyi:2: .*a lazy stub only declares names"):
            read_stub(str(stub), "pkg", "home")
    with pytest.raises(ImportError, match="home: its typing stub"):
        read_stub(str(tmp_path / "missing.pyi"), "pkg", "home")


def test_the_deprecated_name_tables_warn_and_follow_the_stubs() -> None:
    from aml_core.gpu import plugin

    with pytest.warns(DeprecationWarning, match="GPU_FUNCTIONS is deprecated"):
        functions = plugin.GPU_FUNCTIONS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        types, hooks, exports = plugin.GPU_TYPES, plugin.GPU_HOOKS, plugin.gpu_exports("Hip")
        assert set(plugin.GPU_VMM_TYPES) <= set(types)
        assert set(plugin.GPU_PEER_METHODS) <= set(functions)
    assert {"BACKEND", "create", "get_runtime", "stream"} <= set(functions)
    assert "Stream" in types
    assert "use_with_cupy" in hooks
    assert exports["create"] == ".api:BACKEND.create"
    assert exports["HipArea"] == "aml_core.gpu:GpuArea"
    with pytest.raises(AttributeError):
        plugin.GPU_NOTHING  # noqa: B018


@pytest.mark.parametrize("name", ["aml_cuda", "aml_hip"])
def test_the_hooks_modules_are_deprecated_and_still_answer(name: str) -> None:
    """aml_cuda.hooks and aml_hip.hooks (deprecated in 0.3): each of their names, with a
    DeprecationWarning naming where it is now; the functions are the backend's methods."""
    package = _package(name)
    old = importlib.import_module(f"{name}.hooks")
    new = re.escape(f"use {name}.use_with_cupy")
    with pytest.warns(DeprecationWarning, match=rf"{name}\.hooks\.use_with_cupy is deprecated .*{new}"):
        assert old.use_with_cupy == package.BACKEND.use_with_cupy
    with pytest.warns(DeprecationWarning, match=rf"{name}\.hooks\.torch_mem_pool is deprecated"):
        torch_mem_pool = old.torch_mem_pool
    with pytest.warns(DeprecationWarning, match=rf"{name}\.hooks\.TorchMemPool is deprecated"):
        torch_type = old.TorchMemPool
    assert torch_mem_pool == package.BACKEND.torch_mem_pool
    assert torch_type is package.TorchMemPool
    with pytest.warns(DeprecationWarning, match="BACKEND.name"):
        backend_name = old.BACKEND_NAME
    assert backend_name == package.BACKEND.name
    with pytest.raises(AttributeError, match="no attribute 'frameworks'"):
        old.frameworks  # noqa: B018


def test_mypy_types_every_declared_name(tmp_path: Path) -> None:
    """A strict user script that names every declared name type-checks; a misuse of one
    is an error (the names are typed, not Any)."""
    pytest.importorskip("mypy", reason="the typing test needs mypy")
    present = [name for name in PACKAGES if importlib.util.find_spec(name) is not None]
    lines = [f"import {name}" for name in present]
    for name in present:
        lines += [f"{name}.{public}" for public in importlib.import_module(name).__all__]
    good = tmp_path / "good.py"
    good.write_text("\n".join(lines) + "\n")
    bad = tmp_path / "bad.py"
    bad.write_text("import aml_core.gpu\narea: int = aml_core.gpu.GpuArea\n")
    checked = [good, bad]
    if "aml_hip" in present:
        (tmp_path / "bad_hip.py").write_text("import aml_hip\nn: int = aml_hip.create(0)\n")
        checked.append(tmp_path / "bad_hip.py")
    result = _mypy(
        tmp_path, checked, path=(ROOT, *(ROOT / "backends" / b.removeprefix("aml_") for b in BACKENDS))
    )
    out = result.stdout
    assert not [ln for ln in out.splitlines() if ln.startswith("good.py")], out
    assert "bad.py:2: error" in out, out
    if "aml_hip" in present:
        assert (
            'bad_hip.py:2: error: Incompatible types in assignment (expression has type "GpuArea"' in out
        ), out
