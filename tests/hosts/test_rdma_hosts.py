"""RDMA WRITE and READ of aml memory between the two hosts over soft-RoCE: each kind of
buffer (host, pooled, NUMA-bound, huge-page, ``ipc=True``, a block over two chunks of an
expandable pool) registered through ``aml_core.rdma`` on each host, host a reading host b's
buffer and writing its own into it, the bytes checked on both; the registrations counted
by the kernel (``rdma resource show mr``) on both hosts, back to where they were after; and
host b's process killed mid-transfer: host a's work request completes in error, not a hang,
and host a deregisters everything."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from tests.hosts.agent import Remote
from tests.hosts.rdma_memory import (
    DEVICE,
    KINDS,
    CompletionError,
    PeerClient,
    RcLink,
    content,
    fill,
    make,
    open_device,
    pattern,
)
from tests.support.rxe import mr_count


@pytest.fixture(scope="module")
def device() -> Iterator[tuple[object, object]]:
    ctx, pd = open_device()
    try:
        yield ctx, pd
    finally:
        pd.close()  # type: ignore[attr-defined]
        ctx.close()  # type: ignore[attr-defined]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _peer() -> tuple[Remote, PeerClient]:
    remote = Remote([sys.executable, "-m", "tests.hosts.rdma_memory"])
    remote.wait_for("rdma peer listens on", timeout=300)
    return remote, PeerClient(os.environ["AML_TWO_HOSTS_PEER"])


def test_aml_memory_goes_both_ways_between_the_hosts(device: tuple[object, object]) -> None:
    ctx, pd = device
    remote, peer = _peer()
    try:
        for kind in KINDS:
            before, fds = mr_count(DEVICE), _fds()
            buf, mine, close = make(kind, pd)
            assert mr_count(DEVICE) == before + len(mine), kind  # each slab or chunk once
            link = RcLink(ctx, pd, os.environ["AML_TWO_HOSTS_SELF"])
            try:
                there = peer.ask(op="open", kind=kind, qp=link.info())
            except ConnectionError as e:
                raise AssertionError(f"{kind}: {e}; host b's peer printed: {remote.output[-3000:]}") from e
            link.connect(there["qp"])
            theirs = [tuple(p) for p in there["pieces"]]
            assert there["mr"][1] == there["mr"][0] + len(theirs), (kind, there)
            assert there["size"] == buf.size
            fill(buf, bytes(buf.size))
            posted = link.read(mine, theirs)  # b -> a
            assert content(buf) == pattern(buf.size, 11), f"{kind}: READ brought other bytes"
            fill(buf, pattern(buf.size, 12))
            link.write(mine, theirs)  # a -> b
            assert peer.ask(op="check", seed=12)["ok"], f"{kind}: WRITE left other bytes on host b"
            if kind == "expandable":
                assert posted >= 2, "a block over two chunks goes as one request per chunk"
            link.close()
            close()
            assert peer.ask(op="close")["mr"] == there["mr"][0], f"{kind}: host b kept a registration"
            assert mr_count(DEVICE) == before, f"{kind}: host a kept a registration"
            assert _fds() == fds, kind
        peer.ask(op="exit")
        assert remote.wait(120) == 0, remote.output
    finally:
        peer.close()
        remote.__exit__(None, None, None)


def test_the_peer_host_going_away_mid_transfer_is_an_error_completion(device: tuple[object, object]) -> None:
    ctx, pd = device
    before, fds = mr_count(DEVICE), _fds()
    remote, peer = _peer()
    _, mine, close = make("host", pd)
    link = RcLink(ctx, pd, os.environ["AML_TWO_HOSTS_SELF"])
    try:
        there = peer.ask(op="open", kind="host", qp=link.info())
        link.connect(there["qp"])
        theirs = [tuple(p) for p in there["pieces"]]
        link.write(mine, theirs)  # the pair works
        remote.kill()  # host b's process dies: its queue pair and regions with it
        assert remote.wait(120) != 0
        # a write in flight or the next: no acknowledgement ever comes, and after RETRY_CNT
        # transport timeouts (about 7.5 s) rxe completes it with "retry exceeded"; the
        # 120 s wait only bounds a broken rxe (TimeoutError, a failure here)
        with pytest.raises(CompletionError) as failed:  # noqa: PT012
            for _ in range(1000):
                link.write(mine, theirs, timeout=120)
        assert failed.value.status == link.e.IBV_WC_RETRY_EXC_ERR, failed.value
    finally:
        peer.close()
        remote.__exit__(None, None, None)
        link.close()
        close()
    assert mr_count(DEVICE) == before  # the survivor freed its registrations
    assert _fds() == fds
