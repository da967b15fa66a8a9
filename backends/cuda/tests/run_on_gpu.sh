#!/usr/bin/env bash
# Install aml-core and aml-cuda, run the CUDA tests (GPU tests included) and the
# benchmark on a GPU machine. Logs and results go to $OUT (default /tmp/aml-cuda-out).
# Usage, from anywhere: bash backends/cuda/tests/run_on_gpu.sh [tests|bench|all|alloc|soak] [pytest args...]
# ("alloc": benchmarks/alloc_bench.py, the pool against CuPy, PyTorch, cuda.core and the raw
# calls; its JSON, markdown and PNGs go to $OUT, its log to stdout only. "soak":
# benchmarks/soak_pool.py, 10**5 pool operations and device memory back to its baseline.)
set -uo pipefail
what=${1:-all}
shift || true
OUT=${OUT:-/tmp/aml-cuda-out}
mkdir -p "$OUT"
repo=$(cd "$(dirname "$0")/../../.." && pwd)
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
    $py -c 'import sys, cuda.bindings, numpy; print(sys.version.split()[0], "cuda-bindings", cuda.bindings.__version__, "numpy", numpy.__version__)'
    $py -c 'import cupy, torch; print("cupy", cupy.__version__, "torch", torch.__version__)'
    $py -m pip install --no-deps --no-build-isolation "$repo" "$repo/backends/cuda" 2>&1 | tail -2
    (cd /tmp && $py -m aml_core info)
} 2>&1 | tee "$OUT/cuda-gpu-env.log"
rc=0
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
fi
exit "$rc"
