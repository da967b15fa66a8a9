"""A remote shell for Open MPI's launcher between the two emulated hosts: PRRTE starts its
daemon on host ``b`` with ``<agent> HOST COMMAND...`` (``--prtemca plm_ssh_agent``), and this
runs ``COMMAND`` there through host ``b``'s agent (:mod:`tests.hosts.agent`), printing what it
prints and exiting with its status, as ``ssh HOST COMMAND`` would. It reaches host ``b`` only."""

from __future__ import annotations

import sys

from tests.hosts.agent import Remote
from tests.support.two_hosts import ADDRESSES, HOSTNAMES


def main(argv: list[str]) -> int:
    argv = [a for a in argv if a.strip()]
    args = [a for a in argv if not a.startswith("-")]  # PRRTE may pass ssh options first
    if len(args) < 2:
        print("usage: python -m tests.hosts.rsh HOST COMMAND...", file=sys.stderr)
        return 2
    host, command = args[0], " ".join(argv[argv.index(args[0]) + 1 :])
    if host not in (ADDRESSES["b"], HOSTNAMES["b"]):
        print(
            f"tests.hosts.rsh: {host!r} is not host b ({ADDRESSES['b']}, {HOSTNAMES['b']})", file=sys.stderr
        )
        return 255
    with Remote(["/bin/sh", "-c", command]) as program:
        seen, done = 0, False
        while not done:
            done = program.join(1)
            for line in program.lines[seen:]:
                sys.stdout.write(line)
            seen = len(program.lines)
            sys.stdout.flush()
        return program.wait(30)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
