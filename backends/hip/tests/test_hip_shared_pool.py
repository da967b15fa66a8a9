"""One aml pool for CuPy and Numba at once (issue 33 item 5, their side), over the HIP double:
a CuPy array (the stand-in ``cupy`` of :mod:`aml_core.testing.hook_fakes`, in a
:func:`~aml_core.gpu.cupy_scope.cupy_scope`) and a Numba device allocation (numba-cuda's
EMM interface, :mod:`aml_core.gpu.numba_emm`) come from the same pool, show in one
``memory_summary``, and the pool's ``limit`` and ``on_oom`` govern both. PyTorch's side is
test_hip_torch_hook.py; the zero-copy exchange between real frameworks (DLPack, CAI) needs a
GPU: tests/test_frameworks_gpu.py."""

from __future__ import annotations

import gc
from typing import Any

import aml_hip
import pytest
from hip_helpers import HipDouble

import aml_core
from aml_core.errors import AMLMemoryError
from aml_core.testing.hook_fakes import faked

cuda = pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")
MiB = 1 << 20


class Context:
    """What Numba passes as the context."""


def test_cupy_and_numba_share_one_pool(hip: HipDouble) -> None:
    oom: list[tuple[int, int]] = []

    def on_oom(requested: int, stats: Any) -> bool:
        oom.append((requested, stats.bytes_in_use))
        return False  # nothing to free: the refusal stands

    with (
        faked("cupy") as cupy,
        aml_hip.create(0, 0) as area,
        aml_core.pool(area, limit=8 * MiB, on_oom=on_oom) as pool,
    ):
        scope = aml_hip.cupy_scope(pool)
        numba = aml_hip.numba_manager(pool)(context=Context())
        with scope:
            x = cupy.cuda.get_allocator()(3 * MiB)  # a CuPy array's memory
        d = numba.memalloc(2 * MiB)  # a Numba device array's memory
        # Both are blocks of the one pool, in one summary.
        assert pool.pool_stats.bytes_in_use == 5 * MiB
        addresses = {b.ptr for b in pool.buffers()} | {x.ptr}
        assert int(d.device_pointer) in addresses
        summary = aml_core.memory_summary(pool)
        assert "5.0 MiB" in summary or "5 MiB" in summary, summary
        # The limit governs both: Numba refused while CuPy holds memory, and CuPy too.
        with pytest.raises(AMLMemoryError, match="limit"):
            numba.memalloc(4 * MiB)
        with scope, pytest.raises(AMLMemoryError, match="limit"):
            cupy.cuda.get_allocator()(4 * MiB)
        assert [r for r, _ in oom] == [4 * MiB, 4 * MiB]  # on_oom asked for each
        # CuPy drops its array: Numba's request fits now.
        del x
        gc.collect()
        more = numba.memalloc(4 * MiB)
        assert pool.pool_stats.bytes_in_use == 6 * MiB
        del d, more
        gc.collect()
        assert (scope.live, numba.live, pool.pool_stats.bytes_in_use) == (0, 0, 0)
