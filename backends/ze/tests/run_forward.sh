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
# $OUT (default evidence/<date>-<machine>-ze-forward/): environment.txt, install.txt, build_ext.txt, build.txt,
# aml-info.json (these five by ../../forward-prelude.sh), pytest.log, junit.xml, bench.txt.
# The exit status is pytest's (2: setup failed).
set -uo pipefail

export AML_ZE_CACHE="${AML_ZE_CACHE:-$(mktemp -d)/aml-ze}"
BACKEND=ze
BUILD_REPORT='print("double without zeMemPutIpcHandle:", build.build_double("forward", put=False))
print("mode:", ctl.mode)'
# environment, install, in-place build, the forward doubles (DOUBLE), aml-info.json
# shellcheck source=../../forward-prelude.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../forward-prelude.sh"

"$PYTHON" -m pytest backends/ze/tests -p no:cacheprovider -v -rA \
    --junitxml="$OUT/junit.xml" "$@" 2>&1 | tee "$OUT/pytest.log"
status=${PIPESTATUS[0]}
echo "pytest exit status: $status" | tee -a "$OUT/pytest.log"

# Allocation cost through aml-ze vs the same ctypes calls, on the forwarded GPU.
AML_ZE_LIBRARY="$DOUBLE" "$PYTHON" benchmarks/ze_bench.py --batch 20 --reps 7 --machine "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1) (forward double)" \
    >"$OUT/bench.txt" 2>&1 || echo "the benchmark failed: see $OUT/bench.txt" >&2
exit "$status"
