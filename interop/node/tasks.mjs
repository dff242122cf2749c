// Drives airlock's MCP tasks with the official TypeScript SDK's task API
// (@modelcontextprotocol/sdk 1.x, client.experimental.tasks: the
// experimental tasks of 2025-11-25), as its users would, and prints what it
// saw as one JSON object for the interop test (cmd/airlock,
// TestE2EInteropTasks).
//
//   node tasks.mjs http URL TOKEN RECORD
//   node tasks.mjs stdio RECORD COMMAND [ARG...]
//
// It lists the tools (which declare task support), calls a write twice
// with callToolStream (each call becomes a task; both name the same one),
// proposes a plan as a task and cancels it (the plan is withdrawn).

const [transport, ...rest] = process.argv.slice(2);
const report = { taskSupport: {}, calls: [], plan: null };

// drain reads a callToolStream to its end, or to the first status update
// when stopEarly (a plan waits for a person).
async function drain(stream, stopEarly) {
  const seen = { types: [], taskId: null, status: null, result: null, error: null };
  for await (const msg of stream) {
    seen.types.push(msg.type);
    if (msg.type === 'taskCreated') seen.taskId = msg.task.taskId;
    if (msg.type === 'taskStatus' || msg.type === 'taskCreated') seen.status = msg.task.status;
    if (msg.type === 'result') seen.result = msg.result;
    if (msg.type === 'error') seen.error = String(msg.error);
    if (stopEarly && msg.type === 'taskCreated') break;
  }
  return seen;
}

try {
  const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
  const c = new Client({ name: 'interop-tasks', version: '1' });
  if (transport === 'http') {
    const [url, token, record] = rest;
    report.record = record;
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    await c.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  } else {
    const [record, command, ...args] = rest;
    report.record = record;
    const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
    await c.connect(new StdioClientTransport({ command, args, env: { ...process.env } }));
  }
  report.protocol = c.transport?.protocolVersion ?? '';
  report.serverTasks = c.getServerCapabilities()?.tasks ?? null;
  for (const tool of (await c.listTools()).tools) {
    report.taskSupport[tool.name] = tool.execution?.taskSupport ?? null;
  }
  const note = { record_id: report.record, text: 'checked with tasks' };
  for (let i = 0; i < 2; i++) {
    report.calls.push(await drain(c.experimental.tasks.callToolStream({ name: 'add_note', arguments: note }), false));
  }
  const plan = await drain(c.experimental.tasks.callToolStream({ name: 'plan_approve_withdrawal', arguments: { record_id: report.record } }), true);
  if (plan.taskId) {
    plan.before = (await c.experimental.tasks.getTask(plan.taskId)).status;
    plan.cancel = (await c.experimental.tasks.cancelTask(plan.taskId)).status;
    plan.after = (await c.experimental.tasks.getTask(plan.taskId)).status;
  }
  report.plan = plan;
  report.listed = (await c.experimental.tasks.listTasks()).tasks.map((t) => t.taskId);
  await c.close();
} catch (err) {
  report.error = String(err?.stack ?? err);
}
console.log(JSON.stringify(report));
process.exit(0);
