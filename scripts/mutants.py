#!/usr/bin/env python3
"""A mutation check of airlock's hot path (issue 44 point 4).

Each mutant in scripts/mutants.txt names a file, an exact snippet and its
replacement, and the packages whose tests must kill it. The check makes a
throwaway git worktree of HEAD (never touching the working tree it is run
from), first runs each distinct set of packages unmutated (a baseline that
fails would make its mutants look killed: they are reported not checked), then
applies one mutant at a time, runs

    go test -count=1 -timeout 120s [-run REGEX] PACKAGES

and reports each mutant killed (a test failed), killed by timeout (a test
hung: go test's -timeout, or this script's wall-clock guard, fired; a hang
never blocks the check) or survived, and the score. PostgreSQL tests run
when AIRLOCK_TEST_DATABASE_URL is set (as for go test).

    python3 scripts/mutants.py                 # every mutant
    python3 scripts/mutants.py --only purge    # mutants whose name contains "purge"
    python3 scripts/mutants.py --check         # only check that every snippet applies
    python3 scripts/mutants.py --verbose       # show a survivor's test output tail

Exit status: 0 when every mutant is killed, 1 when some survive, 2 when
the list or the baseline is broken. Standard library only.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GO_TIMEOUT = "120s"
WALL_TIMEOUT = 200  # seconds: the guard against a hang go test's own timeout misses


class Mutant:
    def __init__(self, name):
        self.name = name
        self.file = ""
        self.packages = []
        self.run = ""
        self.nth = 0  # 0: the snippet must occur exactly once
        self.note = ""
        self.old = []
        self.new = []

    @property
    def snippet(self):
        return "\n".join(self.old)

    @property
    def replacement(self):
        return "\n".join(self.new)


def parse(path):
    mutants, cur = [], None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if line.startswith("#") or not line.strip():
                continue
            if line.startswith("[") and line.endswith("]"):
                cur = Mutant(line[1:-1].strip())
                mutants.append(cur)
                continue
            if cur is None:
                raise SystemExit(f"{path}:{n}: a line before the first [mutant]")
            if line.startswith("- "):
                cur.old.append(line[2:])
            elif line.startswith("+ ") or line == "+":
                cur.new.append(line[2:])
            elif ":" in line:
                k, v = (s.strip() for s in line.split(":", 1))
                if k == "file":
                    cur.file = v
                elif k == "packages":
                    cur.packages = v.split()
                elif k == "run":
                    cur.run = v
                elif k == "nth":
                    cur.nth = int(v)
                elif k == "note":
                    cur.note = v
                else:
                    raise SystemExit(f"{path}:{n}: unknown field {k!r}")
            else:
                raise SystemExit(f"{path}:{n}: cannot read {line!r}")
    names = set()
    for m in mutants:
        if not (m.file and m.packages and m.old):
            raise SystemExit(f"{path}: mutant {m.name!r} needs file, packages and a - snippet")
        if m.name in names:
            raise SystemExit(f"{path}: mutant {m.name!r} named twice")
        names.add(m.name)
    return mutants


def mutate(text, m):
    """The text with m applied, or raise ValueError saying why it cannot be."""
    count = text.count(m.snippet)
    if m.nth == 0 and count != 1:
        raise ValueError(f"the snippet occurs {count} times in {m.file} (want once, or give nth)")
    if m.nth > count:
        raise ValueError(f"the snippet occurs {count} times in {m.file}, not {m.nth}")
    at = -1
    for _ in range(max(m.nth, 1)):
        at = text.index(m.snippet, at + 1)
    return text[:at] + m.replacement + text[at + len(m.snippet):]


def go_test(tree, packages, run):
    """Runs go test in tree; returns (verdict, seconds, output) with verdict
    pass, fail, timeout or build."""
    cmd = ["go", "test", "-count=1", "-timeout", GO_TIMEOUT]
    if run:
        cmd += ["-run", run]
    cmd += packages
    start = time.monotonic()
    p = subprocess.Popen(cmd, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=WALL_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the test binaries too
        out, _ = p.communicate()
        return "timeout", time.monotonic() - start, out
    took = time.monotonic() - start
    if p.returncode == 0:
        return "pass", took, out
    if "panic: test timed out" in out:
        return "timeout", took, out
    if "[build failed]" in out or "[setup failed]" in out:
        return "build", took, out
    return "fail", took, out


def failing_tests(out):
    names = [l.strip()[len("--- FAIL: "):].split(" ")[0] for l in out.splitlines() if l.strip().startswith("--- FAIL: ")]
    return ", ".join(dict.fromkeys(names)) or "(no test named)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", default=os.path.join(HERE, "mutants.txt"))
    ap.add_argument("--only", default="", help="run the mutants whose name contains this")
    ap.add_argument("--check", action="store_true", help="only check that every mutant applies")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()

    mutants = [m for m in parse(args.list) if args.only in m.name]
    repo = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=HERE, capture_output=True, text=True, check=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
    tree = tempfile.mkdtemp(prefix="airlock-mutants-")
    os.rmdir(tree)
    subprocess.run(["git", "worktree", "add", "--quiet", "--detach", tree, "HEAD"], cwd=repo, check=True)
    try:
        return check(mutants, tree, head, args)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=repo)
        shutil.rmtree(tree, ignore_errors=True)


def check(mutants, tree, head, args):
    broken = []
    for m in mutants:
        try:
            with open(os.path.join(tree, m.file), encoding="utf-8") as f:
                mutate(f.read(), m)
        except (OSError, ValueError) as e:
            broken.append(f"{m.name}: {e}")
    if broken:
        print("mutants that do not apply to HEAD " + head + ":\n  " + "\n  ".join(broken))
        return 2
    if args.check:
        print(f"{len(mutants)} mutants apply to HEAD {head}")
        return 0
    pg = "with PostgreSQL" if os.environ.get("AIRLOCK_TEST_DATABASE_URL") else "without PostgreSQL (AIRLOCK_TEST_DATABASE_URL unset)"
    print(f"mutation check of HEAD {head}, {len(mutants)} mutants, {pg}", flush=True)

    unchecked = set()  # (packages, run) whose unmutated tests fail: their mutants would look killed
    for packages, run in dict.fromkeys((tuple(m.packages), m.run) for m in mutants):
        verdict, took, out = go_test(tree, list(packages), run)
        if verdict != "pass":
            unchecked.add((packages, run))
            print(f"baseline {' '.join(packages)} (-run {run or '.'}): {verdict} in {took:.0f}s ({failing_tests(out)}); its mutants are not checked", flush=True)

    results = []
    for i, m in enumerate(mutants, 1):
        if (tuple(m.packages), m.run) in unchecked:
            print(f"[{i}/{len(mutants)}] {'NOT CHECKED':17}        {m.name}  (its baseline fails)", flush=True)
            results.append((m, "unchecked"))
            continue
        path = os.path.join(tree, m.file)
        with open(path, encoding="utf-8") as f:
            original = f.read()
        with open(path, "w", encoding="utf-8") as f:
            f.write(mutate(original, m))
        try:
            verdict, took, out = go_test(tree, m.packages, m.run)
        finally:
            with open(path, "w", encoding="utf-8") as f:
                f.write(original)
        label = {"pass": "SURVIVED", "fail": "killed", "timeout": "killed by timeout", "build": "DID NOT BUILD"}[verdict]
        detail = failing_tests(out) if verdict in ("fail", "timeout") else ""
        print(f"[{i}/{len(mutants)}] {label:17} {took:5.0f}s  {m.name}  {detail}", flush=True)
        if verdict == "pass" and args.verbose:
            print("    " + "\n    ".join(out.strip().splitlines()[-5:]))
        if verdict == "build":
            print("    " + "\n    ".join(out.strip().splitlines()[:8]))
        results.append((m, verdict))

    killed = sum(v in ("fail", "timeout") for _, v in results)
    timeouts = sum(v == "timeout" for _, v in results)
    survivors = [m for m, v in results if v == "pass"]
    unbuilt = [m for m, v in results if v == "build"]
    skipped = [m for m, v in results if v == "unchecked"]
    print(f"\nscore: {killed}/{len(results) - len(skipped)} killed ({timeouts} by timeout), {len(survivors)} survived"
          + (f", {len(unbuilt)} did not build" if unbuilt else "")
          + (f", {len(skipped)} not checked (their baseline fails)" if skipped else ""))
    for m in survivors:
        print(f"  survived: {m.name} ({m.file}){': ' + m.note if m.note else ''}")
    for m in unbuilt:
        print(f"  did not build: {m.name} ({m.file})")
    for m in skipped:
        print(f"  not checked: {m.name} ({m.file})")
    return 2 if unbuilt or skipped else (1 if survivors else 0)


if __name__ == "__main__":
    sys.exit(main())
