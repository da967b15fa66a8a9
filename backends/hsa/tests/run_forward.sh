#!/usr/bin/env bash
# Run aml-hsa on a real NVIDIA GPU: the HSA driver double is built in forward mode (every
# hsa_amd_vmem_* memory operation forwarded to the CUDA driver's virtual memory calls:
# cuMemAddressReserve, cuMemCreate with POSIX-fd handles, cuMemMap, cuMemSetAccess,
# cuMemExportToShareableHandle, cuMemImportFromShareableHandle...) and `aml info --json`
# with it is recorded (aml-info.json; ../../forward-prelude.sh does both), then
#   1. the whole vmem sequence, step by step, with a dma-buf fd exported, sent over a Unix
#      socket and imported twice in a second process (sequence.log);
#   2. benchmarks/hsa_bench.py when cuda-bindings is importable (hsa_bench.json/.md,
#      bench.txt; AML_HSA_BENCH_ARGS=--quick for fewer repetitions);
#   3. the aml-hsa test suite with AML_HSA_TEST_DOUBLE=forward (pytest.log, junit.xml);
#      tests that need host memory behind the double (page protections, IPC) skip.
#
# For a machine with gcc, CUDA in /usr/local/cuda (or CUDA_HOME), Python 3 with pytest, an
# NVIDIA driver and no network. From the repository root:
#
#     OUT=/some/dir bash backends/hsa/tests/run_forward.sh [extra pytest arguments]
#
# It installs the checkout (pip --no-deps --no-build-isolation . ./backends/hsa; set
# AML_HSA_SKIP_INSTALL=1 if that is done already). Everything goes to $OUT (default
# evidence/<date>-<machine>-hsa-forward/): environment.txt, install.txt, build_ext.txt,
# build.txt, sequence.log, aml-info.json, pytest.log, junit.xml, hsa_bench.json,
# hsa_bench.md, bench.txt.
# The exit status is 2 when a build step fails, else the first failure of the sequence and
# pytest (the benchmark's failure is logged, not fatal).
set -uo pipefail

BACKEND=hsa
BUILD_REPORT='print("mode:", ctl.mode, "interface:", ctl.interface)'
# environment, install, in-place build, the forward double (DOUBLE), aml-info.json
# shellcheck source=../../forward-prelude.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../forward-prelude.sh"
export AML_HSA_LIBRARY="$DOUBLE"

PYTHONPATH="$ROOT/backends/hsa/tests${PYTHONPATH:+:$PYTHONPATH}" \
    timeout 120 "$PYTHON" backends/hsa/tests/hsa_sequence.py >"$OUT/sequence.log" 2>&1
seq_status=$?
cat "$OUT/sequence.log"
echo "sequence exit status: $seq_status" | tee -a "$OUT/sequence.log"

# The benchmark before the suite, so that a hanging test cannot cost it; the time limits
# (120 + 120 + 330 s) keep the whole run under the device machine's 10 minutes per command.
if "$PYTHON" -c "import cuda.bindings.driver" 2>/dev/null; then
    # shellcheck disable=SC2086
    timeout 120 "$PYTHON" benchmarks/hsa_bench.py --out "$OUT" ${AML_HSA_BENCH_ARGS:-} >"$OUT/bench.txt" 2>&1 ||
        echo "benchmark failed: see $OUT/bench.txt" | tee -a "$OUT/bench.txt"
else
    echo "cuda-bindings is not importable: benchmark skipped" | tee "$OUT/bench.txt"
fi

timeout 330 "$PYTHON" -m pytest backends/hsa/tests -p no:cacheprovider -v -rA \
    --junitxml="$OUT/junit.xml" "$@" 2>&1 | tee "$OUT/pytest.log"
status=${PIPESTATUS[0]}
echo "pytest exit status: $status" | tee -a "$OUT/pytest.log"

if [ $seq_status -ne 0 ]; then
    exit "$seq_status"
fi
exit "$status"
