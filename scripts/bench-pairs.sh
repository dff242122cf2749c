#!/usr/bin/env bash
# New calls at concurrency 16: N pairs of runs, airlock and the baseline,
# printing both rates and their ratio per pair. Pairs a minute apart see the
# same machine, which matters on a noisy one. The order alternates (airlock
# first in odd pairs, the baseline in even ones): the second run of a pair
# measured ~2 % slower in A/A runs.
# PostgreSQL (default): one fresh database for all pairs. SQLite (third
# argument "sqlite"): a fresh file for every run.
# Usage: [CALLS=10000] scripts/bench-pairs.sh AIRLOCK_BINARY N [postgres-base-url | sqlite]
set -euo pipefail
BIN=$1; N=$2
BASE=${3:-postgres://postgres@127.0.0.1:5432/test}
if [ "$BASE" = sqlite ]; then
  DIR=$(mktemp -d)
  trap 'rm -rf "$DIR"' EXIT
  db() { echo "sqlite:$(mktemp -u "$DIR/run-XXXXXX").db"; }
else
  DB=airlock_bench_pairs
  psql -q "$BASE" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" 2>/dev/null
  trap 'psql -q "$BASE" -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1' EXIT
  PG="${BASE%/*}/$DB?sslmode=disable"
  "$BIN" migrate --db "$PG" >/dev/null
  db() { echo "$PG"; }
fi
rate() {
  local d; d=$(db)
  "$BIN" bench --db "$d" --mode new --calls "${CALLS:-10000}" --concurrency 16 "$@" |
    python3 -c "import json,sys; print(json.load(sys.stdin)['calls_per_s'])"
}
for i in $(seq "$N"); do
  if (( i % 2 )); then a=$(rate); b=$(rate --impl baseline)
  else b=$(rate --impl baseline); a=$(rate); fi
  python3 -c "print('airlock %6.0f  baseline %6.0f  ratio %.2f' % ($a, $b, $a/$b))"
done
