#!/usr/bin/env bash
# Install aml-core and aml-cuda, run the CUDA tests (GPU tests included) and the
# benchmark on a GPU machine. Logs and results go to $OUT (default: a new run folder of this
# checkout, evidence/<date>-<machine>-cuda-<mode>/, named by benchmarks/machine_info.py; add
# it to evidence/README.md's index when you commit it).
# Usage, from anywhere: bash backends/cuda/tests/run_on_gpu.sh [tests|bench|all|alloc|soak|gpu2|workloads|nccl|ucx|mpi] [pytest args...]
# ("alloc": benchmarks/alloc_bench.py, the pool against CuPy, PyTorch, cuda.core and the raw
# calls; its JSON, markdown and PNGs go to $OUT, its log to stdout only. "soak":
# benchmarks/soak_pool.py, 10**5 pool operations, and benchmarks/soak_cuda.py, 10**5 area
# operations (streams, IPC, virtual memory, hostile input), device memory within 2 MiB, on
# both sides, of a baseline read before the areas exist: at most about 5 minutes. Issue 30's
# re-runs of alloc, soak and workloads with the paired statistics: benchmarks/figures_on_gpu.sh.)
# ("workloads": benchmarks/torch_workloads.py and benchmarks/cupy_workloads.py, PyTorch and
# CuPy on aml's hooks against their own allocators and RMM's, one process per pair; their
# JSON, markdown, PNGs and children's logs go to $OUT, their output to
# torch-workloads-stdout.log and cupy-workloads-stdout.log; at most about 6 minutes,
# WORKLOADS_QUICK=1 for a smoke test of about 1. RMM comes from the wheels in .whl/ of this checkout (rmm-cu13,
# librmm-cu13, rapids-logger), installed into /tmp/site unless rmm imports already; without
# them the RMM peers are skipped, with the reason.)
# ("gpu2": issue 13 on a machine with two GPUs, in one call: the gpu2 and peer tests of
# aml-cuda (cuda-gpu2-tests.log/.xml), of aml-hip through the CUDA-forwarding double
# ($OUT/hip-forward/) and aml-ze's ($OUT/ze-forward/), the GPU topology
# (gpu2-topology.txt) and benchmarks/gpu2_bench.py (gpu2_bench.json/.md/_*.png,
# gpu2-bench.log). On one GPU the two-GPU tests skip with "needs 2 GPUs, this machine has
# 1", the single-GPU ones run, and the benchmark writes nothing (exit 77, not a failure);
# GPU2_SMOKE=1 then runs it with --smoke-one-gpu, its files named as a smoke test.)
# ("nccl": issue 21 on a machine with two GPUs: benchmarks/nccl_bench.py, NCCL all-reduce and
# all-gather over aml device, pooled and virtual-memory buffers against CuPy's and PyTorch's
# memory (CuPy's NCCL binding, torch.distributed), and a DDP step on aml's use_with_torch
# against PyTorch's allocator (5 alternating runs of each, each rank on its own half of the
# physical cores), one process per GPU;
# nccl_bench.json/.md, the ranks' logs <run>-rank<r>.log and its output nccl-bench.log in
# $OUT; about 3.5 minutes, at most 490 s after the install (12 runs of at most 40 s each);
# NVLink multicast off (NCCL_NVLS_ENABLE=0,
# TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1, exported before anything runs,
# and in every rank). NCCL_QUICK=1 for a smoke test; NCCL_PHASES (e.g. ddp-torch,ddp-aml),
# NCCL_DDP_ROUNDS and NCCL_TIMEOUT (seconds, default 490) pass on to the benchmark. On one
# GPU it writes nothing (exit 77,
# not a failure).)
# ("ucx": issue 21's UCX part: tests/ucx (host buffers between two processes, and aml-cuda
# buffers GPU to GPU on two GPUs) and benchmarks/ucx_bench.py in both modes, host
# (ucx-host/: aml and pooled buffers against NumPy) and device (ucx-device/: aml-cuda and
# pooled against CuPy, with UCX's protocol choices in ucx-device.log); ucx-tests.log. ucxx
# comes from this checkout's .whl/: the RMM wheels above and ucx-site.tgz, the ucxx-cu13
# 0.52.0, libucxx-cu13 0.52.0 and libucx-cu13 1.21.0 wheels installed with
# `pip install --no-deps --target site --python-version 3.12 --only-binary=:all:` and packed
# (`tar czf .whl/ucx-site.tgz -C site .`) without their static libraries, headers and test
# programs: the wheels as they are (48 MB) do not fit the device tool's 64 MiB with the tree.
# UCX_ROUNDS sets both benchmarks' interleaved rounds (default 11). One GPU: the device parts
# skip or write nothing (exit 77, not a failure).)
# ("mpi": tests/mpi (real ranks over the MPI mpi4py was built with: point to point,
# allreduce, RMA, DLPack, host IPC, the benchmark's quick run; the CUDA-aware test skips
# unless the MPI is) and benchmarks/mpi_bench.py (mpi/: ping-pong and in-place allreduce of
# aml host, pooled and NUMA-bound buffers against NumPy arrays, 11 interleaved rounds: the
# GPU machines' shared CPUs are noisy; MPI_ROUNDS to change); mpi-tests.log, mpi-bench.log.)
set -uo pipefail
what=${1:-all}
shift || true
if [ "$what" = nccl ]; then # never NVLink multicast: it can take shared machines' GPUs out of service
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
fi
repo=$(cd "$(dirname "$0")/../../.." && pwd)
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
OUT=${OUT:-$($py "$repo/benchmarks/machine_info.py" --evidence-dir "cuda-$what")}
mkdir -p "$OUT"
{
    date -u
    echo "commit: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)," \
        "tracked files changed since: $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null | wc -l)"
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
    $py -c 'import sys, cuda.bindings, numpy; print(sys.version.split()[0], "cuda-bindings", cuda.bindings.__version__, "numpy", numpy.__version__)'
    $py -c 'import cupy, torch; print("cupy", cupy.__version__, "torch", torch.__version__)'
    $py -m pip install --no-deps --no-build-isolation "$repo" "$repo/backends/cuda" 2>&1 | tail -2
    (cd /tmp && $py -m aml_core info)
} 2>&1 | tee "$OUT/cuda-gpu-env.log"
rc=0
# RMM's wheels from .whl/ (rmm-cu13, librmm-cu13, rapids-logger) into /tmp/site, on PYTHONPATH.
rmm_wheels() {
    $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$repo"/.whl/rmm_cu13-*.whl "$repo"/.whl/librmm_cu13-*.whl "$repo"/.whl/rapids_logger-*.whl 2>&1 | tail -2
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
}
# A two-GPU benchmark's status (name, log, status): 77, fewer than 2 GPUs, is no failure.
two_gpu_status() {
    if [ "$3" = 77 ]; then
        echo "$1: fewer than 2 GPUs, nothing measured" | tee -a "$2"
    elif [ "$3" != 0 ]; then
        rc=1
    fi
}
if [ "$what" = all ] || [ "$what" = tests ]; then
    (cd /tmp && timeout 330 $py -m pytest "$repo/backends/cuda/tests" -q -rfEs -p no:cacheprovider \
        --timeout=150 --junitxml="$OUT/cuda-gpu-tests.xml" "$@") 2>&1 | tee "$OUT/cuda-gpu-tests.log"
    rc=${PIPESTATUS[0]}
