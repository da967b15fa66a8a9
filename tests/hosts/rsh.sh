#!/bin/sh
# Open MPI's remote shell between the two emulated hosts (plm_ssh_agent): see rsh.py.
cd "$(dirname "$0")/../.." && exec python -m tests.hosts.rsh "$@"
