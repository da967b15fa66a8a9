"""The backends this repository ships (``backends/<name>``): the one place that lists them.

tox.ini's environments, the tests that walk every backend (``tests/test_signatures.py``,
``tests/test_exports.py``, ``tests/test_packaging.py``), ``install_tests/test_install.py``,
``benchmarks/plugin_import.py`` and the frameworks' hooks (``aml_core.gpu.hooks``) read
this table. tox.ini cannot import Python, so ``tests/test_backend_list.py`` checks that
its lines agree with it. A sixth backend is one row here, its folder under ``backends/``,
and its tox environment (docs/backend-authoring.md, "A sixth GPU backend").

This module imports nothing (not even ``aml_core``'s own modules), so that scripts that
run before aml-core is built (the install tests) can load it from its file.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BACKENDS", "ShippedBackend", "by_name", "label_of"]


@dataclass(frozen=True)
class ShippedBackend:
    """One backend of this repository."""

    #: The backend's name, as ``aml_core.area(backend=...)`` and ``backends/<name>`` spell it.
    name: str
    #: How people write the runtime's name ("CUDA", "Level Zero").
    label: str
    #: Whether its tests run under a driver double on the CPU, so the ASan environment runs them.
    double: bool = True

    @property
    def package(self) -> str:
        """The import package: ``aml_<name>``."""
        return f"aml_{self.name}"

    @property
    def distribution(self) -> str:
        """The distribution: ``aml-<name>``."""
        return f"aml-{self.name}"

    @property
    def folder(self) -> str:
        """Its folder, relative to the repository's root."""
        return f"backends/{self.name}"


#: In the order the docs and tox.ini list them.
BACKENDS: tuple[ShippedBackend, ...] = (
    ShippedBackend("cuda", "CUDA", double=False),
    ShippedBackend("hip", "HIP"),
    ShippedBackend("ze", "Level Zero"),
    ShippedBackend("hsa", "HSA"),
)


def by_name(name: str) -> ShippedBackend | None:
    """The shipped backend called ``name`` (None for another one)."""
    return next((b for b in BACKENDS if b.name == name), None)


def label_of(name: str) -> str:
    """How people write backend ``name``'s runtime ("CUDA"); the name itself for another."""
    shipped = by_name(name)
    return shipped.label if shipped is not None else name
