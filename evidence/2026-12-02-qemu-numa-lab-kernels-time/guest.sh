# the lab pass of lab2's item 2/3 measurement, plus the flake probe on 6.12 and the move bench in tiered
if [ "$AML_NUMA_LAB" = two-node ]; then python scratch/flake_probe.py 0; fi
python -m pytest -p no:cacheprovider tests/numa --durations=12
rc=$?
if [ "$AML_NUMA_LAB" = tiered ]; then
  for nb in 1 0; do
    echo $nb > /proc/sys/kernel/numa_balancing
    python benchmarks/numa_bench.py --skip mmap copy --move-reps 10 --out scratch/tiered-move-nb$nb.json > /dev/null && echo "bench nb=$nb: $(python -c "import json;m=json.load(open('scratch/tiered-move-nb$nb.json'))['move'];print({k:v for k,v in m.items() if not isinstance(v,(list,dict))})")"
  done
  echo 1 > /proc/sys/kernel/numa_balancing
fi
exit $rc
