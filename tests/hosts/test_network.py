"""The two hosts' network and soft-RoCE: each host's rxe0 is active over its NIC, and verbs
traffic (an RC ping-pong, RDMA WRITE and READ bandwidth) goes between them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from tests.hosts.agent import Remote
from tests.support.two_hosts import ADDRESSES, HOSTNAMES

#: The Debian package of each verbs tool the tests run (the guests use this machine's root
#: filesystem; run-tests installs them).
PACKAGES = {"ibv_rc_pingpong": "ibverbs-utils", "ib_write_bw": "perftest", "ib_read_bw": "perftest"}


def _need(tool: str) -> None:
    """Skip (a failure between the hosts, see conftest) naming the package that has ``tool``."""
    if shutil.which(tool) is None:
        pytest.skip(
            f"{tool} is not installed (Debian: apt-get install {PACKAGES[tool]}; run-tests installs it)"
        )


def _retry(argv: list[str], tries: int = 30) -> subprocess.CompletedProcess[str]:
    """The client of a server just started on host b: it may not listen yet."""
    for _ in range(tries):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        if done.returncode == 0 or "connect" not in (done.stdout + done.stderr).lower():
            return done
        time.sleep(2)
    return done


def test_each_host_has_its_address_name_and_an_active_soft_roce_device() -> None:
    assert socket.gethostname() == HOSTNAMES["a"]
    with Remote(["sh", "-c", "hostname; rdma -j link show rxe0/1"]) as there:
        assert there.wait(120) == 0, there.output
        name, link = there.output.split("\n", 1)
    here = json.loads(
        subprocess.run(
            ["rdma", "-j", "link", "show", "rxe0/1"], capture_output=True, text=True, check=True
        ).stdout
    )
    assert name.strip() == HOSTNAMES["b"]
    for found in (here, json.loads(link)):
        assert found[0]["state"] == "ACTIVE"
        assert found[0]["netdev"] == os.environ["AML_TWO_HOSTS_NIC"]
    addresses = subprocess.run(["ip", "-br", "addr"], capture_output=True, text=True, check=True).stdout
    assert f"{ADDRESSES['a']}/24" in addresses


def test_an_rc_ping_pong_goes_between_the_hosts() -> None:
    _need("ibv_rc_pingpong")
    args = ["ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", "20"]
    with Remote(args) as server:
        client = _retry([*args, ADDRESSES["b"]])
        assert client.returncode == 0, client.stdout + client.stderr
        assert server.wait(120) == 0, server.output
    assert "20 iters in" in client.stdout
    assert "20 iters in" in server.output
    assert f"GID ::ffff:{ADDRESSES['b']}" in client.stdout  # the peer's RoCE v2 GID: host b's address


def test_rdma_write_and_read_go_between_the_hosts() -> None:
    for tool in ("ib_write_bw", "ib_read_bw"):
        _need(tool)
        args = [tool, "-d", "rxe0", "-x", "1", "-F", "-n", "50", "-s", "65536"]
        with Remote(args) as server:
            client = _retry([*args, ADDRESSES["b"]])
            assert client.returncode == 0, client.stdout + client.stderr
            assert server.wait(120) == 0, server.output
        assert " 65536      50 " in client.stdout, client.stdout
