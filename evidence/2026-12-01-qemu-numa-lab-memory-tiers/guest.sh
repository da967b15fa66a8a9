set -x
uname -r
for n in /sys/devices/system/node/node*; do echo "== $n"; cat $n/cpulist $n/distance; grep MemTotal $n/meminfo; ls $n | grep access; for c in $n/access*; do ls $c/initiators; for f in read_bandwidth write_bandwidth read_latency write_latency; do echo "$c $f $(cat $c/initiators/$f 2>/dev/null)"; done; done; done
cat /sys/devices/system/node/has_cpu
ls /sys/devices/virtual/memory_tiering/ /sys/devices/virtual/memory_tiering/memory_tier*
cat /sys/devices/virtual/memory_tiering/memory_tier*/nodelist
python -m aml_core info
python -m aml_core info --json > evidence/2026-12-01-qemu-numa-lab-memory-tiers/aml-info.json
python -m pytest -p no:cacheprovider tests/numa/test_tiers.py tests/numa/test_lab_machine.py -v -s --junitxml=evidence/2026-12-01-qemu-numa-lab-memory-tiers/junit.xml
