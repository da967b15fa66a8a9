"""The public conformance kit (aml_core.testing) apart from the repository's own test
machinery (tests/support): what it needs said clearly, and its hook fakes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from aml_core.gpu import hooks
from aml_core.testing.hook_fakes import faked

#: Runs with pytest (and anything under it) unimportable, as in an install without the
#: ``test`` extra; prints what importing the kit raised.
_WITHOUT_PYTEST = textwrap.dedent(
    """
    import sys
    sys.modules["pytest"] = None  # import pytest raises ModuleNotFoundError
    for name in ("aml_core.testing", "aml_core.testing.hook_fakes"):
        try:
            __import__(name)
        except ModuleNotFoundError as exc:
            print(type(exc).__name__, exc.name, "|", exc)
        else:
            print("imported", name)
    import aml_core
    print("core", aml_core.area("host").kind)
    """
)


def test_the_kit_without_pytest_names_the_test_extra() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PYTEST], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 3, proc.stdout
    for line in lines[:2]:
        kind, _, message = line.partition(" | ")
        assert kind == "ModuleNotFoundError pytest", line
        assert "pip install 'aml-core[test]'" in message, line
        assert "aml_core.testing (the conformance kit) needs pytest" in message, line
    assert lines[2] == "core host", "aml_core itself must not need pytest"


def test_the_kit_ships_no_test_machinery() -> None:
    """The doubles, fault tables, IPC machine and peer and stress live in tests/support."""
    import aml_core.testing as kit

    for name in ("doubles", "double_fixtures", "faults", "ipc_machine", "ipc_peer", "stress"):
        with pytest.raises(ModuleNotFoundError):
            __import__(f"aml_core.testing.{name}")
        __import__(f"tests.support.{name}")
    assert set(kit.__all__) >= {"AreaConformance", "IpcConformance", "aml_registry"}


@pytest.mark.parametrize("name", ["cupy", "torch"])
def test_faked_puts_the_fake_in_place_and_restores(name: str) -> None:
    before_module, before_torch_hook = sys.modules.get(name), hooks._torch_hook
    with faked(name) as fake:
        assert sys.modules[name] is fake
        assert fake.__name__ == name
        if name == "torch":
            assert hooks._torch_hook is None
        else:
            assert hooks._installed is None
    assert sys.modules.get(name) is before_module
    assert hooks._torch_hook is before_torch_hook


def test_faked_uninstalls_the_cupy_hook_made_in_it() -> None:
    from aml_core.testing.hook_fakes import FakeDeviceArea

    area = FakeDeviceArea()
    try:
        with faked("cupy") as cupy:
            hook = hooks.use_with_cupy(area, backend="host")
            assert cupy.state["allocator"] == hook.malloc
            assert hooks._installed is hook
        assert hooks._installed is None
        assert cupy.state["allocator"] is cupy.defaults[0]  # CuPy's own again
    finally:
        area.close()
