"""The UCX benchmark's peer (``benchmarks/ucx_bench.py --peer``) on host ``b``, started through
the agent: what :meth:`ucx_bench.Session.open` takes as ``start`` to echo between the hosts."""

from __future__ import annotations

import os
import sys

from tests.hosts.agent import Remote

#: The peer's line that gives its port (ucx_bench.PORT_MARK).
PORT_MARK = "ucx_bench peer listens on port "

#: UCX between the hosts, in both processes (this one, set on import before UCX starts, and
#: the peer): TCP over the guests' NIC, and ucxx without its progress thread, which gets 3 s
#: to create an endpoint (ucxx's endpoint.cpp) and misses it on an emulated 1-CPU guest
#: ("Timeout waiting for ucp_ep_create"): in "blocking" mode the endpoint is made directly.
#: The exchange of peer information after it gets 60 s instead of ucxx's 5 (ucx_bench's
#: connect_timeout): under TCG with other guests on the machine's 2 cores, 5 s ran out
#: (evidence/2026-12-02-qemu-two-hosts-mpi-rc-verbs).
UCX_ENV = {
    "UCXPY_PROGRESS_MODE": "blocking",
    "UCXPY_CONNECT_TIMEOUT": "60",
    "UCX_TLS": "tcp",
    "UCX_NET_DEVICES": os.environ.get("AML_TWO_HOSTS_NIC", "all"),
    "UCX_WARN_UNUSED_ENV_VARS": "n",
}
for _name, _value in UCX_ENV.items():
    os.environ.setdefault(_name, _value)
#: Passed on to the peer where set here too: the UCX build ucxx runs on
#: (ucx_bench.UCX_LIBDIR_ENV) and UCX's protocol tables.
FORWARDED = ("AML_UCX_LIBDIR", "UCX_PROTO_INFO")


class RemotePeer:
    """``ucx_bench.py --peer KINDS`` on host ``b``: its address and port."""

    def __init__(self, kinds: tuple[str, ...]) -> None:
        env = {name: os.environ[name] for name in (*UCX_ENV, *FORWARDED) if name in os.environ}
        self.remote = Remote([sys.executable, "benchmarks/ucx_bench.py", "--peer", ",".join(kinds)], env)
        self.address: str | None = os.environ["AML_TWO_HOSTS_PEER"]
        try:
            self.port = int(self.remote.wait_for(PORT_MARK, timeout=300))
        except BaseException:
            self.remote.__exit__(None, None, None)
            raise

    @property
    def output(self) -> str:
        return self.remote.output

    def kill(self) -> None:
        """SIGKILL the peer on host b (its process group)."""
        self.remote.kill()

    def finish(self, timeout: float) -> str:
        """Wait for the peer to exit; an error quoting it unless it exited 0."""
        try:
            rc = self.remote.wait(timeout)
        finally:
            self.remote.close()
        if rc != 0:
            raise RuntimeError(f"the peer on host b exited {rc}: {self.output[-3000:]}")
        return self.output
