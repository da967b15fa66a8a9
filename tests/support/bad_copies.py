"""Bad arguments to an area's or a pool's ``write`` / ``read``, shared by the backends'
tests: each is refused with an AML error (``aml_core.checks.span`` / ``host_bytes``)
before any native copy, and the target still copies afterwards."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from aml_core.errors import AMLTypeError, AMLValueError

#: (id, call on (target, buffer of 4096 bytes), the AML error).
BAD_COPIES: list[tuple[str, Callable[[Any, Any], object], type[Exception]]] = [
    ("write-str", lambda t, b: t.write(b, "text"), AMLTypeError),
    ("write-int", lambda t, b: t.write(b, 5), AMLTypeError),  # not 5 zero bytes
    ("write-None", lambda t, b: t.write(b, None), AMLTypeError),
    ("write-offset-str", lambda t, b: t.write(b, b"ab", "0"), AMLTypeError),
    ("write-offset-float", lambda t, b: t.write(b, b"ab", 1.0), AMLTypeError),
    ("write-offset-negative", lambda t, b: t.write(b, b"ab", -1), AMLValueError),
    ("write-strided", lambda t, b: t.write(b, memoryview(b"abcd")[::2]), AMLValueError),
    ("read-size-str", lambda t, b: t.read(b, "2"), AMLTypeError),
    ("read-offset-str", lambda t, b: t.read(b, 2, "0"), AMLTypeError),
    ("read-size-float", lambda t, b: t.read(b, 2.0), AMLTypeError),
    ("read-size-negative", lambda t, b: t.read(b, -1), AMLValueError),
    ("read-past-the-end", lambda t, b: t.read(b, 2, 4095), AMLValueError),
]

bad_copies = pytest.mark.parametrize(
    ("call", "error"), [(c, e) for _, c, e in BAD_COPIES], ids=[name for name, _, _ in BAD_COPIES]
)


def refused_before_any_copy(
    target: Any, call: Callable[[Any, Any], object], error: type[Exception], copies: Callable[[], int]
) -> None:
    """``call`` on a fresh buffer of ``target`` raises ``error`` with no native copy
    (``copies()`` counts them), and ``target`` then writes and reads the buffer."""
    buf = target.mmap(4096)
    before = copies()
    with pytest.raises(error):
        call(target, buf)
    assert copies() == before
    target.write(buf, b"still works", 7)
    assert target.read(buf, 11, 7) == b"still works"
    assert copies() == before + 2
    target.munmap(buf)
