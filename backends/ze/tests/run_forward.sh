#!/usr/bin/env bash
# Run the aml-ze test suite on a real NVIDIA GPU: the Level Zero driver double is built in
# forward mode (device -> cuMemCreate/cuMemMap, host -> cuMemHostAlloc, shared ->
# cuMemAllocManaged, IPC -> cuMem VMM allocations exported as POSIX fds, virtual memory ->
# cuMemAddressReserve/cuMemCreate/cuMemMap/cuMemSetAccess) and the backend's tests run
# against it with AML_ZE_TEST_DOUBLE=forward, IPC between two processes included.
#
# For a machine with gcc, CUDA in /usr/local/cuda (or CUDA_HOME), Python 3 with pytest and
# numpy, an NVIDIA driver and no network. From the repository root:
#
#     OUT=/some/dir bash backends/ze/tests/run_forward.sh [extra pytest arguments]
#
# It installs the checkout (pip --no-deps --no-build-isolation . ./backends/ze; set
# AML_ZE_SKIP_INSTALL=1 if that is done already), builds the forward double, and writes to
# $OUT (default ./forward-out): environment.txt, install.txt, build.txt, aml-info.json,
# pytest.log, junit.xml, bench.txt. The exit status is pytest's (2: setup failed).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/forward-out}"
mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export AML_ZE_TEST_DOUBLE=forward
export AML_ZE_CACHE="${AML_ZE_CACHE:-$(mktemp -d)/aml-ze}"
export PYTHONDONTWRITEBYTECODE=1

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "python: $("$PYTHON" --version 2>&1)"
    echo "gcc: $(gcc --version 2>&1 | head -n1)"
    echo "CUDA_HOME: $CUDA_HOME"
    "$CUDA_HOME/bin/nvcc" --version 2>&1 | tail -n2 || true
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "nvidia-smi: not found"
    echo "yama ptrace_scope: $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo absent)"
    echo "uname: $(uname -r)"
} >"$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

if [ "${AML_ZE_SKIP_INSTALL:-0}" != "1" ]; then
    "$PYTHON" -m pip install --no-deps --no-build-isolation . ./backends/ze >"$OUT/install.txt" 2>&1 || {
        echo "pip install failed: see $OUT/install.txt" >&2
        tail -n 20 "$OUT/install.txt" >&2
        exit 2
    }
fi

# pytest runs from the root, where the source tree shadows the installed aml_core: build
# its C extensions in place too.
"$PYTHON" setup.py -q build_ext --inplace >"$OUT/build_ext.txt" 2>&1 || {
    echo "building aml_core's C extensions failed: see $OUT/build_ext.txt" >&2
    exit 2
}

# Build the forward double once (the tests reuse the cached file) and record where it is.
"$PYTHON" - >"$OUT/build.txt" 2>&1 <<'PYEOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("zedouble_build", "backends/ze/tests/native/ze_double.py")
build = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = build
spec.loader.exec_module(build)
print("toolkit:", build.find_cuda())
path = build.build_double("forward")
print("double:", path)
print("double without zeMemPutIpcHandle:", build.build_double("forward", put=False))
ctl = build.DoubleControl(path)
print("mode:", ctl.mode)
PYEOF
status=$?
cat "$OUT/build.txt"
if [ $status -ne 0 ]; then
    echo "building the forward double failed: see $OUT/build.txt" >&2
    exit 2
fi
DOUBLE="$(sed -n 's/^double: //p' "$OUT/build.txt")"

# What the registry and `aml info` say with Level Zero (forwarded to CUDA) on this machine.
AML_ZE_LIBRARY="$DOUBLE" "$PYTHON" -m aml_core info --json >"$OUT/aml-info.json" 2>&1 || true

"$PYTHON" -m pytest backends/ze/tests -p no:cacheprovider -v -rA \
    --junitxml="$OUT/junit.xml" "$@" 2>&1 | tee "$OUT/pytest.log"
status=${PIPESTATUS[0]}
echo "pytest exit status: $status" | tee -a "$OUT/pytest.log"

# Allocation cost through aml-ze vs the same ctypes calls, on the forwarded GPU.
AML_ZE_LIBRARY="$DOUBLE" "$PYTHON" benchmarks/ze_bench.py --batch 20 --reps 7 --machine "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1) (forward double)" \
    >"$OUT/bench.txt" 2>&1 || echo "the benchmark failed: see $OUT/bench.txt" >&2
exit "$status"
