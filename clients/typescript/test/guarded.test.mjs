// The TypeScript client against a real `airlock serve` (test/server.mjs).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { randomUUID } from "node:crypto";
import { RunContext } from "@openai/agents";
import { AirlockError, Client, Failure, guarded } from "../dist/src/index.js";
import { saveNoteTool as aiTool } from "../dist/examples/vercel-ai.js";
import { saveNoteTool as agentsTool } from "../dist/examples/openai-agents.js";
import { AGENT_TOKEN, startServer } from "./server.mjs";

let server;
let client;
before(async () => {
  server = await startServer();
  client = new Client({ url: server.url, token: AGENT_TOKEN });
});
after(async () => server?.stop());

const unique = (p) => `${p}-${randomUUID().slice(0, 8)}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function counted(behave = async ({ record_id }) => ({ note: `N-${record_id}` })) {
  const calls = { n: 0 };
  const fn = client.guarded("save_note", async (args) => {
    calls.n++;
    return behave(args);
  });
  return { fn, calls };
}

test("the first call runs; the same work, spelled another way, gets its result as a repeat", async () => {
  const { fn, calls } = counted();
  const rid = unique("wd");
  const first = await fn({ record_id: rid, text: "checked" });
  assert.deepEqual([first.status, first.repeat, first.result], ["succeeded", false, { note: `N-${rid}` }]);
  const again = await fn({ record_id: ` ${rid.toLowerCase()} `, text: "checked " });
  assert.deepEqual([again.status, again.repeat, again.result], ["succeeded", true, first.result]);
  assert.equal(calls.n, 1);
});

test("calls at once in one process: one execution", async () => {
  const { fn, calls } = counted(async ({ record_id }) => (await sleep(300), { note: record_id }));
  const rid = unique("wd");
  const answers = await Promise.all(Array.from({ length: 8 }, () => fn({ record_id: rid, text: "x" })));
  assert.equal(calls.n, 1);
  assert.deepEqual(new Set(answers.map((a) => a.status)), new Set(["succeeded"]));
  assert.equal(answers.filter((a) => !a.repeat).length, 1);
});

function child(record, log, workMs) {
  const p = spawn(process.execPath, [new URL("./child.mjs", import.meta.url).pathname], {
    env: { ...process.env, URL: server.url, TOKEN: AGENT_TOKEN, RECORD: record, LOG: log, WORK_MS: String(workMs) },
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  p.stdout.on("data", (d) => (out += d));
  const done = new Promise((r) => p.once("exit", () => r(out.trim())));
  return { p, done };
}

test("two processes: one execution", async () => {
  const rid = unique("wd");
  const log = join(mkdtempSync(join(tmpdir(), "airlock-ts-")), "runs");
  const outs = await Promise.all([child(rid, log, 300).done, child(rid, log, 300).done]);
  assert.deepEqual(outs, ["succeeded", "succeeded"]);
  assert.equal(readFileSync(log, "utf8").trim().split("\n").length, 1);
});

test("a process killed mid-function: in doubt, never run again", async () => {
  const rid = unique("wd");
  const log = join(mkdtempSync(join(tmpdir(), "airlock-ts-")), "runs");
  const { p, done } = child(rid, log, 60000);
  const deadline = Date.now() + 30000;
  while (!(existsSync(log) && readFileSync(log, "utf8"))) {
    assert.ok(Date.now() < deadline, "the child never started its work");
    await sleep(20);
  }
  p.kill("SIGKILL");
  await done;
  const { fn, calls } = counted();
  let answer;
  for (const until = Date.now() + 30000; ; ) {
    answer = await fn({ record_id: rid, text: "x" });
    if (answer.status === "in_doubt") break;
    assert.equal(answer.status, "in_progress");
    assert.ok(Date.now() < until, "never in doubt");
  }
  assert.equal(answer.repeat, true);
  assert.equal(calls.n, 0);
  assert.equal(readFileSync(log, "utf8").trim().split("\n").length, 1);
});

test("a declared failure is failed, and so is its repeat", async () => {
  const { fn, calls } = counted(async () => {
    throw new Failure("the record is closed");
  });
  const rid = unique("wd");
  const first = await fn({ record_id: rid, text: "x" });
  assert.deepEqual([first.status, first.result], ["failed", { error: "the record is closed" }]);
  const again = await fn({ record_id: rid, text: "x" });
  assert.deepEqual([again.status, again.repeat], ["failed", true]);
  assert.equal(calls.n, 1);
});

test("any other error leaves the work in doubt", async () => {
  const { fn, calls } = counted(async () => {
    throw new TypeError("socket hang up");
  });
  const rid = unique("wd");
  const first = await fn({ record_id: rid, text: "x" });
  assert.equal(first.status, "in_doubt");
  assert.match(first.message, /Do not retry/);
  assert.deepEqual([(await fn({ record_id: rid, text: "x" })).repeat, calls.n], [true, 1]);
});

test("a result too large keeps its outcome", async () => {
  const { fn, calls } = counted(async () => ({ blob: "x".repeat(2 << 20) }));
  const rid = unique("wd");
  const first = await fn({ record_id: rid, text: "x" });
  assert.deepEqual([first.status, first.result.result_omitted], ["succeeded", true]);
  assert.equal((await fn({ record_id: rid, text: "x" })).repeat, true);
  assert.equal(calls.n, 1);
});

test("bad input is refused and nothing runs", async () => {
  const { fn, calls } = counted();
  await assert.rejects(fn({ record_id: unique("wd") }), (e) => e instanceof AirlockError && e.code === "missing_field" && e.field === "text" && e.status === 400);
  const notOurs = client.guarded("add_note", async () => ({ ok: true }));
  await assert.rejects(notOurs({ record_id: "A" }), (e) => e instanceof AirlockError && e.code === "not_callable" && e.status === 403);
  const dead = new Client({ url: "http://127.0.0.1:1", token: AGENT_TOKEN, timeoutMs: 2000 }).guarded("save_note", async () => calls.n++);
  await assert.rejects(dead({ record_id: "A", text: "x" }), (e) => e instanceof AirlockError && e.code === "store_unavailable" && e.status === 0);
  assert.equal(calls.n, 0);
});

test("configured from AIRLOCK_URL and AIRLOCK_TOKEN", async () => {
  process.env.AIRLOCK_URL = server.url;
  process.env.AIRLOCK_TOKEN = AGENT_TOKEN;
  try {
    let n = 0;
    const fn = guarded("save_note", async () => ({ n: ++n }));
    const rid = unique("wd");
    assert.equal((await fn({ record_id: rid, text: "x" })).status, "succeeded");
    assert.equal((await fn({ record_id: rid, text: "x" })).repeat, true);
    assert.equal(n, 1);
  } finally {
    delete process.env.AIRLOCK_URL;
    delete process.env.AIRLOCK_TOKEN;
  }
});

test("a Vercel AI SDK tool, invoked as the SDK invokes it", async () => {
  let saved = 0;
  const t = aiTool(client, async (recordId, text) => ({ note: `${recordId}:${text}`, n: ++saved }));
  const rid = unique("wd");
  const input = await t.inputSchema.parseAsync?.({ record_id: rid, text: "hi" }) ?? { record_id: rid, text: "hi" };
  const options = { toolCallId: "call-1", messages: [] };
  const first = await t.execute(input, options);
  const retried = await t.execute(input, { ...options, toolCallId: "call-2" });
  assert.deepEqual([first.status, first.repeat, retried.repeat, retried.result], ["succeeded", false, true, first.result]);
  assert.equal(saved, 1);
});

test("an OpenAI Agents SDK tool, invoked as the SDK invokes it", async () => {
  let saved = 0;
  const t = agentsTool(client, async (recordId) => ({ note: recordId, n: ++saved }));
  const rid = unique("wd");
  const ctx = new RunContext({});
  const first = await t.invoke(ctx, JSON.stringify({ record_id: rid, text: "hi" }), { toolCall: { type: "function_call", callId: "c1", name: "save_note", arguments: "" } });
  const again = await t.invoke(ctx, JSON.stringify({ record_id: rid, text: "hi " }), { toolCall: { type: "function_call", callId: "c2", name: "save_note", arguments: "" } });
  const parse = (v) => (typeof v === "string" ? JSON.parse(v) : v);
  assert.deepEqual([parse(first).status, parse(first).repeat, parse(again).repeat], ["succeeded", false, true]);
  assert.equal(saved, 1);
});
