"""Irreversible tools run by their caller: plan → approve → a Worker commits once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import airlock  # noqa: E402

from .server import AGENT_TOKEN, APPROVER_TOKEN, Server  # noqa: E402

server: Server


def setUpModule() -> None:
    global server
    server = Server(lease="1s")


def tearDownModule() -> None:
    server.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


# A worker process whose handler tells its service (a ledger file) the
# work's key, then takes a minute: it is killed in the middle.
CHILD = """
import sys, time
sys.path.insert(0, {src!r})
import airlock
client = airlock.Client({url!r}, {token!r})
def handler(record_id, amount):
    with open({ledger!r}, "a") as f:
        f.write(str(airlock.idempotency_key()) + "\\n")
    time.sleep(60)
airlock.Worker({{{tool!r}: handler}}, client=client).run_once(wait_seconds=20)
"""


class PlanTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = airlock.Client(server.url, AGENT_TOKEN)

    def plan_status(self, plan_id: str) -> str:
        return server.api("GET", f"/v1/plans/{plan_id}", APPROVER_TOKEN)["status"]

    def approve(self, plan_id: str) -> None:
        full = server.api("GET", f"/v1/plans/{plan_id}", APPROVER_TOKEN)
        server.api("POST", f"/v1/plans/{plan_id}/approve", APPROVER_TOKEN, {"reason": "checked", "decision_hash": full["decision_hash"]})

    def test_plan_approve_then_the_worker_commits_once(self) -> None:
        paid = []

        def pay_out(record_id: str, amount: float) -> dict:
            paid.append((record_id, amount, airlock.idempotency_key()))
            return {"payout": "PO-" + record_id}

        worker = airlock.Worker({"pay_out": pay_out}, client=self.client)
        rid = unique("P")
        proposed = self.client.plan("pay_out", record_id=rid, amount=500)
        self.assertEqual((proposed["status"], proposed["plan"]["status"]), ("planned", "awaiting_approval"))
        self.assertIsNone(worker.run_once(wait_seconds=0.3), "work ran before approval")
        self.approve(proposed["plan"]["id"])
        answer = worker.run_once(wait_seconds=5)
        self.assertIsNotNone(answer)
        self.assertEqual((answer["status"], answer["result"]), ("succeeded", {"payout": "PO-" + rid}))
        self.assertEqual(len(paid), 1)
        self.assertEqual(paid[0][:2], (rid, 500))
        self.assertTrue(paid[0][2], "the handler of a tool that honours keys got no key")
        self.assertEqual(self.plan_status(proposed["plan"]["id"]), "committed")
        again = self.client.plan("pay_out", record_id=rid, amount=500)
        self.assertEqual((again["repeat"], again["plan"]["id"]), (True, proposed["plan"]["id"]))
        self.assertIsNone(worker.run_once(wait_seconds=0.3))
        self.assertEqual(len(paid), 1)

    def test_the_agent_cannot_reach_the_tool(self) -> None:
        ran = []
        with self.assertRaises(airlock.AirlockError) as e:
            self.client.guarded("pay_out")(lambda record_id, amount: ran.append(1))(record_id="P-x", amount=1)
        self.assertEqual(e.exception.code, "not_callable")
        self.assertIn("plan_pay_out", e.exception.message)
        self.assertEqual(ran, [])

    def test_a_worker_killed_mid_commit_the_next_finishes_it_with_the_same_key(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            ledger = os.path.join(d, "ledger")
            child = self.child("pay_out", ledger)
            rid = unique("P")
            proposed = self.client.plan("pay_out", record_id=rid, amount=5)  # automatic
            self.wait_for(lambda: read(ledger), "the first worker never started")
            child.send_signal(signal.SIGKILL)
            child.wait()
            executed = []

            def pay_out(record_id: str, amount: float) -> dict:
                key = airlock.idempotency_key()
                # The service runs a key once: the first worker's request got there.
                if key not in read(ledger).split():
                    executed.append(key)
                return {"payout": "PO-" + record_id, "key": key}

            answer = airlock.Worker({"pay_out": pay_out}, client=self.client).run_once(wait_seconds=15)
            self.assertIsNotNone(answer, "the next worker was not given the commit")
            self.assertEqual(answer["status"], "succeeded")
            self.assertEqual(answer["result"]["key"], read(ledger).split()[0], "taken over with another key")
            self.assertEqual(executed, [])
            self.assertEqual(self.plan_status(proposed["plan"]["id"]), "committed")

    def test_a_worker_killed_mid_commit_without_keys_leaves_it_in_doubt(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            ledger = os.path.join(d, "ledger")
            child = self.child("wire_out", ledger)
            proposed = self.client.plan("wire_out", record_id=unique("W"), amount=5)
            self.wait_for(lambda: read(ledger), "the first worker never started")
            child.send_signal(signal.SIGKILL)
            child.wait()
            ran = []
            worker = airlock.Worker({"wire_out": lambda record_id, amount: ran.append(1)}, client=self.client)
            deadline = time.monotonic() + 20
            while self.plan_status(proposed["plan"]["id"]) != "in_doubt":
                self.assertIsNone(worker.run_once(wait_seconds=0.5))
                self.assertLess(time.monotonic(), deadline, "never in doubt")
            self.assertEqual(ran, [])

    def test_run_until_stopped(self) -> None:
        done = threading.Event()
        worker = airlock.Worker({"wire_out": lambda record_id, amount: done.set() or {"ok": True}}, client=self.client, wait_seconds=0.5)
        t = threading.Thread(target=worker.run)
        t.start()
        try:
            self.client.plan("wire_out", record_id=unique("W"), amount=1)
            self.assertTrue(done.wait(15), "the running worker did not commit the plan")
        finally:
            worker.stop()
            t.join(10)
        self.assertFalse(t.is_alive())

    def test_stop_ends_an_idle_run_within_a_second_or_so(self) -> None:
        # wait_seconds=20 long-polled a whole 20 s before stop() took effect.
        polling = threading.Event()

        class Watched:  # the client, telling when a poll begins
            def __init__(self, c: airlock.Client) -> None:
                self.c = c

            def next_commit(self, tools, wait_seconds=0):
                polling.set()
                return self.c.next_commit(tools, wait_seconds)

            def __getattr__(self, name):
                return getattr(self.c, name)

        worker = airlock.Worker({"wire_out": lambda record_id, amount: {"ok": True}}, client=Watched(self.client), wait_seconds=20)
        t = threading.Thread(target=worker.run)
        t.start()
        self.assertTrue(polling.wait(10), "the worker never asked for work")
        worker.stop()
        t.join(5)
        self.assertFalse(t.is_alive(), "stop() did not end an idle run within 5 s")

    def child(self, tool: str, ledger: str) -> subprocess.Popen:
        src = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "src"))
        code = CHILD.format(src=src, url=server.url, token=AGENT_TOKEN, ledger=ledger, tool=tool)
        return subprocess.Popen([sys.executable, "-c", code])

    def wait_for(self, cond, message: str) -> None:
        deadline = time.monotonic() + 30
        while not cond():
            self.assertLess(time.monotonic(), deadline, message)
            time.sleep(0.02)


if __name__ == "__main__":
    unittest.main()
