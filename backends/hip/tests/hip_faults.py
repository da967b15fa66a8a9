"""The HIP fault-injection table (issue 9), generated from the double's exported functions.

Every public operation below is run once without faults to learn which hip* functions it
calls and how often; then, for each such function and each of its first calls, the same
operation runs again with that one call failing (``hipErrorInvalidValue``). Each run must
either succeed (a failure the operation tolerates, such as an error-name lookup) or raise
an :class:`~aml_core.errors.AMLError` whose native cause is the failed function; after
the operation's objects are closed again (the retry a caller makes), every live counter of
the double must be back to zero.

Run as ``python hip_faults.py OPERATION`` with ``AML_HIP_LIBRARY`` naming the double: it
prints one JSON line ``{"runs": [...], "used": {...}}``. The tests run each operation in its
own process, so that a crash is one failed operation with its signal.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import mmap
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DOUBLE_SOURCE = HERE / "native" / "double.c"
INVALID_VALUE = 1
#: Occurrences of one function failed in turn, per operation.
MAX_OCCURRENCES = 3


def exported_functions() -> list[str]:
    """The hip* functions the double exports (its HIPDOUBLE_FUNCS table)."""
    text = DOUBLE_SOURCE.read_text()
    block = text[text.index("#define HIPDOUBLE_FUNCS(X)") :]
    block = block[: block.index("enum {")]
    return re.findall(r"X\((hip\w+)\)", block)


#: Functions no public operation calls, with why (the table test checks this list).
NOT_CALLED: dict[str, str] = {
    "hipDriverGetVersion": "read only by the probe (aml info), not by an area operation",
    "hipInit": "aml_hip never calls it (the HIP runtime initializes itself)",
    "hipGetErrorName": "called only to name an error (the fault runs do); its lookup never raises",
    "hipMemGetInfo": "read by the probe and benchmarks only",
    "hipExtMallocWithFlags": "aml allocates device memory with hipMalloc",
    "hipHostAlloc": "the pre-6.3 spelling; this double emulates 6.2 with hipHostMalloc",
    "hipExtHostAlloc": "the 6.3+ spelling; this double emulates 6.2 with hipHostMalloc",
    "hipFreeHost": "aml frees host memory with hipHostFree",
    "hipHostGetFlags": "not used by aml (the flags are known from the area)",
    "hipStreamCreate": "aml creates streams with hipStreamCreateWithFlags",
    "hipGetErrorString": "aml names errors with hipGetErrorName",
    "hipPeekAtLastError": "not called: every hip* call's result is checked directly",
    "hipIpcOpenMemHandle": "called in the importer's process: test_hip_reliability opens tampered handles",
    "hipIpcCloseMemHandle": "called in the importer's process: test_hip_reliability opens tampered handles",
    "hipMemGetAddressRange": "called in the importer's process, after an open: test_hip_reliability's "
    "handle that claims more than was exported",
    "hipMemImportFromShareableHandle": "needs a second process (test_hip_vmm shares an fd)",
}


def _control() -> Any:
    path = HERE / "native" / "hip_double.py"
    spec = importlib.util.spec_from_file_location("aml_hip_tests_double_build", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.DoubleControl(os.environ["AML_HIP_LIBRARY"])


# -- the operations: each registers what it makes in `made`, closed again after a failure ---
Made = list[Any]


def _area(made: Made, flags: int) -> Any:
    import aml_hip

    area = aml_hip.create(0, flags)
    made.append(area)
    return area


def op_device(made: Made) -> None:
    area = _area(made, 0)
    buf = area.mmap(8192)
    area.write(buf, b"x" * 16)
    area.read(buf, 16)
    area.munmap(buf)
    area.close()


def op_managed(made: Made) -> None:
    from aml_hip import HipFlags

    area = _area(made, HipFlags.ALLOC_UNIFIED)
    buf = area.mmap(8192)
    area.advise(buf, 1, 0)
    area.prefetch(buf, 0)
    area.range_attribute(buf, 1)
    area.range_attributes(buf, [1, 2])
    area.attach(buf, None)
    area.munmap(buf)
    area.close()


def op_host(made: Made) -> None:
    from aml_hip import HipFlags

    area = _area(made, HipFlags.ALLOC_HOST)
    area.munmap(area.mmap(8192))
    area.close()


def op_host_mapped(made: Made) -> None:
    from aml_hip import HipFlags

    area = _area(made, HipFlags.ALLOC_HOST | HipFlags.ALLOC_MAPPED)
    area.munmap(area.mmap(8192))
    area.close()


def op_registered(made: Made) -> None:
    from aml_hip import HipFlags, HipMmapOptions

    memory = mmap.mmap(-1, 8192)
    made.append(memory)  # closed after the area (made is closed newest first)
    area = _area(made, HipFlags.ALLOC_MAPPED)
    area.munmap(area.mmap(8192, HipMmapOptions(ptr=memory)))
    area.close()


def op_stream(made: Made) -> None:
    import aml_hip

    stream = aml_hip.BACKEND.stream(non_blocking=True)
    made.append(stream)
    stream.synchronize()
    stream.close()


def op_other_device(made: Made) -> None:
    """An area of device 1 used from device 0: hipSetDevice there and back."""
    import aml_hip

    area = aml_hip.create(1, 0)
    made.append(area)
    area.munmap(area.mmap(4096))
    area.close()


def op_ipc_export(made: Made) -> None:
    area = _area(made, 0)
    buf = area.mmap(8192)
    export = area.ipc_export(buf)
    assert export.handle.size == 8192
    area.munmap(buf)
    area.close()


def op_pointer(made: Made) -> None:
    import aml_hip

    area = _area(made, 0)
    buf = area.mmap(4096)
    aml_hip.BACKEND.pointer_attributes(buf)
    rt = aml_hip.get_runtime()
    rt.memset(buf.ptr, 7, 4096)
    rt.synchronize()
    rt.device_info(0)
    area.munmap(buf)
    area.close()


def op_vm_mmap(made: Made) -> None:
    import aml_hip

    vm = aml_hip.BACKEND.virtual_memory(0)
    made.append(vm)
    g = vm.granularity()
    buf = vm.mmap(g)
    vm.munmap(buf)
    grow = vm.growable(4 * g)
    grow.grow(2 * g)
    vm.munmap(grow)
    vm.close()


def op_vm_steps(made: Made) -> None:
    import aml_hip

    from aml_core.gpu.vmm import Access

    vm = aml_hip.BACKEND.virtual_memory(0)
    made.append(vm)
    g = vm.granularity(recommended=True)
    res = vm.reserve(g)
    phys = vm.create(g, exportable=True)
    vm.map(res.ptr, g, phys)
    vm.set_access(res.ptr, g, Access.READWRITE)
    vm.get_access(res.ptr)
    vm.properties(phys)
    again = vm.retain(res.ptr)
    vm.release(again)
    fd = vm.export_fd(phys)
    os.close(fd)
    vm.unmap(res.ptr, g)
    vm.release(phys)
    vm.address_free(res)
    vm.close()


class _PeerAccess:
    """What op_peer enabled, as an object the caller's retry closes: disables it."""

    def __init__(self, peer: int, device: int) -> None:
        self.peer, self.device = peer, device

    def close(self) -> None:
        import aml_hip

        aml_hip.disable_peer_access(self.peer, self.device)


