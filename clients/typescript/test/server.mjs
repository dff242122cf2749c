// A real `airlock serve` for the tests: AIRLOCK_BIN (or built with go build
// from this repository), on embedded SQLite in a temporary directory.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, openSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const AGENT_TOKEN = "ts-agent-secret";
export const APPROVER_TOKEN = "ts-approver-secret";
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), process.env.AIRLOCK_REPO ?? "../../..");

const MANIFEST = `version: 1
auth:
  tokens:
    - {name: ts-agent, role: agent, env: TS_AGENT}
    - {name: ts-approver, role: approver, env: TS_APPROVER}
upstreams:
  elsewhere: {http: "http://127.0.0.1:1"}
tools:
  - name: save_note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}, text: {type: string}}, required: [record_id, text], additionalProperties: false}
    natural_key: [{field: record_id, normalize: [trim, upper]}, {field: text, normalize: [trim]}]
    window: forever
    repeat_wait: 20s
    upstream: {caller: true}
    answers: {undo: "Yes, delete the note.", approver: "No one.", on_repeat: "The first note is returned."}
  - name: pay_out
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}, amount: {type: number}}, required: [record_id, amount]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {caller: true, honors_idempotency_key: true}
    answers: {undo: "No.", approver: "A person above 100, else automatic.", on_repeat: "The first payout."}
    approval: {rules: [{name: small, when: "args.amount < 100", decide: auto}, {name: large, when: "true", decide: human}]}
  - name: wire_out
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}, amount: {type: number}}, required: [record_id, amount]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {caller: true}
    answers: {undo: "No.", approver: "Automatic.", on_repeat: "The first wire."}
    approval: {rules: [{name: all, when: "true", decide: auto}]}
  - name: add_note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: elsewhere, path: /note}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first note."}
`;

function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
    s.on("error", fail);
  });
}

export async function startServer(lease = "2s") {
  const dir = mkdtempSync(join(tmpdir(), "airlock-ts-"));
  writeFileSync(join(dir, "airlock.yaml"), MANIFEST);
  let bin = process.env.AIRLOCK_BIN;
  if (!bin) {
    bin = join(dir, "airlock");
    execFileSync("go", ["build", "-o", bin, "./cmd/airlock"], { cwd: ROOT, stdio: "inherit" });
  }
  const url = `http://127.0.0.1:${await freePort()}`;
  const log = openSync(join(dir, "serve.log"), "w");
  const proc = spawn(bin, ["serve", "--config", join(dir, "airlock.yaml"), "--db", "sqlite:" + join(dir, "a.db"), "--listen", url.slice(7), "--lease", lease],
    { env: { ...process.env, TS_AGENT: AGENT_TOKEN, TS_APPROVER: APPROVER_TOKEN }, stdio: ["ignore", log, log] });
  const deadline = Date.now() + 60000;
  for (;;) {
    try {
      if ((await fetch(url + "/healthz")).ok) break;
    } catch {
      // not yet
    }
    if (proc.exitCode !== null || Date.now() > deadline) throw new Error("airlock serve did not start; see " + join(dir, "serve.log"));
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url,
    /** A request to the HTTP API (approvals, plans), as a person would make it. */
    async api(method, path, token, body) {
      const resp = await fetch(url + path, {
        method,
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return resp.json();
    },
    async stop() {
      proc.kill("SIGTERM");
      await new Promise((r) => proc.once("exit", r));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