fi
if [ "$what" = all ] || [ "$what" = bench ]; then
    (cd /tmp && timeout 240 $py "$repo/benchmarks/cuda_bench.py" --out "$OUT") 2>&1 | tee "$OUT/cuda-bench.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
if [ "$what" = alloc ]; then
    (cd /tmp && timeout 240 $py "$repo/benchmarks/alloc_bench.py" --out "$OUT") || rc=1
fi
if [ "$what" = soak ]; then
    (cd /tmp && timeout 300 $py "$repo/benchmarks/soak_pool.py" --out "$OUT") || rc=1
    (cd /tmp && timeout 300 $py "$repo/benchmarks/soak_cuda.py" --out "$OUT") || rc=1
fi
if [ "$what" = workloads ]; then
    if ! $py -c 'import rmm' >/dev/null 2>&1 && compgen -G "$repo/.whl/rmm_cu13-*.whl" >/dev/null; then
        rmm_wheels
    fi
    (cd /tmp && $py -c 'import rmm; print("rmm", rmm.__version__)' 2>&1 | tail -1) | tee -a "$OUT/cuda-gpu-env.log"
    quick=()
    [ "${WORKLOADS_QUICK:-0}" = 1 ] && quick=(--quick)
    # Each script starts no process that would end past its budget (250 s, 100 s) and kills
    # one past its child timeout (60 s, 45 s): the timeouts here are only a backstop.
    (cd /tmp && timeout 330 $py "$repo/benchmarks/torch_workloads.py" --out "$OUT" "${quick[@]}") 2>&1 |
        tee "$OUT/torch-workloads-stdout.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    (cd /tmp && timeout 160 $py "$repo/benchmarks/cupy_workloads.py" --out "$OUT" "${quick[@]}") 2>&1 |
        tee "$OUT/cupy-workloads-stdout.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
