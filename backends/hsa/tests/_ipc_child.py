"""Child process of the aml-hsa IPC test: reads a pickled IpcHandle on stdin, opens it
twice (one mapping: the importer cache), checks the exporter's bytes, writes its own,
closes both opens and prints ``OK``."""

from __future__ import annotations

import ctypes
import pickle
import sys

import aml_hsa

handle = pickle.loads(sys.stdin.buffer.read())
first = aml_hsa.ipc_open(handle)
second = aml_hsa.ipc_open(handle)
assert first is second
rt = aml_hsa.get_runtime()
out = ctypes.create_string_buffer(handle.size)
rt.memory_copy(ctypes.addressof(out), first.ptr, handle.size)
assert out.raw == bytes(range(256)) * (handle.size // 256), out.raw[:16]
reply = ctypes.create_string_buffer(b"child", 5)
rt.memory_copy(first.ptr, ctypes.addressof(reply), 5)
aml_hsa.ipc_close(second)
aml_hsa.ipc_close(first)
print("OK", first.device, flush=True)
