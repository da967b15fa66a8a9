"""Build the two compiled modules of aml-core from Cython (metadata lives in pyproject.toml).

aml_core/_buffer.pyx: buffers (buffer protocol, DLPack) and the areas' bookkeeping;
aml_core/_os.pyx: the Linux memory system calls of the host backend. Building needs
Cython, a C compiler (gcc) and the Python headers (Debian: python3-dev).
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

DIRECTIVES = {
    "language_level": 3,
    "boundscheck": False,  # no indexing of Python sequences by C ints goes out of range
    "wraparound": False,  # and none uses negative indices
    "embedsignature": True,
    "binding": True,  # Python-like functions: inspect.signature works (no measurable cost)
    "embedsignature.format": "clinic",  # and __text_signature__, not a signature in __doc__
}

setup(
    ext_modules=cythonize(
        [
            Extension("aml_core._buffer", ["aml_core/_buffer.pyx"], extra_compile_args=["-O2"]),
            Extension("aml_core._os", ["aml_core/_os.pyx"], extra_compile_args=["-O2"]),
        ],
        compiler_directives=DIRECTIVES,
    ),
)
