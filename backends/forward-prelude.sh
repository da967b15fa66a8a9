# The shared first half of backends/<name>/tests/run_forward.sh (sourced, not run): what
# every forward run does before its backend's own steps.
#
# The script sets, before sourcing:
#   BACKEND       hip, ze, hsa: the backend (./backends/$BACKEND, AML_<NAME>_* variables,
#                 tests/native/${BACKEND}_double.py)
#   BUILD_REPORT  optional: Python lines run after the double is built, with `build` (the
#                 build helper), `path` (the double) and `ctl` (its DoubleControl), whose
#                 output goes to build.txt (e.g. print("mode:", ctl.mode))
#
# It then, from the repository root:
#   1. exports AML_<NAME>_TEST_DOUBLE=forward, CUDA_HOME (default /usr/local/cuda),
#      PYTHONDONTWRITEBYTECODE=1, and sets ROOT, PYTHON and OUT (default: a new run folder,
#      evidence/<date>-<machine>-<backend>-forward/, named by benchmarks/machine_info.py);
#   2. writes $OUT/environment.txt (date, commit, Python, gcc, CUDA, GPU, kernel);
#   3. pip installs the checkout and the backend ($OUT/install.txt; AML_<NAME>_SKIP_INSTALL=1
#      skips it);
#   4. builds aml_core's C extensions in place ($OUT/build_ext.txt): pytest runs from the
#      root, where the source tree shadows the installed aml_core;
#   5. builds the forward double once (the tests reuse the cached file) and records where it
#      is ($OUT/build.txt), setting DOUBLE to its path;
#   6. writes what `aml info --json` says with the double ($OUT/aml-info.json).
# A failed step 3, 4 or 5 exits with status 2.

NAME="$(echo "$BACKEND" | tr '[:lower:]' '[:upper:]')"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
OUT="${OUT:-$("$PYTHON" benchmarks/machine_info.py --evidence-dir "$BACKEND-forward")}"
mkdir -p "$OUT"
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export "AML_${NAME}_TEST_DOUBLE=forward"
export PYTHONDONTWRITEBYTECODE=1

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
    # tracked files changed since that commit: a copied working tree may keep an older
    # clone's git metadata, and then the commit line does not name the code that ran
    echo "tracked files changed since: $(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)"
    echo "python: $("$PYTHON" --version 2>&1)"
    echo "gcc: $(gcc --version 2>&1 | head -n1)"
    echo "CUDA_HOME: $CUDA_HOME"
    "$CUDA_HOME/bin/nvcc" --version 2>&1 | tail -n2 || true
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "nvidia-smi: not found"
    echo "yama ptrace_scope: $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo absent)"
    echo "uname: $(uname -r)"
} >"$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

skip_install="AML_${NAME}_SKIP_INSTALL"
if [ "${!skip_install:-0}" != "1" ]; then
    "$PYTHON" -m pip install --no-deps --no-build-isolation . "./backends/$BACKEND" >"$OUT/install.txt" 2>&1 || {
        echo "pip install failed: see $OUT/install.txt" >&2
        tail -n 20 "$OUT/install.txt" >&2
        exit 2
    }
fi

"$PYTHON" setup.py -q build_ext --inplace >"$OUT/build_ext.txt" 2>&1 || {
    echo "building aml_core's C extensions failed: see $OUT/build_ext.txt" >&2
    exit 2
}

"$PYTHON" - "$BACKEND" "${BUILD_REPORT:-}" >"$OUT/build.txt" 2>&1 <<'PY'
import importlib.util, sys
backend, report = sys.argv[1:3]
helper = f"backends/{backend}/tests/native/{backend}_double.py"
spec = importlib.util.spec_from_file_location(f"{backend}double_build", helper)
build = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = build
spec.loader.exec_module(build)
print("toolkit:", build.find_cuda())
path = build.build_double("forward")
print("double:", path)
ctl = build.DoubleControl(path)
exec(report)
PY
status=$?
cat "$OUT/build.txt"
if [ $status -ne 0 ]; then
    echo "building the forward double failed: see $OUT/build.txt" >&2
    exit 2
fi
DOUBLE="$(sed -n 's/^double: //p' "$OUT/build.txt")"

# What the registry and `aml info` say with the backend (forwarded to CUDA) on this machine.
env "AML_${NAME}_LIBRARY=$DOUBLE" "$PYTHON" -m aml_core info --json >"$OUT/aml-info.json" 2>&1 || true
