t() { s=$(cut -d' ' -f1 /proc/uptime); "$@" >/dev/null 2>&1; rc=$?; e=$(cut -d' ' -f1 /proc/uptime); echo "probe: $* rc=$rc $(awk "BEGIN{print $e-$s}") s"; }
echo "probe: uptime at start $(cut -d' ' -f1 /proc/uptime)"
t python -c pass
t python -c pass
t python -c "import pytest"
t python -c "import numpy"
t python -c "import aml_core"
t python -m pytest -p no:cacheprovider --collect-only -q tests/numa
