#!/usr/bin/env bash
# Runs every throughput and latency row of benches/RESULTS.md on tmpfs and on
# the real disk, then prints one summary (benches/summarize.py).
#
#   benches/run_all.sh [LOG_DIR]
#
# Needs the project installed in the active virtualenv with its test extra
# (pip install -e '.[test]'), cargo, and about 6 GB free on each medium
# (10 M-message stores). Media: ROCKETSTORE_BENCH_DIR (default /dev/shm) and
# ROCKETSTORE_DISK_BENCH_DIR (default the temp dir). Each step's output is
# kept in LOG_DIR (default a new directory under the temp dir); the load
# average is printed before every step. About 10 minutes on an idle
# 2-vCPU machine, plus the first build of the benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
LOG=${1:-$(mktemp -d "${TMPDIR:-/tmp}/rocketstore-bench.XXXXXX")}
mkdir -p "$LOG"
TMPFS=${ROCKETSTORE_BENCH_DIR:-/dev/shm}
DISK=${ROCKETSTORE_DISK_BENCH_DIR:-${TMPDIR:-/tmp}}
export ROCKETSTORE_DISK_BENCH_DIR=$DISK

step() {
    local name=$1
    shift
    echo "== $name: $* (load average $(cut -d' ' -f1-3 /proc/loadavg))" | tee "$LOG/$name.log"
    "$@" 2>&1 | tee -a "$LOG/$name.log"
}

# Engine (criterion). append measures both media itself; the others take
# their directory from ROCKETSTORE_BENCH_DIR and run once per medium.
step append cargo bench --bench append
for medium in tmpfs disk; do
    dir=$TMPFS
    [ "$medium" = disk ] && dir=$DISK
    step "dispatch_$medium" env ROCKETSTORE_BENCH_DIR="$dir" cargo bench --bench dispatch
    step "recovery_$medium" env ROCKETSTORE_BENCH_DIR="$dir" cargo bench --bench recovery
done

# Python API (pytest-benchmark; every test runs on both media).
cd "$ROOT/benches/python"
step py_put python -m pytest test_bench_put.py --benchmark-enable -q \
    --benchmark-json="$LOG/py_put.json"
step py_read python -m pytest test_bench_read.py --benchmark-enable -q \
    -k "batch32 or query_message_latency or visibility" --benchmark-json="$LOG/py_read.json"

# Percentile and memory rows (harnesses of their own; both media each).
step put_latency python put_latency.py
step rss python rss.py
step reopen python reopen.py
step abnormal_recovery python abnormal_recovery.py
cd "$ROOT"

echo
python benches/summarize.py "$LOG"
