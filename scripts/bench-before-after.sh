#!/usr/bin/env bash
# A change's paired runs: the same workload through two builds, N pairs, the
# order alternating (the second run of a pair measured ~2 % slower in A/A
# runs), printing both rates, p50s and the ratio after/before per pair, then
# the median ratio. Pairs a minute apart see the same machine.
# PostgreSQL (default): one fresh database per run. SQLite ("sqlite"): a
# fresh file per run.
# Usage: [CALLS=5000] [CONCURRENCY=16] [THROUGH=http|claims|mcp|...] \
#   scripts/bench-before-after.sh BEFORE_BINARY AFTER_BINARY N [postgres-base-url | sqlite]
set -euo pipefail
BEFORE=$1; AFTER=$2; N=$3
BASE=${4:-postgres://postgres@127.0.0.1:5432/test}
DIR=$(mktemp -d)
DB=airlock_bench_before_after
cleanup() {
  rm -rf "$DIR"
  [ "$BASE" = sqlite ] || psql -q "$BASE" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT
db() {
  if [ "$BASE" = sqlite ]; then
    echo "sqlite:$(mktemp -u "$DIR/run-XXXXXX").db"
  else
    psql -q "$BASE" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null 2>&1
    echo "${BASE%/*}/$DB?sslmode=disable"
  fi
}
run() { # BINARY → "rate p50"
  local d; d=$(db)
  local args=(bench --db "$d" --mode new --calls "${CALLS:-5000}" --concurrency "${CONCURRENCY:-16}")
  [ -n "${THROUGH:-}" ] && args+=(--through "$THROUGH")
  "$1" "${args[@]}" 2>/dev/null | python3 -c "import json,sys; j=json.load(sys.stdin); print(j['calls_per_s'], j['p50_us'])"
}
ratios=()
for i in $(seq "$N"); do
  if (( i % 2 )); then b=$(run "$BEFORE"); a=$(run "$AFTER")
  else a=$(run "$AFTER"); b=$(run "$BEFORE"); fi
  r=$(python3 -c "import sys; b,a=sys.argv[1].split(),sys.argv[2].split(); print('%.3f' % (float(a[0])/float(b[0])))" "$b" "$a")
  ratios+=("$r")
  python3 -c "import sys; b,a=sys.argv[1].split(),sys.argv[2].split(); print('before %7.0f/s p50 %5s us   after %7.0f/s p50 %5s us   ratio %s' % (float(b[0]), b[1], float(a[0]), a[1], sys.argv[3]))" "$b" "$a" "$r"
done
python3 -c "import statistics,sys; print('median ratio after/before: %.3f' % statistics.median(map(float, sys.argv[1:])))" "${ratios[@]}"
