"""PyTorch workloads on aml's hook (``aml_cuda.use_with_torch(pool)``) against PyTorch's own
caching allocator and RMM's (``rmm.allocators.torch`` over an RMM pool), each
(allocator, workload) pair in its own process (issue 19, item 6).

Usage on the GPU machine (writes torch_workloads.json, .md, .log and _<workload>.png to
--out, default $OUT, else a new run folder ``evidence/<date>-<machine>-torch-workloads/``;
prints the summary last; about 4 minutes, at most ``--budget`` (250 s) plus one
``--child-timeout`` (60 s); ``--quick``: one short process per allocator, under a minute)::

    PYTHONUNBUFFERED=1 python benchmarks/torch_workloads.py --out $OUT

RMM is imported as ``rmm`` (carried to the GPU machine as wheels: ``rmm-cu13``,
``librmm-cu13``, ``rapids-logger``); without it that allocator is skipped, with the reason.

Allocators (:data:`ALLOCATORS`): ``torch`` (PyTorch's caching allocator, the base of the
ratios), ``torch-expandable`` (the same with ``expandable_segments:True``, on the training
loop only), ``aml`` (``use_with_torch(aml_core.pool(aml_cuda.create(0)))``),
``aml-expandable`` (over ``aml_core.pool(aml_cuda.virtual_memory(0), expandable=True)``),
``rmm``. Workloads: ``train`` (an MLP of 6 Linear(2048) layers, AdamW, bf16 autocast,
batch 8, the sequence length drawn from 128..1024 every step, seeded: steps per second and
peak reserved memory) and ``infer`` (a loop of small tensor ops on tensors of 1 K..256 K
elements, seeded: µs per op). The mechanics (processes, interleaving, budget, output) are
``workload_driver.py``'s.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from workload_driver import (
    PEAK_IN_USE,
    PEAK_RESERVED,
    Installed,
    Metric,
    Skip,
    Suite,
    Workload,
    device_used,
    import_or_skip,
    versions,
)
from workload_driver import main as driver_main

HIDDEN = 2048
LAYERS = 6
BATCH = 8
SEQ_MIN, SEQ_MAX, SEQ_STEP = 128, 1024, 64
#: elements of the inference loop's tensors (float32: 4 KiB .. 1 MiB)
INFER_SIZES = (1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18)
#: tensor operations per inference iteration (empty, normal_, mul, add, relu, sum), of
#: which all but normal_ allocate
OPS_PER_ITER = 6

ALLOCATORS = {
    "torch": "PyTorch's CUDA caching allocator (the default). Reserved: `torch.cuda.max_memory_reserved()`, "
    "the most bytes it held from cudaMalloc; in use: `torch.cuda.max_memory_allocated()`.",
    "torch-expandable": "the same with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (segments grown "
    "in place with CUDA VMM); same counters (reserved counts mapped bytes).",
    "aml": "`aml_cuda.use_with_torch(aml_core.pool(aml_cuda.create(0)))`. Reserved: the pool's "
    "`pool_stats.peak_bytes_reserved` (slabs held from the area); in use: `peak_bytes_in_use` (bytes "
    "PyTorch asked for).",
    "aml-expandable": "`use_with_torch` over `aml_core.pool(aml_cuda.virtual_memory(0), expandable=True, "
    "capacity=<GPU memory>)`: one segment grown in place. Same counters (reserved counts mapped chunks).",
    "rmm": "`rmm.allocators.torch.rmm_torch_allocator` over `rmm.mr.PoolMemoryResource(CudaMemoryResource(), "
    "initial_pool_size=0)` set as the device's resource. Reserved: `pool_size()` at the end (an RMM pool "
    "grows and never shrinks: its size at the end is its peak); in use: not reported.",
}

TRAIN = Workload(
    "train",
    f"{LAYERS} x Linear({HIDDEN})+GELU MLP, AdamW, bf16 autocast, batch {BATCH}, sequence length "
    f"{SEQ_MIN}..{SEQ_MAX} (step {SEQ_STEP}) drawn per step, seeded",
    (
        Metric(
            "steps_per_s",
            "training steps/s",
            "steps/s",
            True,
            "rate",
            "timed steps / seconds, after warm-up steps, CUDA synchronized at both ends.",
        ),
        PEAK_RESERVED,
        PEAK_IN_USE,
        device_used("cuBLAS workspaces"),
    ),
)
INFER = Workload(
    "infer",
    "a loop of small tensor ops under inference_mode (empty+normal_, mul, add, relu, sum on 1 K..256 K "
    "float32 elements, sizes seeded)",
    (
        Metric(
            "us_per_op",
            "time per op",
            "µs",
            False,
            "us",
            f"seconds of the timed loop / its tensor operations ({OPS_PER_ITER} per iteration, "
            f"{OPS_PER_ITER - 1} of them allocating), CUDA synchronized at both ends.",
        ),
        PEAK_RESERVED,
        device_used("cuBLAS workspaces"),
    ),
)
SUITE = Suite(
    name="torch_workloads",
    what="torch-workloads",
    title="PyTorch workloads on aml's hook and its peers",
    framework="PyTorch",
    native="torch",
    allocators=ALLOCATORS,
    workloads=(TRAIN, INFER),
    pairs=tuple(
        (a, w.name)
        for w in (TRAIN, INFER)
        for a in ALLOCATORS
        if (a, w.name) != ("torch-expandable", "infer")
    ),
    budget_s=250.0,
    quick_budget_s=50.0,
    child_timeout_s=60.0,
)


def install(allocator: str, args: argparse.Namespace) -> Installed:
    """Install ``allocator`` as PyTorch's, before PyTorch allocates anything (Skip where
    it cannot be)."""
    if allocator == "torch-expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"  # read at import
    torch = import_or_skip("torch")
    if not torch.cuda.is_available():
        raise Skip("PyTorch sees no CUDA device")
    inst = Installed(
        torch,
        quick=bool(args.quick),
        seed=int(args.seed),
        sync=torch.cuda.synchronize,
        free_memory=lambda: int(torch.cuda.mem_get_info()[0]),
    )
    if allocator in ("torch", "torch-expandable"):
        inst.peak_reserved = torch.cuda.max_memory_reserved
        inst.peak_in_use = torch.cuda.max_memory_allocated
    elif allocator in ("aml", "aml-expandable"):
        inst.use_aml(expandable=allocator == "aml-expandable", hook="use_with_torch")
    elif allocator == "rmm":
        change = torch.cuda.memory.change_current_allocator
        inst.use_rmm("rmm.allocators.torch", "rmm_torch_allocator", change)
    else:
        raise Skip(f"unknown allocator {allocator!r}")
    return inst.start()


def train(inst: Installed) -> dict[str, Any]:
    """The training loop: steps per second and the memory figures."""
    torch = inst.lib
    torch.manual_seed(inst.seed)
    rng = random.Random(inst.seed)
    warm, steps = (3, 15) if inst.quick else (10, 400)
    seqs = [rng.randrange(SEQ_MIN, SEQ_MAX + 1, SEQ_STEP) for _ in range(warm + steps)]
    layers: list[Any] = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers).to("cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(seq: int) -> Any:
        x = torch.randn(BATCH, seq, HIDDEN, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for seq in seqs[:warm]:
        step(seq)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    loss = None
    for seq in seqs[warm:]:
        loss = step(seq)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    final = float(loss.item()) if loss is not None else math.nan
    if not math.isfinite(final):
        raise RuntimeError(f"the loss is not finite ({final})")
    return {
        "steps_per_s": steps / dt,
        "steps": steps,
        "warmup_steps": warm,
        "seconds": dt,
        "final_loss": final,
        "tokens_per_step_mean": BATCH * sum(seqs[warm:]) / steps,
        **inst.memory(),
    }


def infer(inst: Installed) -> dict[str, Any]:
    """The inference loop of small tensor ops: µs per op."""
    torch = inst.lib
    torch.manual_seed(inst.seed)
    rng = random.Random(inst.seed)
    warm, iters = (200, 2000) if inst.quick else (1000, 15000)
    sizes = [rng.choice(INFER_SIZES) for _ in range(warm + iters)]

    def loop(ns: list[int]) -> Any:
        e = None
        for n in ns:
            a = torch.empty(n, device="cuda").normal_()
            b = a * 2.0
            c = b + a
            d = torch.relu(c)
            e = d.sum()
        return e

    with torch.inference_mode():
        loop(sizes[:warm])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        last = loop(sizes[warm:])
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        check = float(last.item()) if last is not None else math.nan
    if not math.isfinite(check):
        raise RuntimeError(f"the loop's last sum is not finite ({check})")
    ops = iters * OPS_PER_ITER
    return {"us_per_op": dt * 1e6 / ops, "ops": ops, "iterations": iters, "seconds": dt, **inst.memory()}


def describe(inst: Installed) -> dict[str, Any]:
    torch = inst.lib
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": getattr(torch.version, "cuda", None),
        "device": torch.cuda.get_device_name(0),
    }
    return {**env, **versions("aml_core", "aml_cuda", "rmm")}


if __name__ == "__main__":
    sys.exit(
        driver_main(SUITE, Path(__file__).resolve(), install, {"train": train, "infer": infer}, describe)
    )