if [ "$what" = gpu2 ]; then
    nvidia-smi topo -m >"$OUT/gpu2-topology.txt" 2>&1
    (cd /tmp && timeout 300 $py -m pytest "$repo/backends/cuda/tests/test_cuda_gpu2.py" \
        "$repo/backends/cuda/tests/test_cuda_peer.py" -v -rA -p no:cacheprovider --timeout=150 \
        --junitxml="$OUT/cuda-gpu2-tests.xml" "$@") 2>&1 | tee "$OUT/cuda-gpu2-tests.log"
    rc=${PIPESTATUS[0]}
    # aml-core is installed above: the forward runs install only their backend (pure Python).
    $py -m pip install -q --no-deps --no-build-isolation "$repo/backends/hip" "$repo/backends/ze" 2>&1 | tail -2
    # aml-hip on the CUDA-forwarding double: the gpu2 module and the peer tests.
    (cd "$repo" && OUT="$OUT/hip-forward" PYTHON=$py AML_HIP_SKIP_INSTALL=1 timeout 300 \
        bash backends/hip/tests/run_forward.sh -k "gpu2 or peer") || rc=1
    # aml-ze's second-device IPC test (its forward run also times aml-ze's allocations).
    (cd "$repo" && OUT="$OUT/ze-forward" PYTHON=$py AML_ZE_SKIP_INSTALL=1 timeout 300 \
        bash backends/ze/tests/run_forward.sh -m gpu2) || rc=1
    smoke=()
    [ "${GPU2_SMOKE:-0}" = 1 ] && smoke=(--smoke-one-gpu)
    (cd /tmp && timeout 300 $py "$repo/benchmarks/gpu2_bench.py" --out "$OUT" "${smoke[@]}") 2>&1 |
        tee "$OUT/gpu2-bench.log"
    bench=${PIPESTATUS[0]}
    two_gpu_status gpu2_bench "$OUT/gpu2-bench.log" "$bench"
fi
if [ "$what" = nccl ]; then
    nvidia-smi topo -m >"$OUT/gpu2-topology.txt" 2>&1
    extra=()
    [ "${NCCL_QUICK:-0}" = 1 ] && extra+=(--quick)
    [ -n "${NCCL_PHASES:-}" ] && extra+=(--phases "$NCCL_PHASES")
    [ -n "${NCCL_DDP_ROUNDS:-}" ] && extra+=(--ddp-rounds "$NCCL_DDP_ROUNDS")
    (cd /tmp && timeout "${NCCL_TIMEOUT:-490}" $py "$repo/benchmarks/nccl_bench.py" --out "$OUT" --phase-timeout 40 "${extra[@]}") 2>&1 |
        tee "$OUT/nccl-bench.log"
    bench=${PIPESTATUS[0]}
    two_gpu_status nccl_bench "$OUT/nccl-bench.log" "$bench"
fi
if [ "$what" = ucx ]; then
    if ! (cd /tmp && $py -c 'import ucxx' >/dev/null 2>&1); then
        [ -f "$repo/.whl/ucx-site.tgz" ] || { echo "ucx: no ucxx here and no .whl/ucx-site.tgz" | tee "$OUT/ucx-tests.log"; exit 1; }
        rmm_wheels # ucxx's libraries load RMM's
        tar xzf "$repo/.whl/ucx-site.tgz" -C /tmp/site
    fi
    export UCX_WARN_UNUSED_ENV_VARS=n
    (cd /tmp && $py -c 'import ucxx; print("ucxx", ucxx.__version__)' 2>&1 | tail -1) | tee -a "$OUT/cuda-gpu-env.log"
    (cd /tmp && timeout 300 $py -m pytest "$repo/tests/ucx" -v -rA -p no:cacheprovider --timeout=150 \
        --junitxml="$OUT/ucx-tests.xml" "$@") 2>&1 | tee "$OUT/ucx-tests.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    (cd /tmp && timeout 240 $py "$repo/benchmarks/ucx_bench.py" --out "$OUT/ucx-host" --rounds "${UCX_ROUNDS:-11}") 2>&1 |
        tee "$OUT/ucx-host.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    (cd /tmp && timeout 240 $py "$repo/benchmarks/ucx_bench.py" --device --proto-info --rounds "${UCX_ROUNDS:-11}" \
        --out "$OUT/ucx-device") 2>&1 |
        tee "$OUT/ucx-device.log"
    bench=${PIPESTATUS[0]}
    two_gpu_status "ucx_bench --device" "$OUT/ucx-device.log" "$bench"
fi
if [ "$what" = mpi ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    (cd /tmp && timeout 240 $py -m pytest "$repo/tests/mpi" -v -rA -p no:cacheprovider --timeout=150 \
        --junitxml="$OUT/mpi-tests.xml" "$@") 2>&1 | tee "$OUT/mpi-tests.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    (cd /tmp && timeout 200 $py "$repo/benchmarks/mpi_bench.py" --out "$OUT/mpi" --rounds "${MPI_ROUNDS:-11}") 2>&1 | tee "$OUT/mpi-bench.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
exit "$rc"
