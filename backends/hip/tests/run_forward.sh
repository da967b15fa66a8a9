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
# $OUT (default evidence/<date>-<machine>-hip-forward/): environment.txt, install.txt, build_ext.txt, build.txt,
# aml-info.json (these five by ../../forward-prelude.sh), pytest.log, junit.xml. The exit
# status is pytest's (2: setup failed).
set -uo pipefail

BACKEND=hip
BUILD_REPORT='print("mode:", ctl.mode, "emulated HIP version:", ctl.version)'
# environment, install, in-place build, the forward double (DOUBLE), aml-info.json
# shellcheck source=../../forward-prelude.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../forward-prelude.sh"

"$PYTHON" -m pytest backends/hip/tests -p no:cacheprovider -v -rA \
    --junitxml="$OUT/junit.xml" "$@" 2>&1 | tee "$OUT/pytest.log"
status=${PIPESTATUS[0]}
echo "pytest exit status: $status" | tee -a "$OUT/pytest.log"
exit "$status"
