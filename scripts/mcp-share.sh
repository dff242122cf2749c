#!/usr/bin/env bash
# One profiled run of the MCP path against its peer (every round of the path profiled): airlock's own share of
# the CPU (scripts/cpu-owners.py) and its rate against the peer's.
# Usage: scripts/mcp-share.sh AIRLOCK_BINARY TAG [mcp|mcp-stateless] [CALLS] [pg|sqlite]
# ROUNDS=N (default 1) measures the path and its peer N times, alternated;
# the rate against the peer is then the median of the rounds'.
# PostgreSQL: a fresh database b1 at 127.0.0.1:5432 each run; SQLite: a fresh file.
set -euo pipefail
BIN=$1; TAG=$2; THROUGH=${3:-mcp}; CALLS=${4:-20000}; STORE=${5:-pg}; ROUNDS=${ROUNDS:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${TMPDIR:-/tmp}/mcp-share
mkdir -p "$OUT"
if [ "$STORE" = pg ]; then
  dropdb -h 127.0.0.1 -U postgres --if-exists b1
  createdb -h 127.0.0.1 -U postgres b1
  DB="postgres://postgres@127.0.0.1:5432/b1?sslmode=disable"
else
  rm -f "$OUT/b.db"*
  DB="sqlite:$OUT/b.db"
fi
"$BIN" bench --db "$DB" --through "$THROUGH" --mode new --calls "$CALLS" --concurrency 16 --rounds "$ROUNDS" \
  --cpuprofile "$OUT/$TAG.prof" > "$OUT/$TAG.json"
go tool pprof -traces "$BIN" "$OUT/$TAG.prof" > "$OUT/$TAG.traces" 2>/dev/null
SHARE=$(python3 "$HERE/cpu-owners.py" "$OUT/$TAG.traces" | awk -F'|' '$2 ~ /^ airlock $/ {print $4}')
tail -1 "$OUT/$TAG.json" | python3 -c "
import json, sys
d = json.loads(sys.stdin.read())
print('$TAG $THROUGH $STORE', 'share', '$SHARE'.strip(), 'calls/s', d['calls_per_s'], 'peer', d['peer_mcp_calls_per_s'], 'vs peer', d['vs_peer_mcp'], d.get('vs_peer_mcp_rounds', ''))"
