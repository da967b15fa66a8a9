python benchmarks/ucx_hosts_bench.py --rounds 7 --count 50 --out "$1/bench"
python -m pytest -p no:cacheprovider tests/hosts -v -rA
