#!/usr/bin/env bash
# Runs the benchmarks (about 5 minutes on 2 cores) and prints the table; arguments go to
# benchmarks/bench.py, e.g. scripts/benchmark.sh --quick
source "$(dirname "$0")/env.sh"
exec python -m benchmarks.bench "$@"
