"""Build the compiled modules of aml-core from Cython (metadata lives in pyproject.toml).

aml_core/_buffer.pyx: buffers (buffer protocol, DLPack), the areas' live table and
buffer lifetime (it includes its parts, aml_core/_buffer_*.pxi, one concern each);
aml_core/_fastpath.pyx: the fast-path interface an area calls; aml_core/_allocator.pyx:
the native allocator (a GPU runtime's calls through function pointers),
aml_core/_kernel.pyx: the allocator kernel (a pool's policy, C++; it includes its parts,
aml_core/_kernel_*.pxi, one concern each: docs/kernel.md); aml_core/_os.pyx: the
Linux memory system calls of the host backend.
They cimport each other's .pxd declarations. Building needs Cython, a C and a C++ compiler (gcc, g++)
and the Python headers (Debian: python3-dev).
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

#: aml_core's compiled modules (aml_core/_compiled.py lists the same for its import check).
COMPILED = ("_buffer", "_fastpath", "_allocator", "_kernel", "_hooks", "_os")
#: The ones written in Cython's C++ mode (the kernel's ordered maps and vectors).
CPP = ("_kernel", "_hooks")

setup(
    ext_modules=cythonize(
        [
            Extension(
                f"aml_core.{name}",
                [f"aml_core/{name}.pyx"],
                extra_compile_args=["-O3"],
                language="c++" if name in CPP else None,
            )
            for name in COMPILED
        ],
        compiler_directives=DIRECTIVES,
    ),
)
