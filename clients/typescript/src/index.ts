/**
 * airlock for TypeScript: make a tool that does work exactly-once.
 *
 * A tool marked `upstream: {caller: true}` in airlock's manifest is run by its
 * caller, here, and airlock decides whether it runs: it derives the key from
 * the tool's natural key (you never send one), so the same work asked twice —
 * a retry, another request, another process — runs once, and every repeat gets
 * the first result, marked `repeat: true`.
 *
 * ```ts
 * import { guarded } from "@airlockhq/client";
 * const saveNote = guarded("save_note", async ({ record_id, text }) => notes.add(record_id, text));
 * await saveNote({ record_id: "WD-1", text: "checked" }); // runs
 * await saveNote({ record_id: "wd-1 ", text: "checked" }); // does not: the first answer, repeat
 * ```
 *
 * Configured like the CLI: AIRLOCK_URL and AIRLOCK_TOKEN, or `new Client({url, token})`.
 * No runtime dependencies: the platform's fetch.
 */

/** What airlock answers an agent (POST /v1/calls, and a guarded function). */
export interface Answer {
  status: "succeeded" | "failed" | "in_progress" | "in_doubt" | "planned";
  /** true: this is the first call's answer, and nothing ran now. */
  repeat: boolean;
  result?: unknown;
  message?: string;
  conflict?: unknown;
  plan?: unknown;
}

/** The claims API's answer to the caller that now holds the work. */
export interface Execute {
  status: "execute";
  claim: string;
  lease_until: string;
  lease_seconds: number;
  /** For a tool that honours keys: the key to pass to its service. */
  idempotency_key?: string;
  /** For a plan's commit: the plan whose work this is. */
  plan?: { id: string; tool: string; args: Record<string, unknown>; run_id?: string };
}

/** What a guarded function or a worker's handler is told besides the arguments. */
export interface WorkContext {
  /** For a tool that honours keys (honors_idempotency_key): airlock's key, to pass to the service. */
  idempotencyKey?: string;
  /** For a plan's commit: the plan's id. */
  planId?: string;
}

/** Throw it when the work definitively did not happen: the record is failed, and repeats get the same failure. */
export class Failure extends Error {
  constructor(message: string) {
    super(message);
    this.name = "Failure";
  }
}

/** airlock refused the call and nothing ran: bad input, a tool not run by its caller, a run over budget, airlock unreachable. */
export class AirlockError extends Error {
  constructor(
    /** airlock's error code: missing_field, not_callable, budget_exceeded, store_unavailable, … */
    readonly code: string,
    message: string,
    /** The field the error is about, if any. */
    readonly field = "",
    /** The HTTP status; 0 when airlock was not reached. */
    readonly status = 0,
  ) {
    super(message);
    this.name = "AirlockError";
  }
}

export type Outcome = "succeeded" | "failed" | "unknown" | "not_started";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type ErrorClass = abstract new (...args: any[]) => Error;

export interface GuardOptions {
  /** The errors that mean the work definitively did not happen. Default: [Failure]. Any other error leaves it in doubt. */
  failures?: ErrorClass[];
  /** The agent's run (budgets, run windows); default: AIRLOCK_RUN. */
  runId?: string | (() => string | undefined);
}

export interface ClientOptions {
  /** Default: AIRLOCK_URL, else http://127.0.0.1:8420. */
  url?: string;
  /** An agent's token. Default: AIRLOCK_TOKEN. */
  token?: string;
  /** Default: the global fetch. */
  fetch?: typeof fetch;
  /** Per request. Default 60000. */
  timeoutMs?: number;
}

function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env?.[name];
}

/** A connection to one airlock server. */
export class Client {
  readonly url: string;
  readonly token: string;
  private readonly fetch: typeof fetch;
  private readonly timeoutMs: number;

  constructor(opts: ClientOptions = {}) {
    this.url = (opts.url ?? env("AIRLOCK_URL") ?? "http://127.0.0.1:8420").replace(/\/+$/, "");
    this.token = opts.token ?? env("AIRLOCK_TOKEN") ?? "";
    this.fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.timeoutMs = opts.timeoutMs ?? 60000;
  }

  /** POST /v1/claims: Execute when this caller now holds the work, else the answer (nothing to run). */
  claim(tool: string, args: Record<string, unknown>, runId?: string): Promise<Execute | Answer> {
    return this.post("/v1/claims", runId ? { tool, args, run_id: runId } : { tool, args });
  }

