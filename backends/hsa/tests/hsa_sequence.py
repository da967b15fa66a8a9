"""The whole hsa_amd_vmem_* sequence, step by step with what each call returned (a log for
a real run: ``python backends/hsa/tests/hsa_sequence.py`` with ``AML_HSA_LIBRARY`` naming
the library). The rocrtst order: reserve 20 granules, handles of type NONE and PINNED and
their properties, map, get_access NONE before set_access, RO then RW, data through the
mapping, retain and release, export a dma-buf fd and import it twice in a second process
(the fd sent over a Unix socket), the documented failures, unmap, release, free. Exits 0
when every step did what the contract says."""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
from pathlib import Path

import aml_hsa
from aml_hsa import MemoryType, Permission

from aml_core.errors import AMLError

HERE = Path(__file__).resolve().parent


def step(name: str, value: object = "") -> None:
    print(f"{name:<48} {value}", flush=True)


def expect_error(name: str, fn: object, kind: type[AMLError]) -> None:
    try:
        fn()  # type: ignore[operator]
    except kind as exc:
        step(name, f"{type(exc).__name__}: {exc}")
        return
    raise SystemExit(f"{name}: no {kind.__name__}")


def main() -> None:
    rt = aml_hsa.get_runtime()
    step("library", f"{rt.lib.path} ({rt.lib.label}, {rt.lib.interface_text})")
    for agent in aml_hsa.agents():
        step(f"agent {agent.handle:#x}", f"{agent.type.name} {agent.name} device={agent.device}")
    pool = aml_hsa.device_pool(0)
    gpu = rt.gpus[0]
    g = pool.granule
    step("device pool", f"{pool.handle:#x} granule={g} rec_granule={pool.rec_granule} size={pool.size}")
    va = aml_hsa.address_reserve(20 * g)
    step("address_reserve(20 granules)", f"{va:#x}")
    none = aml_hsa.handle_create(pool, g, MemoryType.NONE)
    pinned = aml_hsa.handle_create(pool, g, MemoryType.PINNED)
    for h in (none, pinned):
        p, kind = aml_hsa.get_alloc_properties_from_handle(h)
        step(f"handle_create -> {h:#x}", f"pool={p.handle:#x} type={kind.name}")
    aml_hsa.map(va, g, none)
    aml_hsa.map(va + 2 * g, g, pinned)
    step("map x2", "ok")
    step("get_access before set_access", aml_hsa.get_access(va, gpu).name)
    assert aml_hsa.get_access(va, gpu) is Permission.NONE
    for perm in (Permission.RO, Permission.RW):
        aml_hsa.set_access(va, g, [(gpu, perm)])
        step(f"set_access {perm.name} -> get_access", aml_hsa.get_access(va, gpu).name)
        assert aml_hsa.get_access(va, gpu) is perm
    aml_hsa.set_access(va + 2 * g, g, [(gpu, Permission.RW)])
    src = ctypes.create_string_buffer(bytes(range(16)), 16)
    rt.memory_copy(va + 2 * g, ctypes.addressof(src), 16)
    dst = ctypes.create_string_buffer(16)
    rt.memory_copy(ctypes.addressof(dst), va + 2 * g, 16)
    assert dst.raw == bytes(range(16))
    step("hsa_memory_copy in and out", "16 bytes round trip")
    retained = aml_hsa.retain_alloc_handle(va)
    assert retained == none
    aml_hsa.handle_release(retained)
    step("retain_alloc_handle + release", f"{retained:#x}")
    expect_error("get_access of an unmapped range", lambda: aml_hsa.get_access(va + 10 * g, gpu), AMLError)
    expect_error("address_free while mapped", lambda: aml_hsa.address_free(va, 20 * g), AMLError)
    expect_error("unmap with the wrong size", lambda: aml_hsa.unmap(va, 2 * g), AMLError)
    expect_error("overlapping map", lambda: aml_hsa.map(va, g, pinned), AMLError)
    fd = aml_hsa.export_shareable_handle(pinned)
    step("export_shareable_handle", f"fd {fd}")
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "hsa_children.py"), "import", str(child.fileno()), str(g)],
        pass_fds=(child.fileno(),),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    child.close()
    socket.send_fds(parent, [b"fd"], [fd])
    out, err = proc.communicate(timeout=120)
    parent.close()
    os.close(fd)
    step(
        "second process: import twice, map, read", f"rc={proc.returncode} {out.strip()} {err.strip()[-300:]}"
    )
    assert proc.returncode == 0
    for address, h in ((va, none), (va + 2 * g, pinned)):
        aml_hsa.unmap(address, g)
        aml_hsa.handle_release(h)
    expect_error("handle_release twice", lambda: aml_hsa.handle_release(none), AMLError)
    expect_error("address_free with the wrong size", lambda: aml_hsa.address_free(va, g), AMLError)
    aml_hsa.address_free(va, 20 * g)
    step("unmap, release, address_free", f"tracked now: {rt.live()}")
    assert rt.live() == {"reservations": 0, "handles": 0, "mappings": 0}
    step("SEQUENCE", "OK")


if __name__ == "__main__":
    main()
