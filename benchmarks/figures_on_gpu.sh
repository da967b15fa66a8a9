#!/usr/bin/env bash
# Issue 30's re-runs on one GPU: alloc_bench (every peer through the same call shape, the
# trace and the 16-thread test repeated, paired comparisons), both soaks (baseline before the
# areas exist, two-sided check), and the PyTorch and CuPy workloads (aml's hook against the
# framework's own allocator, 10 paired repeats), with the statistics of paired_stats.py.
# Usage, from the repository root on the GPU machine:
#   FIGURES_COMMIT=<the commit that runs> bash benchmarks/figures_on_gpu.sh [PART ...]
# PART: alloc-soak, workloads, soak-torch or all (issue 30's calls), or issue 31's re-run in
# pieces that fit one call each: alloc3 (alloc_bench whole, then its threads test twice more
# for the pools and CuPy's, --tests threads: three separate runs of the 16-thread test),
# suite (aml-cuda's GPU suite with junit XML, and the framework tests of tests/ that use
# real PyTorch/CuPy where present), pinned (pinned_pool_bench --backend cuda --torch
# --bandwidth), cupy and torch (each workload suite alone, WORKLOAD_REPEATS processes per
# pair, default 10, in WORKLOAD_BUDGET seconds, default 130 and 300).
# Everything is written under $OUT/figures/ and packed into $OUT/figures-<parts>.tgz after
# each step (the device tool brings back 8 files): cuda-gpu-env.log (the machine, the
# versions, the commit and whether the library code differs from it), alloc/, soak/,
# workloads/, each step's log. RMM comes from .whl/ (rmm-cu13, librmm-cu13, rapids-logger)
# when it is there, else its peer is skipped with the reason.
set -uo pipefail
parts=("${@:-all}")
part=$(IFS=-; echo "${parts[*]}") # the packed file's name
has() { local p; for p in "${parts[@]}"; do [ "$p" = "$1" ] && return 0; done; return 1; }
repo=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/figures-out}
res="$OUT/figures"
mkdir -p "$res"
pack() { tar czf "$OUT/figures-$part.tgz" -C "$res" . 2>/dev/null; }
{
    date -u
    echo "commit: ${FIGURES_COMMIT:-$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)}"
    echo "library code (aml_core/, backends/*/aml_*/) as of that commit: $(cd "$repo" && git diff --quiet "${FIGURES_COMMIT:-HEAD}" -- aml_core backends 2>/dev/null && echo same || echo 'not checked (no git metadata of that commit here)')"
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.sm,clocks.mem --format=csv
    nproc
    $py -c 'import sys, cuda.bindings, numpy; print(sys.version.split()[0], "cuda-bindings", cuda.bindings.__version__, "numpy", numpy.__version__)'
    $py -c 'import cupy, torch; print("cupy", cupy.__version__, "torch", torch.__version__)'
    $py -m pip install --no-deps --no-build-isolation "$repo" "$repo/backends/cuda" 2>&1 | tail -2
    if ! $py -c 'import rmm' >/dev/null 2>&1 && compgen -G "$repo/.whl/rmm_cu13-*.whl" >/dev/null; then
        $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
            "$repo"/.whl/rmm_cu13-*.whl "$repo"/.whl/librmm_cu13-*.whl "$repo"/.whl/rapids_logger-*.whl 2>&1 | tail -2
    fi
    (cd /tmp && PYTHONPATH=/tmp/site $py -c 'import rmm; print("rmm", rmm.__version__)' 2>&1 | tail -1)
    (cd /tmp && $py -m aml_core info)
} 2>&1 | tee "$res/cuda-gpu-env.log"
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
pack
rc=0
if has all || has alloc-soak; then
    (cd /tmp && timeout 280 $py "$repo/benchmarks/alloc_bench.py" --out "$res/alloc") 2>&1 | tee "$res/alloc.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    pack
    (cd /tmp && timeout 120 $py "$repo/benchmarks/soak_pool.py" --budget 90 --out "$res/soak") 2>&1 | tail -40 | tee "$res/soak-pool.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    pack
    (cd /tmp && timeout 160 $py "$repo/benchmarks/soak_cuda.py" --budget 130 --out "$res/soak") 2>&1 | tail -40 | tee "$res/soak-cuda.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    pack
