"""A real `airlock serve` for the tests: built from this repository (or
AIRLOCK_BIN), on embedded SQLite in a temporary directory, on a free port."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
AGENT_TOKEN = "py-agent-secret"
APPROVER_TOKEN = "py-approver-secret"

MANIFEST = os.path.join(ROOT, "clients", "testdata", "airlock.yaml")


def _binary(workdir: str) -> str:
    if os.environ.get("AIRLOCK_BIN"):
        return os.environ["AIRLOCK_BIN"]
    out = os.path.join(workdir, "airlock")
    subprocess.run(["go", "build", "-o", out, "./cmd/airlock"], cwd=ROOT, check=True)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, lease: str = "2s"):
        self.dir = tempfile.mkdtemp(prefix="airlock-py-")
        manifest = MANIFEST
        self.url = f"http://127.0.0.1:{_free_port()}"
        env = dict(os.environ, CLIENT_AGENT=AGENT_TOKEN, CLIENT_APPROVER=APPROVER_TOKEN)
        self.log = open(os.path.join(self.dir, "serve.log"), "w")
        self.proc = subprocess.Popen(
            [_binary(self.dir), "serve", "--config", manifest, "--db", "sqlite:" + os.path.join(self.dir, "a.db"),
             "--listen", self.url[len("http://"):], "--lease", lease],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1):
                    return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("airlock serve did not start; see " + self.log.name)
                time.sleep(0.05)

    def api(self, method: str, path: str, token: str, body: "dict | None" = None) -> dict:
        """A request to the HTTP API (approvals, plans), as a person would make it."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
