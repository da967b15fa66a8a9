"""The experiment driver of small-node-probe-mounts.log: the lab's runner with extra QEMU
arguments (argv[1]) and vng options (argv[2]), then the runner's own arguments. Run from
the repository root: python evidence/.../exp_driver.py "QEMU ARGS" "--force-9p" --lock ..."""

import shlex
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path.cwd()))

from tests.support import numa_lab

extra_qemu = shlex.split(sys.argv[1])
extra_vng = shlex.split(sys.argv[2])
topology_args = numa_lab.LabTopology.qemu_args
runner_vng = numa_lab.vng_command


def _qemu_args(self: numa_lab.LabTopology) -> list[str]:
    return topology_args(self) + extra_qemu


def _vng(*args: Any, **kwargs: Any) -> list[str]:
    argv = runner_vng(*args, **kwargs)
    return argv[:1] + extra_vng + argv[1:]


numa_lab.LabTopology.qemu_args = _qemu_args  # type: ignore[method-assign]
numa_lab.vng_command = _vng
sys.exit(numa_lab.main(sys.argv[3:]))