def op_peer(made: Made) -> None:
    """Peer access from device 1 (selected and restored: the caller is on device 0), enabled
    twice (the second answers False, clearing hipGetLastError) and disabled twice; a copy
    between the devices."""
    import aml_hip

    assert aml_hip.can_access_peer(1, 0)
    made.append(_PeerAccess(0, 1))
    aml_hip.enable_peer_access(0, device=1)
    aml_hip.enable_peer_access(0, device=1)
    first = aml_hip.create(0, 0)
    made.append(first)
    second = aml_hip.create(1, 0)
    made.append(second)
    a, b = first.mmap(4096), second.mmap(4096)
    aml_hip.copy_peer(b, a)
    first.munmap(a)
    second.munmap(b)
    second.close()
    first.close()
    aml_hip.disable_peer_access(0, device=1)
    aml_hip.disable_peer_access(0, device=1)


OPERATIONS: dict[str, Callable[[Made], None]] = {
    "device": op_device,
    "managed": op_managed,
    "host": op_host,
    "host-mapped": op_host_mapped,
    "registered": op_registered,
    "stream": op_stream,
    "other-device": op_other_device,
    "ipc-export": op_ipc_export,
    "pointer-memset-info": op_pointer,
    "vm-mmap-growable": op_vm_mmap,
    "vm-steps": op_vm_steps,
    "peer": op_peer,
}


def _close_again(made: Made) -> list[str]:
    """The caller's retry: close everything the operation made (newest first)."""
    from aml_core.errors import AMLError

    problems: list[str] = []
    for obj in reversed(made):
        try:
            obj.close()
        except AMLError as exc:  # the fault was one call: a second close must work
            problems.append(f"closing {obj!r} again failed: {exc}")
    return problems


def run(name: str) -> dict[str, Any]:
    import aml_hip

    from aml_core.errors import AMLError

    ctl = _control()
    functions = exported_functions()
    operation = OPERATIONS[name]

    def counts() -> dict[str, int]:
        return {f: int(ctl.calls(f)) for f in functions}

    def live() -> dict[str, int]:
        kinds = ("device", "host", "managed", "registered", "ipc")
        kinds += ("vmm_handle", "vmm_reservation", "vmm_mapping", "stream", "peer")
        return {k: n for k in kinds if (n := int(ctl.live(k)))}

    def fresh() -> None:
        ctl.reset()
        ctl.set_devices(2, 1 << 30)
        aml_hip.BACKEND.reset()

    fresh()
    made: Made = []
    operation(made)
    used = {f: n for f, n in counts().items() if n}
    aml_hip.BACKEND.reset()
    runs: list[dict[str, Any]] = []
    for function, n in sorted(used.items()):
        for k in range(min(n, MAX_OCCURRENCES)):
            fresh()
            ctl.inject(function, INVALID_VALUE, k, 1)
            made = []
            entry: dict[str, Any] = {"function": function, "occurrence": k}
            try:
                operation(made)
            except AMLError as exc:
                cause = exc.native
                entry["error"] = type(exc).__name__
                entry["code"] = exc.code.name
                entry["cause"] = cause.function if cause is not None else None
                entry["text"] = str(exc)[:300] + "".join(getattr(exc, "__notes__", []))[:300]
            except BaseException as exc:  # a bare error: reported, the table test fails it
                entry["bare"] = f"{type(exc).__name__}: {exc}"[:300]
            entry["close_problems"] = _close_again(made)
            aml_hip.BACKEND.reset()
            entry["live"] = live()
            runs.append(entry)
    return {"used": used, "runs": runs}


def main() -> int:
    print(json.dumps(run(sys.argv[1])))
    return 0


if __name__ == "__main__":
    ctypes.CDLL(os.environ["AML_HIP_LIBRARY"])  # the same library the backend loads
    sys.exit(main())
