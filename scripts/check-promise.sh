#!/usr/bin/env bash
# The history checker's long run (docs/hardening.md, "The history checker"),
# for before a release: ROUNDS seeded runs of CALLS calls over WORKS pieces
# of work on each driver. A failure prints its seed; replay it with
#   go test ./internal/promise -run TestPromiseOnSQLite -promise.seed SEED
# PostgreSQL needs AIRLOCK_TEST_DATABASE_URL (see docs/operations.md).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${ROUNDS:-5}"
CALLS="${CALLS:-3000}"
WORKS="${WORKS:-120}"
export AIRLOCK_TEST_DATABASE_URL="${AIRLOCK_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export AIRLOCK_TEST_REQUIRE_POSTGRES=1
for round in $(seq 1 "$ROUNDS"); do
  echo "round $round of $ROUNDS"
  go test -count=1 -race -timeout 30m -run 'TestPromiseOn' ./internal/promise \
    -promise.calls "$CALLS" -promise.works "$WORKS" -v 2>&1 | grep -E '^(---|ok|FAIL)|seed|operations|broken|^ +\[' || true
  test "${PIPESTATUS[0]}" -eq 0
done
