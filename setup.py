"""Build the two small C extensions of aml-core (metadata lives in pyproject.toml)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("aml_core._buffer", ["aml_core/_buffer.c"], extra_compile_args=["-O2", "-Wall", "-Wextra"]),
        Extension("aml_core._os", ["aml_core/_os.c"], extra_compile_args=["-O2", "-Wall", "-Wextra"]),
    ],
)
