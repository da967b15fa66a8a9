"""The C++ Cython generates for each cdef method of the kernel, before the split (argv[1]:
the old aml_core/_kernel.cpp) and after it (argv[2]), compared after normalising what the
class chain renames: the struct paths to the fields (``->__pyx_base.__pyx_base.x`` is
``x`` at an offset fixed at compile time), the casts of self to a base, the class part of
C names, source line numbers and string-table indices. Prints each method whose code
still differs, and how many lines do.

    python compare_generated.py OLD/_kernel.cpp NEW/_kernel.cpp
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

PREFIX = "__pyx_f_8aml_core_7_kernel_"
METHOD = re.compile(r"\nstatic [^\n;]*?(" + PREFIX + r"\w+)\([^;{]*\) \{\n.*?\n\}\n", re.S)
RULES = (
    (r"/\*.*?\*/", ""),
    (r"__pyx_(obj|vtabstruct|f|vtabptr|ptype|type)_8aml_core_7_kernel_(\d+)?_?[A-Za-z]+?(_|\b)", "X_"),
    (r"(->B(\.B)*)+\.", "->"),
    (r"(\.B)+\.", "."),
    (r"->B(\.B)*\b", ""),
    (r"\(\(struct X_ \*\)(__pyx_v_self|__pyx_v_kernel)\)", r"\1"),
    (r"__PYX_ERR\(\d+, \d+,", "__PYX_ERR("),
    (r"__pyx_lineno = \d+|__pyx_clineno = __LINE__|__pyx_filename = [^;]*", ""),
    (r'"aml_core\._kernel\.\w+\.', '"aml_core._kernel.C.'),
    (r"__pyx_k_\w+|__pyx_n_\w+|__pyx_string_tab\[\d+\]|__pyx_t_\d+|__pyx_codeobj\w*|__pyx_tuple\w*", "T"),
)


def normalised(body: str) -> list[str]:
    body = body.replace("__pyx_base", "B")
    for pattern, repl in RULES:
        body = re.sub(pattern, repl, body, flags=re.S)
    return [line.strip() for line in body.splitlines() if line.strip()]


def methods(path: str) -> dict[str, str]:
    """Each cdef method's C function by its method name (the class part left out)."""
    text = Path(path).read_text()
    return {
        re.sub("^" + PREFIX + r"\d+_?[A-Za-z]+_", "", m.group(1)): m.group(0) for m in METHOD.finditer(text)
    }


def main() -> int:
    old, new = methods(sys.argv[1]), methods(sys.argv[2])
    one_side = sorted(set(old) ^ set(new))
    print(f"cdef methods: {len(old)} before, {len(new)} after; on one side only: {one_side}")
    differing = 0
    for name in sorted(set(old) & set(new)):
        diff = [
            line
            for line in difflib.unified_diff(normalised(old[name]), normalised(new[name]), lineterm="", n=0)
            if not line.startswith(("---", "+++", "@@"))
        ]
        if diff:
            differing += 1
            print(name, len(diff))
            for line in diff[:6]:
                print("   ", line)
    print("methods whose code differs after normalising:", differing)
    return 0


if __name__ == "__main__":
    sys.exit(main())
