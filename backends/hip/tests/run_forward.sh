#!/usr/bin/env bash
# Run the aml-hip test suite on a real NVIDIA GPU: the HIP driver double is built in forward
# mode (every hip* call forwarded to CUDA, as HIP's NVIDIA platform does) and the backend's
# tests run against it with AML_HIP_TEST_DOUBLE=forward.
#
# For a machine with gcc, CUDA in /usr/local/cuda (or CUDA_HOME), Python 3 with pytest, an
# NVIDIA driver and no network. From the repository root:
#
#     OUT=/some/dir bash backends/hip/tests/run_forward.sh [extra pytest arguments]
#
# It installs the checkout (pip --no-deps --no-build-isolation . ./backends/hip; set
# AML_HIP_SKIP_INSTALL=1 if that is done already), builds the forward double, and writes to
# $OUT (default ./forward-out): environment.txt, build.txt, pytest.log, junit.xml,
# aml-info.json. The exit status is pytest's.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/forward-out}"
mkdir -p "$OUT"
PYTHON="${PYTHON:-python3}"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export AML_HIP_TEST_DOUBLE=forward
export PYTHONDONTWRITEBYTECODE=1

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    echo "python: $("$PYTHON" --version 2>&1)"
    echo "gcc: $(gcc --version 2>&1 | head -n1)"
    echo "CUDA_HOME: $CUDA_HOME"
    "$CUDA_HOME/bin/nvcc" --version 2>&1 | tail -n2 || true
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "nvidia-smi: not found"
} >"$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

if [ "${AML_HIP_SKIP_INSTALL:-0}" != "1" ]; then
    "$PYTHON" -m pip install --no-deps --no-build-isolation . ./backends/hip >"$OUT/install.txt" 2>&1 || {
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
"$PYTHON" - >"$OUT/build.txt" 2>&1 <<'EOF'
import importlib.util, sys
spec = importlib.util.spec_from_file_location("hipdouble_build", "backends/hip/tests/native/hip_double.py")
build = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = build
spec.loader.exec_module(build)
print("toolkit:", build.find_cuda())
path = build.build_double("forward")
print("double:", path)
ctl = build.DoubleControl(path)
print("mode:", ctl.mode, "emulated HIP version:", ctl.version)
EOF
status=$?
cat "$OUT/build.txt"
if [ $status -ne 0 ]; then
    echo "building the forward double failed: see $OUT/build.txt" >&2
    exit 2
fi
DOUBLE="$(sed -n 's/^double: //p' "$OUT/build.txt")"

# What the registry and `aml info` say with HIP (forwarded to CUDA) on this machine.
AML_HIP_LIBRARY="$DOUBLE" "$PYTHON" -m aml_core info --json >"$OUT/aml-info.json" 2>&1 || true

"$PYTHON" -m pytest backends/hip/tests -p no:cacheprovider -v -rA \
    --junitxml="$OUT/junit.xml" "$@" 2>&1 | tee "$OUT/pytest.log"
status=${PIPESTATUS[0]}
echo "pytest exit status: $status" | tee -a "$OUT/pytest.log"
exit "$status"
