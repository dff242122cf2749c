"""The Python snippets of the READMEs (the tour's item 4 and this client's),
run as written against a real `airlock serve`, with a `notes` service that
counts what it does: the first call runs, the respelled repeat does not and
gets the first result, as their comments say."""

from __future__ import annotations

import os
import re
import sys
import textwrap
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import airlock  # noqa: E402

from .server import AGENT_TOKEN, ROOT, Server  # noqa: E402

def python_blocks(path: str) -> list:
    with open(path) as f:
        text = f.read()
    return [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", text, re.S)]


def said_answers(code: str) -> list:
    """The answer each call's comment shows: on its line, or the next."""
    lines = code.splitlines()
    said = []
    for i, line in enumerate(lines):
        if line.startswith("answers.append(save_note("):
            comment = line.partition("#")[2].strip()
            if "{" not in comment and i + 1 < len(lines) and lines[i + 1].startswith("# {"):
                comment = lines[i + 1][1:].strip()
            said.append(comment)
    return said


class Notes:
    def __init__(self) -> None:
        self.added = []

    def add(self, record_id: str, text: str) -> dict:
        self.added.append((record_id, text))
        return {"note_id": "N-%d" % len(self.added)}


class READMESnippets(unittest.TestCase):
    # A server each: both snippets do the same work (WD-1, "checked").
    def setUp(self) -> None:
        self.server = Server()
        self.addCleanup(self.server.stop)

    def run_snippet(self, where: str, code: str) -> None:
        # The snippet prints nothing: each call's answer is kept to compare
        # with the comment beside it.
        answers = []
        code = re.sub(r"^(save_note\(.*?\))", r"answers.append(\1)", code, flags=re.M)
        notes = Notes()
        old = {k: os.environ.get(k) for k in ("AIRLOCK_URL", "AIRLOCK_TOKEN")}
        os.environ.update(AIRLOCK_URL=self.server.url, AIRLOCK_TOKEN=AGENT_TOKEN)
        airlock._default = None  # the module's client is made from them
        try:
            exec(compile(code, where, "exec"), {"__name__": "readme", "notes": notes, "answers": answers})
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            airlock._default = None
        self.assertEqual(len(answers), 2, where)
        first, repeat = answers
        self.assertEqual((first["status"], first["repeat"]), ("succeeded", False), where)
        self.assertEqual((repeat["status"], repeat["repeat"]), ("succeeded", True), where)
        self.assertEqual(repeat["result"], first["result"], where)
        self.assertEqual(set(repeat), set(first), where + ": a repeat's answer has the first's members, no more")
        self.assertEqual(len(notes.added), 1, where + ": the work ran once")
        # What the comments say each call returns: the members they name
        # hold those values; one written as a dict without "..." names
        # every member.
        for answer, said in zip(answers, said_answers(code)):
            for key, value in re.findall(r"'(\w+)': ('[^']*'|True|False)", said):
                self.assertIn(key, answer, f"{where}: the comment {said!r} names {key}")
                self.assertEqual(repr(answer[key]), value, f"{where}: the comment {said!r}")
            if said.startswith("{") and "..." not in said.replace("{...}", ""):
                self.assertEqual(set(re.findall(r"'(\w+)':", said)), set(answer), f"{where}: the comment {said!r} against {answer!r}")

    def test_tour(self) -> None:
        blocks = python_blocks(os.path.join(ROOT, "README.md"))
        self.assertEqual(len(blocks), 1)
        self.run_snippet("README.md", blocks[0])

    def test_client_readme(self) -> None:
        blocks = python_blocks(os.path.join(ROOT, "clients", "python", "README.md"))
        self.assertTrue(blocks)
        self.run_snippet("clients/python/README.md", blocks[0])


if __name__ == "__main__":
    unittest.main()
