#!/usr/bin/env bash
# A PostgreSQL primary with a standby, on this machine, to see what a
# failover does to airlock (docs/operations.md, "PostgreSQL failover").
# Two new clusters in DIR on their own ports; the server on 5432 is never
# touched.
#
#   scripts/pg-failover.sh up DIR     make, start and connect both; print the DSN
#   scripts/pg-failover.sh dsn DIR    print the multi-host DSN airlock is given
#   scripts/pg-failover.sh lag DIR    freeze the standby's WAL receiver: it
#                                     receives nothing more (a slow link)
#   scripts/pg-failover.sh fail DIR   crash the primary (immediate stop: no
#                                     shutdown checkpoint, as a killed server),
#                                     then promote the standby (a frozen
#                                     receiver is killed first: what it had
#                                     not written is lost, as in a crash)
#   scripts/pg-failover.sh down DIR   stop both and remove DIR
#
# Environment: PRIMARY_PORT (55432), STANDBY_PORT (55433), PGBIN (the newest
# /usr/lib/postgresql/*/bin), REPLICATION: "sync" (default: the primary's
# commits wait for the standby, synchronous_commit = on with
# synchronous_standby_names) or "async" (the standby may lag: shows what
# asynchronous replication costs). fsync is off in both clusters: the crash here is of
# the server's processes, not of the machine, so the operating system keeps
# every write either way, and the run is faster.
# PostgreSQL refuses to run as root: as root the servers run as the user
# postgres, which then owns DIR.
set -euo pipefail

cmd=${1:-}
P1=${PRIMARY_PORT:-55432}
P2=${STANDBY_PORT:-55433}
REPLICATION=${REPLICATION:-sync}
if [ -z "${PGBIN:-}" ]; then
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
fi

die() { echo "pg-failover: $*" >&2; exit 1; }
usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
need_bin() {
  [ -x "$PGBIN/pg_ctl" ] && [ -x "$PGBIN/pg_basebackup" ] ||
    die "no PostgreSQL server programs (pg_ctl, pg_basebackup) in '$PGBIN'; install Debian's postgresql package or set PGBIN"
}
dsn() {
  echo "postgres://postgres@127.0.0.1:$P1,127.0.0.1:$P2/airlock?sslmode=disable&target_session_attrs=read-write&connect_timeout=2"
}
psql_at() { "$PGBIN/psql" -X -q -h 127.0.0.1 -p "$1" -U postgres -d "${3:-postgres}" -Atc "$2"; }

up() {
  local dir=$1
  need_bin
  [ "$REPLICATION" = sync ] || [ "$REPLICATION" = async ] || die "REPLICATION is '$REPLICATION'; want sync or async"
  [ ! -e "$dir/primary" ] || die "$dir/primary exists; run down first"
  mkdir -p "$dir"
  [ "$(id -u)" != 0 ] || chown postgres: "$dir"
  as_pg "$PGBIN/initdb" -U postgres --auth=trust -D "$dir/primary" >/dev/null
  as_pg tee -a "$dir/primary/postgresql.conf" >/dev/null <<EOF
listen_addresses = '127.0.0.1'
port = $P1
unix_socket_directories = '$dir'
max_connections = 200
shared_buffers = 32MB
wal_level = replica
max_wal_senders = 4
fsync = off
synchronous_commit = on
EOF
  as_pg "$PGBIN/pg_ctl" -D "$dir/primary" -l "$dir/primary.log" -w -t 60 start >/dev/null
  psql_at "$P1" "CREATE DATABASE airlock"
  as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$P1" -U postgres -D "$dir/standby" -R -c fast
  # The standby's own settings win over the copied postgresql.conf. It names
  # itself to the primary; promoted, it waits for no standby of its own
  # (there is none: a two-node setup runs unprotected until one is added).
  as_pg tee -a "$dir/standby/postgresql.auto.conf" >/dev/null <<EOF
port = $P2
primary_conninfo = 'host=127.0.0.1 port=$P1 user=postgres application_name=standby'
synchronous_standby_names = ''
EOF
  as_pg "$PGBIN/pg_ctl" -D "$dir/standby" -l "$dir/standby.log" -w -t 60 start >/dev/null
  # Only now that the standby exists do the primary's commits wait for it
  # (set earlier, CREATE DATABASE above would wait for ever).
  local want=async state=""
  if [ "$REPLICATION" = sync ]; then
    want=sync
    psql_at "$P1" "ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 (standby)'" >/dev/null
    psql_at "$P1" "SELECT pg_reload_conf()" >/dev/null
  fi
  for _ in $(seq 300); do
    state=$(psql_at "$P1" "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'" || true)
    [ "$state" = "$want" ] && break
    sleep 0.1
  done
  [ "$state" = "$want" ] || die "the standby did not connect as $want (state '$state'); see $dir/standby.log"
  dsn
}

lag() {
  local dir=$1 pid
  need_bin
  pid=$(psql_at "$P2" "SELECT pid FROM pg_stat_wal_receiver")
  [ -n "$pid" ] || die "the standby has no WAL receiver"
  kill -STOP "$pid"
  echo "$pid" >"$dir/walreceiver.frozen"
}

fail() {
  local dir=$1
  need_bin
  as_pg "$PGBIN/pg_ctl" -D "$dir/primary" -m immediate -w stop >/dev/null
  if [ -f "$dir/walreceiver.frozen" ]; then
    # What the frozen receiver had not written (and what waits in its
    # socket) is lost; the standby restarts its recovery from its own WAL.
    kill -KILL "$(cat "$dir/walreceiver.frozen")" 2>/dev/null || true
    rm -f "$dir/walreceiver.frozen"
    for _ in $(seq 300); do
      "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$P2" && break
      sleep 0.1
    done
  fi
  as_pg "$PGBIN/pg_ctl" -D "$dir/standby" -w -t 60 promote >/dev/null
  for _ in $(seq 300); do
    [ "$(psql_at "$P2" "SELECT pg_is_in_recovery()" || true)" = f ] && return 0
    sleep 0.1
  done
  die "the standby did not leave recovery; see $dir/standby.log"
}

down() {
  local dir=$1
  for node in primary standby; do
    if [ -f "$dir/$node/postmaster.pid" ]; then
      as_pg "$PGBIN/pg_ctl" -D "$dir/$node" -m immediate -w stop >/dev/null 2>&1 || true
    fi
  done
  rm -rf "$dir"
}

case "$cmd" in
up | dsn | lag | fail | down)
  [ $# -eq 2 ] || die "$cmd needs DIR (see scripts/pg-failover.sh help)"
  "$cmd" "$2"
  ;;
help | -h | --help) usage ;;
*) usage >&2; exit 2 ;;
esac
