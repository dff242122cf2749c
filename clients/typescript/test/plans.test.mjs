// Irreversible tools run by their caller: plan → approve → a worker commits once.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { AirlockError, Client } from "../dist/src/index.js";
import { AGENT_TOKEN, APPROVER_TOKEN, startServer } from "./server.mjs";

let server;
let client;
before(async () => {
  server = await startServer("1s");
  client = new Client({ url: server.url, token: AGENT_TOKEN });
});
after(async () => server?.stop());

const unique = (p) => `${p}-${randomUUID().slice(0, 8)}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const read = (path) => (existsSync(path) ? readFileSync(path, "utf8") : "");
const planStatus = async (id) => (await server.api("GET", `/v1/plans/${id}`, APPROVER_TOKEN)).status;

async function approve(id) {
  const full = await server.api("GET", `/v1/plans/${id}`, APPROVER_TOKEN);
  await server.api("POST", `/v1/plans/${id}/approve`, APPROVER_TOKEN, { reason: "checked", decision_hash: full.decision_hash });
}

function child(tool, ledger) {
  const p = spawn(process.execPath, [new URL("./worker-child.mjs", import.meta.url).pathname], {
    env: { ...process.env, URL: server.url, TOKEN: AGENT_TOKEN, TOOL: tool, LEDGER: ledger },
    stdio: "inherit",
  });
  return { p, exited: new Promise((r) => p.once("exit", r)) };
}

async function waitFor(cond, message) {
  for (const until = Date.now() + 30000; !cond(); await sleep(20)) assert.ok(Date.now() < until, message);
}

test("plan → approve → the worker commits once", async () => {
  const paid = [];
  const w = client.worker({ pay_out: async ({ record_id, amount }, work) => (paid.push([record_id, amount, work.idempotencyKey]), { payout: `PO-${record_id}` }) });
  const rid = unique("P");
  const proposed = await client.plan("pay_out", { record_id: rid, amount: 500 });
  assert.deepEqual([proposed.status, proposed.plan.status], ["planned", "awaiting_approval"]);
  assert.equal(await w.runOnce(0.3), undefined, "work ran before approval");
  await approve(proposed.plan.id);
  const answer = await w.runOnce(5);
  assert.deepEqual([answer.status, answer.result], ["succeeded", { payout: `PO-${rid}` }]);
  assert.equal(paid.length, 1);
  assert.ok(paid[0][2], "no key for a tool that honours keys");
  assert.equal(await planStatus(proposed.plan.id), "committed");
  const again = await client.plan("pay_out", { record_id: rid, amount: 500 });
  assert.deepEqual([again.repeat, again.plan.id], [true, proposed.plan.id]);
  assert.equal(await w.runOnce(0.3), undefined);
  assert.equal(paid.length, 1);
});

test("the agent cannot reach the tool", async () => {
  let ran = 0;
  await assert.rejects(client.guarded("pay_out", async () => ran++)({ record_id: "P-x", amount: 1 }),
    (e) => e instanceof AirlockError && e.code === "not_callable" && e.message.includes("plan_pay_out"));
  assert.equal(ran, 0);
});

test("a worker killed mid-commit: the next finishes it with the same key", async () => {
  const ledger = join(mkdtempSync(join(tmpdir(), "airlock-ts-")), "ledger");
  const { p, exited } = child("pay_out", ledger);
  const proposed = await client.plan("pay_out", { record_id: unique("P"), amount: 5 }); // automatic
  await waitFor(() => read(ledger), "the first worker never started");
  p.kill("SIGKILL");
  await exited;
  const executed = [];
  const answer = await client
    .worker({
      pay_out: async ({ record_id }, work) => {
        // The service runs a key once: the first worker's request got there.
        if (!read(ledger).split("\n").includes(work.idempotencyKey)) executed.push(work.idempotencyKey);
        return { payout: `PO-${record_id}`, key: work.idempotencyKey };
      },
    })
    .runOnce(15);
  assert.ok(answer, "the next worker was not given the commit");
  assert.equal(answer.status, "succeeded");
  assert.equal(answer.result.key, read(ledger).split("\n")[0]);
  assert.deepEqual(executed, []);
  assert.equal(await planStatus(proposed.plan.id), "committed");
});

test("a worker killed mid-commit without keys: the plan goes in doubt", async () => {
  const ledger = join(mkdtempSync(join(tmpdir(), "airlock-ts-")), "ledger");
  const { p, exited } = child("wire_out", ledger);
  const proposed = await client.plan("wire_out", { record_id: unique("W"), amount: 5 });
  await waitFor(() => read(ledger), "the first worker never started");
  p.kill("SIGKILL");
  await exited;
  let ran = 0;
  const w = client.worker({ wire_out: async () => ran++ });
  for (const until = Date.now() + 20000; (await planStatus(proposed.plan.id)) !== "in_doubt"; ) {
    assert.equal(await w.runOnce(0.5), undefined);
    assert.ok(Date.now() < until, "never in doubt");
  }
  assert.equal(ran, 0);
});

test("run until stopped", async () => {
  let resolve;
  const done = new Promise((r) => (resolve = r));
  const w = client.worker({ wire_out: async () => (resolve(), { ok: true }) }, { waitSeconds: 0.5 });
  const running = w.run();
  await client.plan("wire_out", { record_id: unique("W"), amount: 1 });
  await Promise.race([done, sleep(15000).then(() => assert.fail("the running worker did not commit the plan"))]);
  w.stop();
  await running;
});
