# numaperf's lab pass, one boot per topology: benchmarks/numa_bench.py with automatic NUMA
# balancing on then off (not in small-node), then the lab's whole suite (tests/numa, as
# tox -e numa runs it). $1: where the benchmark's JSON goes.
out=$1
echo "numaperf: tree $(git rev-parse --short HEAD), $(git status --porcelain --untracked-files=no | wc -l) tracked files changed"
mkdir -p "$out"
if [ "$AML_NUMA_LAB" != small-node ]; then
  for nb in 1 0; do
    echo $nb > /proc/sys/kernel/numa_balancing
    PYTHONPATH=$PWD python benchmarks/numa_bench.py --topology "$AML_NUMA_LAB" --out "$out/$AML_NUMA_LAB-bench-nb$nb.json" > /dev/null
    echo "numaperf: bench nb=$nb exit $?"
  done
  echo 1 > /proc/sys/kernel/numa_balancing
fi
python -m pytest -p no:cacheprovider tests/numa -rA --durations=12