  /** POST /v1/claims/{claim}/renew: the work is still running. */
  renew(claim: string): Promise<{ lease_until: string; lease_seconds: number }> {
    return this.post(`/v1/claims/${encodeURIComponent(claim)}/renew`, undefined);
  }

  /** POST /v1/claims/{claim}/complete; retried while airlock cannot be reached (a retried completion gets the same answer). */
  async complete(claim: string, outcome: Outcome, result?: unknown, error?: string): Promise<Answer> {
    const body: Record<string, unknown> = { outcome };
    if (result !== undefined) body.result = result;
    if (error) body.error = error.slice(0, 4096);
    const path = `/v1/claims/${encodeURIComponent(claim)}/complete`;
    const deadline = Date.now() + 30000;
    for (let delay = 100; ; delay = Math.min(delay * 2, 2000)) {
      try {
        return await this.post<Answer>(path, body);
      } catch (e) {
        if (!(e instanceof AirlockError) || (e.status !== 0 && e.status !== 503) || Date.now() + delay > deadline) throw e;
      }
      await new Promise((r) => setTimeout(r, delay));
    }
  }

  /**
   * Guards fn: it runs only when this caller holds the work's claim, and the
   * returned function resolves to airlock's answer (a repeat is never an
   * error). fn gets the tool's arguments as one object, as agent frameworks
   * pass them; further arguments (a framework's call options) are ignored.
   */
  guarded<A extends Record<string, unknown>, R>(
    tool: string,
    fn: (args: A, work: WorkContext) => R | Promise<R>,
    opts: GuardOptions = {},
  ): (args: A, ...rest: unknown[]) => Promise<Answer> {
    const failures = opts.failures ?? [Failure];
    return async (args: A): Promise<Answer> => {
      const runId = typeof opts.runId === "function" ? opts.runId() : (opts.runId ?? env("AIRLOCK_RUN"));
      const answer = await this.claim(tool, args, runId || undefined);
      if (answer.status !== "execute") return answer as Answer;
      return this.execute(answer as Execute, () => fn(args, { idempotencyKey: (answer as Execute).idempotency_key }), failures);
    };
  }

  /** Runs the work of a held claim, renewing its lease, and completes it. */
  private async execute(held: Execute, run: () => unknown, failures: ErrorClass[]): Promise<Answer> {
    const renewal = this.renewEvery(held);
    try {
      let value: unknown;
      try {
        value = await run();
      } catch (e) {
        const definitive = failures.some((F) => e instanceof F);
        const text = e instanceof Error ? (definitive ? e.message : `${e.name}: ${e.message}`) : String(e);
        return await this.finish(held.claim, definitive ? "failed" : "unknown", undefined, text || "failed");
      }
      return await this.finish(held.claim, "succeeded", storable(value));
    } finally {
      clearInterval(renewal);
    }
  }

  /**
   * Proposes irreversible work (plan_TOOL): the answer carries the plan (its
   * id and status). Rules, or a person, approve it; a worker serving the tool
   * then runs it once. Proposing the same work again answers with the same plan.
   */
  plan(tool: string, args: Record<string, unknown>, runId?: string): Promise<Answer> {
    const run = runId ?? env("AIRLOCK_RUN");
    return this.post("/v1/calls", run ? { tool: `plan_${tool}`, args, run_id: run } : { tool: `plan_${tool}`, args });
  }

  /** POST /v1/commits/next: a plan's work to run (Execute with its plan), or idle. */
  nextCommit(tools: string[], waitSeconds = 0): Promise<Execute | { status: "idle" }> {
    return this.post("/v1/commits/next", { tools, wait_seconds: waitSeconds });
  }

  /**
   * A worker for the approved plans of irreversible tools run by their caller:
   * each plan's work runs once, in this process, only after approval. A
   * handler gets the plan's arguments and a WorkContext (the key, for a tool
   * that honours keys: a commit whose worker was killed is given to the next
   * worker with the same key).
   */
  worker(handlers: Record<string, Handler>, opts: WorkerOptions = {}): Worker {
    const tools = Object.keys(handlers).sort();
    if (tools.length === 0) throw new Error("a worker needs at least one handler: {tool name: function}");
    const failures = opts.failures ?? [Failure];
    const wait = opts.waitSeconds ?? 20;
    let stopped = false;
    const runOnce = async (waitSeconds = wait): Promise<Answer | undefined> => {
      const work = await this.nextCommit(tools, waitSeconds);
      if (work.status !== "execute" || !work.plan) return undefined;
      const plan = work.plan;
      const handler = handlers[plan.tool];
      return this.execute(work, () => handler(plan.args, { idempotencyKey: work.idempotency_key, planId: plan.id }), failures);
    };
    return {
      runOnce,
      async run() {
        for (let delay = 500; !stopped; ) {
          try {
            await runOnce();
            delay = 500;
          } catch (e) {
            if (!(e instanceof AirlockError) || (e.status !== 0 && e.status !== 503)) throw e;
            await new Promise((r) => setTimeout(r, delay));
            delay = Math.min(delay * 2, 10000);
          }
        }
      },
      stop() {
        stopped = true;
      },
    };
  }

