#!/usr/bin/env python3
"""Whose code spent a CPU profile's time: airlock's own, the MCP SDK's, the
database driver's, net/http's, encoding/json's, the benchmark's, or the Go
runtime's (garbage collection and scheduling nobody's frame is on).

Each sample goes to the first frame from the leaf up that belongs to one of
those owners, so runtime work a function causes directly (allocation, map
access) counts as that function's owner's, and time a package spends inside
another's (the SDK calling encoding/json) as the innermost one's.

Usage: go tool pprof -traces BINARY PROFILE > traces.txt
       scripts/cpu-owners.py traces.txt [--top N]
  --top N also lists the N functions of airlock's own code whose samples
  make its share (the frame each sample is counted at).
  e.g. airlock bench --through mcp --cpuprofile mcp.prof … (the profile of the
       named path's runs only, its rounds merged), then the two commands above.
"""
import re
import sys

OWNERS = [
    ("github.com/airlockhq/airlock/internal/bench", "the benchmark (its client side and upstream)"),
    ("github.com/airlockhq/airlock", "airlock"),
    ("github.com/modelcontextprotocol/go-sdk", "the MCP SDK"),
    ("modernc.org/", "the database driver"),
    ("github.com/jackc/", "the database driver"),
    ("database/sql", "the database driver"),
    ("net/http", "net/http"),
    ("net.", "net/http"),
    ("encoding/json", "encoding/json"),
    ("github.com/segmentio/", "encoding/json"),
]
UNOWNED = "the Go runtime (GC, scheduler)"


def owner(frames):
    return owning(frames)[0]


def owning(frames):
    """The owner of a sample, and the frame it is counted at."""
    for fn in frames:
        for prefix, name in OWNERS:
            if fn.startswith(prefix):
                return name, fn
    return UNOWNED, ""


def main(path, top=0):
    total, by, own = 0.0, {}, {}
    frames, value = [], 0.0

    def flush():
        nonlocal total
        if frames and value:
            o, fn = owning(frames)
            by[o] = by.get(o, 0.0) + value
            total += value
            if o == "airlock":
                own[fn] = own.get(fn, 0.0) + value

    for line in open(path):
        if line.startswith("-----------"):
            flush()
            frames, value = [], 0.0
            continue
        m = re.match(r"\s+([\d.]+)(ms|s)\s+(\S+)", line)
        if m:
            value = float(m.group(1)) * (1 if m.group(2) == "ms" else 1000)
            frames = [m.group(3)]
            continue
        m = re.match(r"\s+(\S+)", line)
        if m and value:
            frames.append(m.group(1))
    flush()
    print("| owner | CPU | share |\n|---|---|---|")
    for name, v in sorted(by.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {v:,.0f} ms | {100 * v / total:.1f} % |")
    if top:
        print("\n| airlock's function | CPU | share |\n|---|---|---|")
        for fn, v in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
            print(f"| {fn} | {v:,.0f} ms | {100 * v / total:.2f} % |")


if __name__ == "__main__":
    args = sys.argv[1:]
    n = 0
    if "--top" in args:
        i = args.index("--top")
        n = int(args[i + 1])
        del args[i:i + 2]
    main(args[0], n)
