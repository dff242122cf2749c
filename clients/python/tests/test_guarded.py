"""The Python client against a real `airlock serve` (tests/server.py)."""

from __future__ import annotations

import asyncio
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

from .server import AGENT_TOKEN, Server  # noqa: E402

server: Server


def setUpModule() -> None:
    global server
    server = Server()


def tearDownModule() -> None:
    server.stop()


def read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# A process that guards a function appending to a file, for the
# two-process and killed-process tests.
CHILD = """
import os, sys, time
sys.path.insert(0, {src!r})
import airlock
client = airlock.Client({url!r}, {token!r})
@client.guarded("save_note")
def save_note(record_id, text):
    with open({log!r}, "a") as f:
        f.write(str(os.getpid()) + "\\n")
    time.sleep(float(os.environ.get("WORK_SECONDS", "0")))
    return {{"note": "N-" + str(os.getpid())}}
print(save_note(record_id={record!r}, text="x")["status"], flush=True)
"""


class GuardedTest(unittest.TestCase):
    def setUp(self) -> None:
        self.client = airlock.Client(server.url, AGENT_TOKEN)
        self.runs = 0
        self.lock = threading.Lock()

    def counted(self, result=None, error: BaseException | None = None, seconds: float = 0):
        def save_note(record_id: str, text: str):
            with self.lock:
                self.runs += 1
            time.sleep(seconds)
            if error is not None:
                raise error
            return result if result is not None else {"note": "N-" + record_id}
        return self.client.guarded("save_note")(save_note)

    def test_first_call_runs_and_repeats_get_its_result(self) -> None:
        save_note = self.counted()
        rid = unique("wd")
        first = save_note(record_id=rid, text="checked")
        self.assertEqual(first["status"], "succeeded")
        self.assertFalse(first["repeat"])
        self.assertEqual(first["result"], {"note": "N-" + rid})
        # The same work spelled another way is the same work.
        again = save_note(record_id=" " + rid.lower() + " ", text="checked ")
        self.assertEqual(again["status"], "succeeded")
        self.assertTrue(again["repeat"])
        self.assertEqual(again["result"], first["result"])
        self.assertEqual(self.runs, 1)
        other = save_note(record_id=rid, text="another note")
        self.assertFalse(other["repeat"])
        self.assertEqual(self.runs, 2)

    def test_two_threads_one_execution(self) -> None:
        save_note = self.counted(seconds=0.3)
        rid = unique("wd")
        start = threading.Barrier(8)
        answers = []

        def call() -> None:
            start.wait()
            answers.append(save_note(record_id=rid, text="x"))

        threads = [threading.Thread(target=call) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(self.runs, 1)
        self.assertEqual({a["status"] for a in answers}, {"succeeded"})
        self.assertEqual(sum(1 for a in answers if not a["repeat"]), 1)
        self.assertEqual(len({str(a["result"]) for a in answers}), 1)

    def child(self, record: str, log: str, **env: str) -> subprocess.Popen:
        src = os.path.join(os.path.dirname(__file__), "..", "src")
        code = CHILD.format(src=os.path.abspath(src), url=server.url, token=AGENT_TOKEN, log=log, record=record)
        return subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, **env), stdout=subprocess.PIPE, text=True)

    def test_two_processes_one_execution(self) -> None:
        rid = unique("wd")
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "runs")
            procs = [self.child(rid, log, WORK_SECONDS="0.3") for _ in range(2)]
            outs = [p.communicate(timeout=60)[0].strip() for p in procs]
            self.assertEqual(outs, ["succeeded", "succeeded"])
            with open(log) as f:
                self.assertEqual(len(f.read().split()), 1, "the function ran in both processes")

    def test_process_killed_mid_function_is_in_doubt_never_rerun(self) -> None:
        rid = unique("wd")
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "runs")
            p = self.child(rid, log, WORK_SECONDS="60")
            deadline = time.monotonic() + 30
            while not read(log):
                self.assertLess(time.monotonic(), deadline, "the child never started its work")
                time.sleep(0.02)
            p.send_signal(signal.SIGKILL)
            p.wait()
            p.stdout.close()
            save_note = self.counted()
            deadline = time.monotonic() + 30
            while True:
                answer = save_note(record_id=rid, text="x")
                if answer["status"] == "in_doubt":
                    break
                self.assertEqual(answer["status"], "in_progress")
                self.assertLess(time.monotonic(), deadline, "never in doubt")
            self.assertTrue(answer["repeat"])
            self.assertEqual(self.runs, 0, "the work of a killed process was run again")
            self.assertEqual(len(read(log).split()), 1)

    def test_a_declared_failure_is_failed_and_repeated(self) -> None:
        save_note = self.counted(error=airlock.Failure("the record is closed"))
        rid = unique("wd")
        first = save_note(record_id=rid, text="x")
        self.assertEqual(first["status"], "failed")
        self.assertEqual(first["result"], {"error": "the record is closed"})
        again = save_note(record_id=rid, text="x")
        self.assertEqual((again["status"], again["repeat"]), ("failed", True))
        self.assertEqual(self.runs, 1)

    def test_another_exception_leaves_the_work_in_doubt(self) -> None:
        save_note = self.counted(error=ConnectionResetError("the mail server hung up"))
        rid = unique("wd")
        first = save_note(record_id=rid, text="x")
        self.assertEqual(first["status"], "in_doubt")
        self.assertIn("Do not retry", first["message"])
        again = save_note(record_id=rid, text="x")
        self.assertEqual((again["status"], again["repeat"]), ("in_doubt", True))
        self.assertEqual(self.runs, 1)

    def test_a_result_too_large_keeps_its_outcome(self) -> None:
        save_note = self.counted(result={"blob": "x" * (2 << 20)})
        rid = unique("wd")
        first = save_note(record_id=rid, text="x")
        self.assertEqual(first["status"], "succeeded")
        self.assertTrue(first["result"]["result_omitted"])
        self.assertEqual(save_note(record_id=rid, text="x")["repeat"], True)
        self.assertEqual(self.runs, 1)

    def test_bad_input_is_refused_and_nothing_runs(self) -> None:
        save_note = self.counted()
        with self.assertRaises(airlock.AirlockError) as e:
            save_note(record_id=unique("wd"))
        self.assertEqual((e.exception.code, e.exception.field, e.exception.status), ("missing_field", "text", 400))
        with self.assertRaises(airlock.AirlockError) as e:
            save_note(unique("wd"), "x")
        self.assertEqual(e.exception.code, "invalid_argument")
        not_ours = self.client.guarded("add_note")(lambda record_id: {"ok": True})
        with self.assertRaises(airlock.AirlockError) as e:
            not_ours(record_id="A")
        self.assertEqual((e.exception.code, e.exception.status), ("not_callable", 403))
        self.assertEqual(self.runs, 0)

    def test_a_run_over_its_budget_is_refused(self) -> None:
        calls = []
        note = self.client.guarded("limited_note")(lambda record_id: calls.append(record_id) or {"ok": True})
        with airlock.run(unique("run")):
            self.assertEqual(note(record_id=unique("a"))["status"], "succeeded")
            with self.assertRaises(airlock.AirlockError) as e:
                note(record_id=unique("b"))
        self.assertEqual(e.exception.code, "budget_exceeded")
        self.assertEqual(len(calls), 1)

    def test_async_functions(self) -> None:
        runs = []

        @self.client.guarded("save_note")
        async def save_note(record_id: str, text: str):
            runs.append(record_id)
            await asyncio.sleep(0.2)
            return {"note": record_id}

        rid = unique("wd")

        async def main():
            return await asyncio.gather(*(save_note(record_id=rid, text="x") for _ in range(4)))

        answers = asyncio.run(main())
        self.assertEqual(len(runs), 1)
        self.assertEqual(sorted(a["repeat"] for a in answers), [False, True, True, True])

    def test_airlock_unreachable(self) -> None:
        dead = airlock.Client("http://127.0.0.1:1", AGENT_TOKEN, timeout=2)
        ran = []
        with self.assertRaises(airlock.AirlockError) as e:
            dead.guarded("save_note")(lambda record_id, text: ran.append(1))(record_id="A", text="x")
        self.assertEqual((e.exception.code, e.exception.status), ("store_unavailable", 0))
        self.assertEqual(ran, [])

    def test_configured_from_the_environment(self) -> None:
        old = dict(os.environ)
        try:
            os.environ.update(AIRLOCK_URL=server.url, AIRLOCK_TOKEN=AGENT_TOKEN)
            airlock._default = None
            ran = []

            @airlock.guarded("save_note")
            def save_note(record_id: str, text: str):
                ran.append(1)
                return {"ok": True}

            rid = unique("wd")
            self.assertEqual(save_note(record_id=rid, text="x")["status"], "succeeded")
            self.assertTrue(airlock.wrap(lambda record_id, text: ran.append(1), "save_note")(record_id=rid, text="x")["repeat"])
            self.assertEqual(ran, [1])
        finally:
            os.environ.clear()
            os.environ.update(old)
            airlock._default = None


if __name__ == "__main__":
    unittest.main()
