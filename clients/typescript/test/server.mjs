// A real `airlock serve` for the tests: AIRLOCK_BIN (or built with go build
// from this repository), on embedded SQLite in a temporary directory.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, openSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const AGENT_TOKEN = "ts-agent-secret";
export const APPROVER_TOKEN = "ts-approver-secret";
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), process.env.AIRLOCK_REPO ?? "../../..");

const MANIFEST = join(ROOT, "clients", "testdata", "airlock.yaml");

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
  let bin = process.env.AIRLOCK_BIN;
  if (!bin) {
    bin = join(dir, "airlock");
    execFileSync("go", ["build", "-o", bin, "./cmd/airlock"], { cwd: ROOT, stdio: "inherit" });
  }
  const url = `http://127.0.0.1:${await freePort()}`;
  const log = openSync(join(dir, "serve.log"), "w");
  const proc = spawn(bin, ["serve", "--config", MANIFEST, "--db", "sqlite:" + join(dir, "a.db"), "--listen", url.slice(7), "--lease", lease],
    { env: { ...process.env, CLIENT_AGENT: AGENT_TOKEN, CLIENT_APPROVER: APPROVER_TOKEN }, stdio: ["ignore", log, log] });
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
