t() { s=$(cut -d' ' -f1 /proc/uptime); "$@" >/dev/null 2>&1; rc=$?; e=$(cut -d' ' -f1 /proc/uptime); echo "probe: $* rc=$rc $(awk "BEGIN{print $e-$s}") s"; }
set3() { echo "probe: == $1"; t python -c pass; t python -c "import pytest"; t python -c "import numpy"; t python -c "import aml_core"; }
echo "probe: uptime at start $(cut -d' ' -f1 /proc/uptime)"
set3 baseline
python -X importtime -c "import aml_core" 2>&1 | sort -t'|' -k2 -n | tail -6 | sed 's/^/probe: /'
PY=$(python -c 'import sys; print(sys.base_prefix)'); VENV=$(python -c 'import sys,os; print(os.path.realpath(sys.prefix))')
echo "probe: base $PY venv $VENV"
mount -t 9p -o ro,trans=virtio,version=9p2000.L,cache=loose,msize=524288 labpy "$PY" && echo "probe: mounted stdlib loose"
set3 stdlib-loose
set3 stdlib-loose-2nd
mount -t 9p -o ro,trans=virtio,version=9p2000.L,cache=loose,msize=524288 labvenv "$VENV" && echo "probe: mounted venv loose"
set3 venv-loose
set3 venv-loose-2nd
mkdir -p /run/labup && mount -t tmpfs none /run/labup && mkdir -p /run/labup/u /run/labup/w /run/lablow
mount -t 9p -o ro,trans=virtio,version=9p2000.L,cache=loose,msize=524288 labrepo /run/lablow && mount -t overlay -o lowerdir=/run/lablow,upperdir=/run/labup/u,workdir=/run/labup/w overlay /work/labtime && echo "probe: mounted repo overlay loose"
cd /work/labtime
set3 repo-loose
set3 repo-loose-2nd
t python -m pytest -p no:cacheprovider --collect-only -q tests/numa
t python -m pytest -p no:cacheprovider --collect-only -q tests/numa