fi
if has soak-torch; then # the pool soak with its step-by-step priming, then PyTorch's 10 repeats
    (cd /tmp && timeout 120 $py "$repo/benchmarks/soak_pool.py" --budget 90 --out "$res/soak-pool-primed") 2>&1 |
        tail -3 | tee "$res/soak-pool-primed.log"
    pack
    (cd /tmp && timeout 470 $py "$repo/benchmarks/torch_workloads.py" --allocators torch,aml --repeats 10 \
        --budget 420 --out "$res/torch10") 2>&1 | tee "$res/torch-workloads-stdout.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    pack
fi
if has workloads; then # the pool soak again, short and long: does what it keeps scale with the run?
    for ops in 2000 100000; do
        (cd /tmp && timeout 120 $py "$repo/benchmarks/soak_pool.py" --budget 90 --ops $ops --out "$res/soak-pool-$ops") 2>&1 |
            tail -3 | tee "$res/soak-pool-$ops.log"
    done
    pack
fi
if has all || has workloads; then
    (cd /tmp && timeout 170 $py "$repo/benchmarks/cupy_workloads.py" --allocators cupy,aml --repeats 10 \
        --budget 130 --out "$res/workloads") 2>&1 | tee "$res/cupy-workloads-stdout.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    pack
    (cd /tmp && timeout 360 $py "$repo/benchmarks/torch_workloads.py" --allocators torch,aml --repeats 10 \
        --budget 300 --out "$res/workloads") 2>&1 | tee "$res/torch-workloads-stdout.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    pack
fi
if has alloc3; then # the whole benchmark, then the threads test alone twice: three runs of it
    (cd /tmp && timeout 280 $py "$repo/benchmarks/alloc_bench.py" --out "$res/alloc") 2>&1 | tee "$res/alloc.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    pack
    for run in 2 3; do
        (cd /tmp && timeout 120 $py "$repo/benchmarks/alloc_bench.py" --tests threads \
            --peer "aml pool" --peer "aml pool, on a stream" --peer "CuPy MemoryPool" \
            --peer "CuPy MemoryPool, on a stream" --out "$res/alloc-threads-$run") 2>&1 |
            tee "$res/alloc-threads-$run.log"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    done
    pack
fi
if has suite; then # aml-cuda's GPU suite as run_on_gpu.sh runs it, then tests/' framework tests
    (cd /tmp && timeout 330 $py -m pytest "$repo/backends/cuda/tests" -q -rfEs -p no:cacheprovider \
        --timeout=150 --junitxml="$res/cuda-gpu-tests.xml") 2>&1 | tee "$res/cuda-gpu-tests.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    pack
    (cd "$repo" && timeout 200 $py -m pytest tests/test_torch_mempool.py tests/test_torch_shared_pool.py \
        tests/test_compiled_hooks.py -q -rfEs -p no:cacheprovider \
        --timeout=150 --junitxml="$res/framework-tests.xml") 2>&1 | tee "$res/framework-tests.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    pack
fi
if has pinned; then
    (cd /tmp && timeout 150 $py "$repo/benchmarks/pinned_pool_bench.py" --backend cuda --torch --bandwidth \
        --out "$res/pinned_pool_bench_cuda.json") >"$res/pinned-pool-bench.log" 2>&1
    [ "$?" = 0 ] || rc=1
    tail -30 "$res/pinned-pool-bench.log"
    pack
fi
for suite in cupy torch; do
    has $suite || continue
    budget=${WORKLOAD_BUDGET:-$([ $suite = cupy ] && echo 130 || echo 300)}
    (cd /tmp && timeout $((budget + 60)) $py "$repo/benchmarks/${suite}_workloads.py" --allocators $suite,aml \
        --repeats "${WORKLOAD_REPEATS:-10}" --budget "$budget" --out "$res/workloads") 2>&1 |
        tee "$res/$suite-workloads-stdout.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    pack
done
echo "figures_on_gpu.sh $part: exit $rc" | tee -a "$res/cuda-gpu-env.log"
pack
exit "$rc"
