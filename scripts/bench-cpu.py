#!/usr/bin/env python3
"""New calls on PostgreSQL, airlock against the baseline, with the CPU each call costs.

On a small machine the database and airlock share the CPU, so calls/s alone is
noisy; this script also reports, per call, the CPU time of the bench process
(client) and of the whole machine (total; server = total - client, which is
PostgreSQL plus whatever else runs). Each run gets a fresh database.

Usage: scripts/bench-cpu.py AIRLOCK_BINARY ROUNDS [postgres-base-url]
  e.g. go build -o /tmp/airlock ./cmd/airlock && scripts/bench-cpu.py /tmp/airlock 5
Env: CALLS (default 20000).
"""
import json
import os
import resource
import subprocess
import sys

binary, rounds = sys.argv[1], int(sys.argv[2])
base = sys.argv[3] if len(sys.argv) > 3 else "postgres://postgres@127.0.0.1:5432/test"
db = "airlock_bench_cpu"
url = base.rsplit("/", 1)[0] + "/" + db + "?sslmode=disable"
calls = int(os.environ.get("CALLS", "20000"))


def psql(*sql):
    for s in sql:
        subprocess.run(["psql", "-q", base, "-c", s], check=True, stderr=subprocess.DEVNULL)


def busy():
    v = list(map(int, open("/proc/stat").readline().split()[1:]))
    return sum(v) - v[3] - v[4]  # all but idle and iowait


for _ in range(rounds):
    for impl in ("airlock", "baseline"):
        psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)", f"CREATE DATABASE {db}")
        subprocess.run([binary, "migrate", "--db", url], capture_output=True, check=True)
        b0, r0 = busy(), resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([binary, "bench", "--db", url, "--mode", "new", "--calls", str(calls),
                              "--concurrency", "16", "--impl", impl], capture_output=True, text=True).stdout
        b1, r1 = busy(), resource.getrusage(resource.RUSAGE_CHILDREN)
        d = json.loads(out)
        client = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / calls * 1e6
        total = (b1 - b0) / os.sysconf("SC_CLK_TCK") / calls * 1e6
        print(f"{impl:9} {d['calls_per_s']:7.0f} calls/s  p50 {d['p50_us']} us  "
              f"cpu/call: client {client:.0f} us, total {total:.0f} us, server {total - client:.0f} us", flush=True)
psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
