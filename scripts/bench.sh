#!/usr/bin/env bash
# Runs the workloads of docs/BENCHMARKS.md and prints one JSON line each.
# Usage: scripts/bench.sh [postgres-url]   (default postgres://postgres@127.0.0.1:5432/test)
set -euo pipefail
cd "$(dirname "$0")/.."
PG_BASE="${1:-postgres://postgres@127.0.0.1:5432/test}"
BIN="$(mktemp -d)/airlock"
go build -o "$BIN" ./cmd/airlock
DIR="$(mktemp -d)"
PGDB="airlock_bench_$$"
psql -q "$PG_BASE" -c "CREATE DATABASE $PGDB"
trap 'psql -q "$PG_BASE" -c "DROP DATABASE IF EXISTS $PGDB WITH (FORCE)" >/dev/null; rm -rf "$DIR"' EXIT
PG="${PG_BASE%/*}/$PGDB?sslmode=disable"

for db in "sqlite:$DIR/bench.db" "$PG"; do
  for i in 1 2 3; do
    "$BIN" bench --db "$db" --mode new --calls 20000 --concurrency 16
    "$BIN" bench --db "$db" --mode new --calls 20000 --concurrency 16 --impl baseline
  done
  "$BIN" bench --db "$db" --mode repeat --calls 200000 --concurrency 16
  "$BIN" bench --db "$db" --mode race --calls 1600 --concurrency 16
  "$BIN" bench --db "$db" --mode race --calls 1600 --concurrency 16 --impl baseline
  "$BIN" bench --db "$db" --mode mixed --calls 20000 --concurrency 16 --dup-rate 0.5
done
"$BIN" bench --db "sqlite:$DIR/gw1.db" --through http --mode new --calls 3000 --concurrency 1
"$BIN" bench --db "sqlite:$DIR/gw2.db" --through mcp --mode new --calls 3000 --concurrency 1
"$BIN" bench --db "sqlite:$DIR/gw3.db" --through http --mode repeat --calls 50000 --concurrency 16
if [ "${BENCH_MILLION:-0}" = 1 ]; then
  "$BIN" bench --db "sqlite:$DIR/m.db" --mode new --calls 1000000 --concurrency 16
  "$BIN" bench --db "$PG" --mode new --calls 1000000 --concurrency 16
fi
