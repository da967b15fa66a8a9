"""Experiment driver: the lab's runner with extra QEMU/vng args (not committed)."""
import sys, shlex
sys.path.insert(0, "/work/labtime")
from tests.support import numa_lab
extra_qemu = shlex.split(sys.argv[1])
extra_vng = shlex.split(sys.argv[2])
orig_q = numa_lab.LabTopology.qemu_args
numa_lab.LabTopology.qemu_args = lambda self: orig_q(self) + extra_qemu
orig_v = numa_lab.vng_command
def vng(*a, **k):
    argv = orig_v(*a, **k)
    return argv[:1] + extra_vng + argv[1:]
numa_lab.vng_command = vng
sys.exit(numa_lab.main(sys.argv[3:]))
