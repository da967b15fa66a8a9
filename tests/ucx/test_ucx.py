"""aml buffers through UCX (``ucxx``) between two processes on the host: aml host and pooled
buffers sent and received without a copy through the buffer protocol, checked byte for
byte, against the same exchange of NumPy arrays. Skipped without ucxx (tox's ``ucx``
environment installs the ``ucxx-cu13`` wheel, which runs without a GPU)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

ucxx = pytest.importorskip("ucxx", reason="ucxx is not installed (tox -e ucx installs it)")
np = pytest.importorskip("numpy")

import aml_core  # noqa: E402
from aml_core.host import HostArea  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import ucx_bench  # noqa: E402  (the peer process and the echo: one program for the tests and the benchmark)


@pytest.mark.parametrize("size", [4096, 1 << 20, 16 << 20])
@pytest.mark.parametrize(("ours", "theirs"), [("aml", "aml"), ("aml-pool", "aml-pool"), ("aml", "numpy")])
def test_aml_buffers_go_through_ucx_to_another_process_and_back(ours: str, theirs: str, size: int) -> None:
    with HostArea() as area:
        pool = aml_core.pool(area) if ours == "aml-pool" else None
        where = pool if pool is not None else area
        send, receive = where.mmap(size), where.mmap(size)
        pattern = np.arange(size, dtype=np.uint8) ^ 0x5A
        np.frombuffer(send, dtype=np.uint8)[:] = pattern

        async def exchange() -> None:
            session = await ucx_bench.Session.open(theirs)
            try:
                await session.echo(send, receive, 3)
            finally:
                await session.close(timeout=60)  # raises, quoting the peer, unless it exited 0

        asyncio.run(exchange())
        assert np.array_equal(np.frombuffer(receive, dtype=np.uint8), pattern)
        where.munmap(send)
        where.munmap(receive)
        if pool is not None:
            pool.close()


def test_one_session_answers_with_each_kind_in_turn() -> None:
    """The benchmark's session: one peer process holds a buffer of every kind and the kinds
    take turns on one endpoint, each echo into the peer's buffer of the kind named."""
    size = 64 << 10
    with HostArea() as area:
        pool = aml_core.pool(area)
        mine = {"numpy": np.zeros(size, np.uint8), "aml": area.mmap(size), "aml-pool": pool.mmap(size)}
        back = {"numpy": np.zeros(size, np.uint8), "aml": area.mmap(size), "aml-pool": pool.mmap(size)}
        patterns = {kind: np.arange(size, dtype=np.uint8) ^ (i + 1) for i, kind in enumerate(mine)}

        async def exchange() -> None:
            session = await ucx_bench.Session.open(*ucx_bench.HOST_KINDS)
            try:
                for turn in range(2):
                    for kind in ucx_bench.HOST_KINDS[turn:] + ucx_bench.HOST_KINDS[:turn]:
                        np.frombuffer(mine[kind], dtype=np.uint8)[:] = patterns[kind]
                        np.frombuffer(back[kind], dtype=np.uint8)[:] = 0
                        await session.echo(mine[kind], back[kind], 2, kind=kind)
                        assert np.array_equal(np.frombuffer(back[kind], dtype=np.uint8), patterns[kind])
                with pytest.raises(ValueError, match="name the kind"):
                    await session.echo(mine["aml"], back["aml"], 1)
            finally:
                await session.close(timeout=60)

        asyncio.run(exchange())
        for kind in ("aml", "aml-pool"):
            (pool if kind == "aml-pool" else area).munmap(mine[kind])
            (pool if kind == "aml-pool" else area).munmap(back[kind])
        pool.close()


def test_a_session_of_an_unknown_kind_is_refused_before_a_process_starts() -> None:
    with pytest.raises(ValueError, match="one or more of"):
        asyncio.run(ucx_bench.Session.open("numpy", "nokind"))
    with pytest.raises(ValueError, match="one or more of"):
        asyncio.run(ucx_bench.Session.open())


def test_aml_cuda_buffers_go_gpu_to_gpu_through_ucx(tmp_path: Path) -> None:
    """Two GPUs, one process on each: aml device and pooled buffers and CuPy arrays echoed
    GPU to GPU (UCX picks its CUDA transports), each size's bytes checked by the benchmark.
    Run as a process of its own: it must choose the visible GPUs before CUDA starts."""
    pytest.importorskip("cupy", reason="the device echo checks the bytes with CuPy")
    pytest.importorskip("aml_cuda", reason="aml-cuda is not installed")
    sizes = [4096, 1 << 20, 16 << 20]
    cmd = [sys.executable, str(ROOT / "benchmarks/ucx_bench.py"), "--device", "--rounds", "1", "--count", "3"]
    cmd += ["--out", str(tmp_path), "--sizes", *map(str, sizes)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode == 77:
        pytest.skip(done.stdout.strip() or "fewer than 2 GPUs")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    rows = json.loads((tmp_path / "ucx_bench.json").read_text())["rows"]
    assert sorted((r["kind"], r["size"]) for r in rows) == sorted(
        (kind, size) for kind in ucx_bench.DEVICE_KINDS for size in sizes
    )
    assert all(r["us"] > 0 for r in rows)
