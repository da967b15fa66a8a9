"""``import aml_core.pool`` gives the module (issue 31 item 6): it used to bind the factory
function, so ``p.Pool`` was ``AttributeError: 'function' object has no attribute 'Pool'``.
The module is callable as the factory, so ``aml_core.pool(area)`` is unchanged, at run
time and for type checkers."""

from __future__ import annotations

import inspect
import pydoc
import sys
import textwrap
from pathlib import Path

import aml_core
from aml_core.host import HostArea

from .test_typing import _mypy


def test_import_as_gives_the_module() -> None:
    import aml_core.pool as p

    assert p is sys.modules["aml_core.pool"]
    assert p is aml_core.pool
    assert p.Pool is aml_core.Pool
    assert p.PoolStats is aml_core.PoolStats
    assert "Log every allocation and free" in pydoc.plain(pydoc.render_doc(p.Pool.log_to))


def test_the_module_is_the_factory() -> None:
    from aml_core import pool

    assert callable(pool)
    assert inspect.signature(pool) == inspect.signature(aml_core.pool.pool)
    with HostArea() as area, pool(area, limit=8 << 20) as made:
        assert type(made) is aml_core.Pool
        assert made.limit == 8 << 20
        buf = made.mmap(4096)
        view = memoryview(buf)
        view[:4] = b"pool"
        assert bytes(view[:4]) == b"pool"
        view.release()
        made.munmap(buf)
        assert made.pool_stats.bytes_in_use == 0
        assert made.pool_stats.bytes_cached > 0  # the block went back to the pool


def test_both_spellings_type_check(tmp_path: Path) -> None:
    script = tmp_path / "user_pool.py"
    script.write_text(
        textwrap.dedent("""
        import aml_core
        import aml_core.pool as p
        from aml_core.host import HostArea

        with HostArea() as area:
            made: aml_core.Pool = aml_core.pool(area, limit=1 << 20)
            also: p.Pool = p.pool(area)
            stats: p.PoolStats = made.pool_stats
            made.close()
            also.close()
        """)
    )
    proc = _mypy(tmp_path, [script])
    assert proc.returncode == 0, proc.stdout + proc.stderr