  private renewEvery(held: Execute): ReturnType<typeof setInterval> {
    const every = Math.max(((held.lease_seconds || 30) * 1000) / 3, 50);
    const timer = setInterval(() => {
      this.renew(held.claim).catch(() => {
        // lease_lost: the completion will be told; unreachable: next time
      });
    }, every);
    (timer as { unref?: () => void }).unref?.();
    return timer;
  }

  private async finish(claim: string, outcome: Outcome, result?: unknown, error?: string): Promise<Answer> {
    try {
      try {
        return await this.complete(claim, outcome, result, error);
      } catch (e) {
        if (!(e instanceof AirlockError) || e.code !== "too_large" || result === undefined) throw e;
        // The work ran; its result is too large to keep: keep the outcome.
        return await this.complete(claim, outcome, { result_omitted: true, reason: e.message }, error);
      }
    } catch (e) {
      if (e instanceof AirlockError && e.code === "lease_lost") {
        // The lease ended before the outcome came: the record is in doubt.
        return { status: "in_doubt", repeat: false, message: e.message };
      }
      throw e;
    }
  }

  private async post<T>(path: string, body: unknown): Promise<T> {
    const headers: Record<string, string> = { "Content-Type": "application/json" };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    let resp: Response;
    try {
      resp = await this.fetch(this.url + path, {
        method: "POST",
        headers,
        body: body === undefined ? "" : JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (e) {
      throw new AirlockError("store_unavailable", `airlock at ${this.url} could not be reached: ${String(e)}; nothing was run`);
    }
    const text = await resp.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : {};
    } catch {
      throw new AirlockError("internal", `HTTP ${resp.status}: ${text.slice(0, 200)}`, "", resp.status);
    }
    if (!resp.ok) {
      const err = (parsed as { error?: { code?: string; message?: string; field?: string } }).error ?? {};
      throw new AirlockError(err.code ?? "internal", err.message ?? `HTTP ${resp.status}`, err.field ?? "", resp.status);
    }
    return parsed as T;
  }
}

/** A result airlock can keep: JSON, or what is known of a value that is not. */
function storable(value: unknown): unknown {
  if (value === undefined) return null;
  try {
    JSON.stringify(value);
    return value;
  } catch (e) {
    return { unserializable_result: String(value).slice(0, 1000), reason: String(e) };
  }
}

/** A worker's handler: the plan's arguments, and what else it is told. */
export type Handler = (args: Record<string, unknown>, work: WorkContext) => unknown;

export interface WorkerOptions {
  /** The errors that mean the work definitively did not happen. Default: [Failure]. */
  failures?: ErrorClass[];
  /** How long each poll for a commit waits (0 to 30). Default 20. */
  waitSeconds?: number;
}

/** Runs approved plans' work; see Client.worker. */
export interface Worker {
  /** Runs the next approved plan's work, waiting up to waitSeconds for one; its answer, or undefined. */
  runOnce(waitSeconds?: number): Promise<Answer | undefined>;
  /** Runs plans until stop(). */
  run(): Promise<void>;
  /** Ends run() after the poll or plan in hand. */
  stop(): void;
}

let defaultClient: Client | undefined;

function client(): Client {
  return (defaultClient ??= new Client());
}

/** Client.guarded on a client made from AIRLOCK_URL and AIRLOCK_TOKEN when first used. */
export function guarded<A extends Record<string, unknown>, R>(
  tool: string,
  fn: (args: A, work: WorkContext) => R | Promise<R>,
  opts?: GuardOptions,
): (args: A, ...rest: unknown[]) => Promise<Answer> {
  let inner: ((args: A) => Promise<Answer>) | undefined;
  return (args: A) => {
    inner ??= client().guarded(tool, fn, opts);
    return inner(args);
  };
}

/** Client.plan on the default client. */
export function plan(tool: string, args: Record<string, unknown>, runId?: string): Promise<Answer> {
  return client().plan(tool, args, runId);
}

/** Client.worker on the default client. */
export function worker(handlers: Record<string, Handler>, opts?: WorkerOptions): Worker {
  return client().worker(handlers, opts);
}
