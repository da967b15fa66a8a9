"""The importing process of the VMM sharing test, run as ``python _vmm_child.py``.

Reads ``{"fd": n, "size": bytes, "read": n}`` on stdin (the fd is inherited), imports the
physical allocation, maps it, reads ``read`` bytes and prints a JSON report, including
the arguments of the import call the double saw.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys


def main() -> int:
    import aml_hip

    from aml_core.errors import AMLError

    request = json.loads(sys.stdin.read())
    fd, size, n = int(request["fd"]), int(request["size"]), int(request["read"])
    report: dict[str, object] = {"pid": os.getpid()}
    vm = aml_hip.virtual_memory(0)
    try:
        phys = vm.import_fd(fd, size)
        res = vm.reserve(size)
        vm.map(res.ptr, size, phys)
        vm.set_access(res.ptr, size, aml_hip.Access.READWRITE)
        out = (ctypes.c_char * n)()
        aml_hip.get_runtime().memcpy(ctypes.addressof(out), res.ptr, n)
        report["read"] = bytes(out).hex()
        report["properties"] = [vm.properties(phys).type, vm.properties(phys).location_device]
        vm.unmap(res.ptr, size)
        vm.release(phys)
        vm.address_free(res)
    except AMLError as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        vm.close()
        os.close(fd)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
