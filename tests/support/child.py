"""What a test and the child process it starts exchange in JSON (no pytest needed in the
child): objects pickled in base64 (an IPC handle), and an AML error as a report."""

from __future__ import annotations

import base64
import pickle
from typing import Any

from aml_core.errors import AMLError

__all__ = ["error_report", "pickled", "unpickled"]


def pickled(obj: object) -> str:
    """``obj`` pickled and base64-encoded: an IPC handle in a child's JSON request."""
    return base64.b64encode(pickle.dumps(obj)).decode()


def unpickled(text: str) -> Any:
    """The object :func:`pickled` encoded."""
    return pickle.loads(base64.b64decode(text))


def error_report(exc: AMLError) -> dict[str, Any]:
    """An AML error as JSON: its class, code, message and native cause (function, code)."""
    return {
        "class": type(exc).__name__,
        "code": int(exc.code),
        "message": str(exc),
        "function": exc.native.function if exc.native else None,
        "native": exc.native.code if exc.native else None,
    }
