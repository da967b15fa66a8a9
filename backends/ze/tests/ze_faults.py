"""Level Zero's fault table (issue 9): each public operation below runs with every ze*
call it makes failing in turn, with each code of ``CODES``, and must raise the AML error
of the area's table (docs/aml-contract.md#level-zero-area) or absorb it where ``tolerated``
says why. :mod:`tests.support.faults` runs it, one process per operation.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import aml_ze
from aml_ze import ZeFlags
from aml_ze import abi as C
from aml_ze.errors import ERRORS
from ze_helpers import ZeDouble

from aml_core.errors import ErrorCode
from tests.support.faults import (
    FaultTable,
    GpuOperations,
    Made,
    Operation,
    Rule,
    Undo,
    main,
    undo,
)

#: Injected codes: one for each AML class of the area's table, and one it does not list.
CODES = {
    C.ZE_RESULT_ERROR_INVALID_NULL_POINTER: "ZE_RESULT_ERROR_INVALID_NULL_POINTER",
    C.ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY: "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
    C.ZE_RESULT_ERROR_UNSUPPORTED_SIZE: "ZE_RESULT_ERROR_UNSUPPORTED_SIZE",
    C.ZE_RESULT_ERROR_DEVICE_LOST: "ZE_RESULT_ERROR_DEVICE_LOST",
}


# -- the operations: each registers what it makes in `made`, closed again after a failure ---
def _area(made: Made, kind: str) -> Any:
    if kind == "host":
        area = aml_ze.host_area()
    else:
        area = aml_ze.device_area(flags=ZeFlags.SHARED if kind == "shared" else ZeFlags.DEVICE)
    made.append(area)
    return area


GPU = GpuOperations(aml_ze, ZeDouble, lambda made: _area(made, "device"))


def op_device(made: Made) -> None:
    area = _area(made, "device")
    buf = area.mmap(8192)
    aml_ze.alloc_properties(buf)
    aml_ze.BACKEND.pointer_attributes(buf)
    area.munmap(buf)
    area.close()


def op_shared(made: Made) -> None:
    area = _area(made, "shared")
    buf = area.mmap(8192)
    with memoryview(buf) as view:
        view[:5] = b"hello"
    area.munmap(buf)
    area.close()


def op_host(made: Made) -> None:
    area = _area(made, "host")
    area.munmap(area.mmap(8192))
    area.close()


def op_dmabuf(made: Made) -> None:
    """Exportable device memory (dmabuf=True) exported as a dma-buf, its fd closed."""
    area = aml_ze.device_area(dmabuf=True)
    made.append(area)
    buf = area.mmap(8192)
    handle = area.export_dmabuf(buf)
    step = Undo(f"close fd {handle.fd}", lambda: os.close(handle.fd))
    made.append(step)
    undo(made, step)
    area.munmap(buf)
    area.close()


def op_device_info(made: Made) -> None:
    rt = aml_ze.get_runtime()
    rt.device_info(0)


OPERATIONS: dict[str, Operation] = {
    "device": op_device,
    "shared": op_shared,
    "host": op_host,
    "device-info": op_device_info,
    "ipc-export": GPU.ipc_export,
    "dmabuf-export": op_dmabuf,
    "ipc-open": GPU.ipc_open,
    "vm-mmap-growable": GPU.vm_mmap,
    "vm-steps": GPU.vm_steps,
}

TABLE = FaultTable(
    double=ZeDouble,
    operations=OPERATIONS,
    codes=CODES,
    translate=ERRORS.translate,
    # free memory is a report: whatever Sysman refuses is "not known" (aml_ze.sysman)
    tolerated={
        **dict.fromkeys(
            (
                "zesInit",
                "zesDriverGet",
                "zesDeviceGet",
                "zesDeviceGetProperties",
                "zesDeviceEnumMemoryModules",
                "zesMemoryGetProperties",
                "zesMemoryGetState",
            ),
            "Sysman answers free memory only, a report: a failure is 'not known' (None)",
        ),
        "zeDeviceGetProperties@device-info": "its second call reads the core device's UUID to "
        "match a Sysman device; a failure leaves free memory 'not known'",
    },
    rules={
        "zeInit": Rule(
            "ZeRuntime: nothing is called after a failed zeInit, which says no usable driver",
            lambda native, code: {ErrorCode.ENOTSUP},
        ),
    },
    memory_kinds=("device", "host", "shared"),
)

if __name__ == "__main__":
    sys.exit(main(TABLE))
