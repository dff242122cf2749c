// Drives airlock with one MCP client library as its users would, on the
// library's defaults, and prints what it saw as one JSON object for the
// interop test (cmd/airlock, TestE2EInteropClients).
//
//   node drive.mjs CLIENT http URL TOKEN RECORD
//   node drive.mjs CLIENT stdio RECORD COMMAND [ARG...]
//
// CLIENT: sdk (@modelcontextprotocol/sdk 1.x), client2
// (@modelcontextprotocol/client 2.x), ai-sdk (@ai-sdk/mcp), openai
// (@openai/agents), langchain (@langchain/mcp-adapters). Each adapter
// connects, lists the tools, calls one tool, reads the resource
// notes://all and gets the prompt summarize_notes (record_id: RECORD),
// nothing else: what each returns is reported as the library hands it to
// its user. A library with no way to get a prompt reports prompt null.

const [client, transport, ...rest] = process.argv.slice(2);
let target;
if (transport === 'http') {
  const [url, token, record] = rest;
  target = { http: true, url, headers: { Authorization: `Bearer ${token}` }, record };
} else if (transport === 'stdio') {
  const [record, command, ...args] = rest;
  target = { http: false, command, args, env: { ...process.env }, record };
} else {
  console.log(JSON.stringify({ error: `unknown transport ${transport}` }));
  process.exit(0);
}

// text joins a result's text content, wherever the library put it.
function text(content) {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.filter((c) => c && c.type === 'text').map((c) => c.text).join('\n');
}

// resourceText joins a resource's text contents.
function resourceText(contents) {
  return (contents ?? []).map((c) => c?.text ?? '').join('\n');
}

// promptText joins a prompt's messages' text.
function promptText(res) {
  return (res?.messages ?? []).map((m) => (m?.content?.type === 'text' ? m.content.text : '')).join('\n');
}

const adapters = {
  async sdk(t) {
    const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
    const c = new Client({ name: 'interop-sdk', version: '1' });
    if (t.http) {
      const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
      await c.connect(new StreamableHTTPClientTransport(new URL(t.url), { requestInit: { headers: t.headers } }));
    } else {
      const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
      await c.connect(new StdioClientTransport({ command: t.command, args: t.args, env: t.env }));
    }
    return {
      protocol: c.transport?.protocolVersion ?? '',
      list: async () => (await c.listTools()).tools,
      call: async (name, args) => c.callTool({ name, arguments: args }),
      read: async (uri) => resourceText((await c.readResource({ uri })).contents),
      prompt: async (name, args) => promptText(await c.getPrompt({ name, arguments: args })),
      close: () => c.close(),
    };
  },
  async client2(t) {
    const mod = await import('@modelcontextprotocol/client');
    const c = new mod.Client({ name: 'interop-client2', version: '1' });
    if (t.http) {
      await c.connect(new mod.StreamableHTTPClientTransport(new URL(t.url), { requestInit: { headers: t.headers } }));
    } else {
      const { StdioClientTransport } = await import('@modelcontextprotocol/client/stdio');
      await c.connect(new StdioClientTransport({ command: t.command, args: t.args, env: t.env }));
    }
    return {
      protocol: c.getNegotiatedProtocolVersion?.() ?? '',
      list: async () => (await c.listTools()).tools,
      call: async (name, args) => c.callTool({ name, arguments: args }),
      read: async (uri) => resourceText((await c.readResource({ uri })).contents),
      prompt: async (name, args) => promptText(await c.getPrompt({ name, arguments: args })),
      close: () => c.close(),
    };
  },
  async 'ai-sdk'(t) {
    const { createMCPClient } = await import('@ai-sdk/mcp');
    let transport;
    if (t.http) {
      transport = { type: 'http', url: t.url, headers: t.headers };
    } else {
      const { Experimental_StdioMCPTransport } = await import('@ai-sdk/mcp/mcp-stdio');
      transport = new Experimental_StdioMCPTransport({ command: t.command, args: t.args, env: t.env });
    }
    const c = await createMCPClient({ transport });
    // As an AI SDK user calls a tool: through the tool set handed to the model.
    const tools = await c.tools();
    return {
      protocol: c.initializeResult?.protocolVersion ?? '',
      list: async () => (await c.listTools()).tools,
      call: async (name, args) => tools[name].execute(args, { toolCallId: `call-${name}`, messages: [] }),
      read: async (uri) => resourceText((await c.readResource({ uri })).contents),
      prompt: async (name, args) => promptText(await c.getPrompt({ name, arguments: args })),
      close: () => c.close(),
    };
  },
  async openai(t) {
    const { MCPServerStreamableHttp, MCPServerStdio } = await import('@openai/agents');
    const s = t.http
      ? new MCPServerStreamableHttp({ url: t.url, name: 'airlock', requestInit: { headers: t.headers } })
      : new MCPServerStdio({ command: t.command, args: t.args, env: t.env, name: 'airlock' });
    await s.connect();
    return {
      protocol: '',
      list: async () => s.listTools(),
      call: async (name, args) => ({ content: await s.callTool(name, args) }),
      read: async (uri) => resourceText((await s.readResource(uri)).contents),
      prompt: null, // the library has no prompts
      close: () => s.close(),
    };
  },
  async langchain(t) {
    const { MultiServerMCPClient } = await import('@langchain/mcp-adapters');
    const conn = t.http
      ? { transport: 'http', url: t.url, headers: t.headers }
      : { transport: 'stdio', command: t.command, args: t.args, env: t.env };
    const c = new MultiServerMCPClient({ mcpServers: { airlock: conn } });
    const tools = await c.getTools();
    return {
      protocol: '',
      list: async () => tools.map((tool) => ({ name: tool.name.replace(/^mcp__airlock__/, ''), annotations: tool.metadata?.annotations })),
      call: async (name, args) => {
        const tool = tools.find((x) => x.name === name || x.name.endsWith(`__${name}`));
        // One content block, carrying the structured content with it.
        const out = await tool.invoke(args);
        if (out && !Array.isArray(out) && typeof out === 'object') {
          return { content: [out], structuredContent: out.structuredContent };
        }
        return { content: out };
      },
      read: async (uri) => resourceText(await c.readResource('airlock', uri)),
      // Its documented way to prompts: the server's own client.
      prompt: async (name, args) => promptText(await (await c.getClient('airlock')).getPrompt({ name, arguments: args })),
      close: () => c.close(),
    };
  },
};

const report = { tools: [], calls: [], plan: null, resource: null, prompt: null };
try {
  const a = await adapters[client](target);
  report.protocol = a.protocol;
  for (const tool of await a.list()) {
    report.tools.push({ name: tool.name, annotations: tool.annotations ?? null });
  }
  const note = { record_id: target.record, text: `checked by ${client}` };
  for (let i = 0; i < 2; i++) {
    const res = await a.call('add_note', note);
    report.calls.push({ structured: res?.structuredContent ?? null, text: text(res?.content ?? res) });
  }
  const plan = await a.call('plan_approve_withdrawal', { record_id: target.record });
  report.plan = { structured: plan?.structuredContent ?? null, text: text(plan?.content ?? plan) };
  report.resource = await a.read('notes://all');
  if (a.prompt) report.prompt = await a.prompt('summarize_notes', { record_id: target.record });
  await a.close();
} catch (err) {
  report.error = String(err?.stack ?? err);
}
console.log(JSON.stringify(report));
process.exit(0);
