// Hosted MCP tools and stored-run resume through the official OpenAI Node SDK (7.x): every MCP run
// goes through `responses.stream()`, whose accumulator throws on any event it does not know or any
// ordering/identity violation, and `finalResponse()` must resolve with the items in order.
// Env: RELAY_URL_CHAT, RELAY_URL_RESPONSES (relays), RELAY_MCP_RUST_URL (the rmcp test server),
// RELAY_MCP_PY_URL (the official Python MCP SDK server); all set by ../run.sh.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import OpenAI from 'openai';

const MODEL = 'fake-model';
const KINDS = ['chat', 'responses'];
const TERMINAL = new Set(['response.completed', 'response.incomplete', 'response.failed']);
const MCP_CALL_KEYS = ['type', 'id', 'server_label', 'name', 'arguments', 'output', 'error', 'status', 'approval_request_id'];

const RUST = process.env.RELAY_MCP_RUST_URL;
const PY = process.env.RELAY_MCP_PY_URL;

async function runStream(client, params) {
  const stream = client.responses.stream(params);
  const events = [];
  for await (const ev of stream) events.push(ev);
  const final = await stream.finalResponse();
  return { events, final };
}

async function collect(iterable) {
  const out = [];
  for await (const ev of iterable) out.push(ev);
  return out;
}

function checkSequence(events) {
  assert.ok(events.length > 0, 'no events');
  assert.equal(events[0].type, 'response.created');
  events.forEach((ev, i) => assert.equal(ev.sequence_number, i, `sequence_number of event #${i} (${ev.type})`));
  assert.equal(events.filter((e) => TERMINAL.has(e.type)).length, 1, 'exactly one terminal event');
  assert.ok(TERMINAL.has(events.at(-1).type), `last event is ${events.at(-1).type}`);
}

function mcpTool(label, url, extra = {}) {
  return { type: 'mcp', server_label: label, server_url: url, require_approval: 'never', ...extra };
}

const kinds = (resp) => resp.output.map((o) => o.type);
const itemsOf = (resp, type) => resp.output.filter((o) => o.type === type);
const types = (events) => events.map((e) => e.type);

// The types of one item's events, from its output_item.added to its output_item.done.
function itemEvents(events, id) {
  return events.filter((e) => e.item_id === id || e.item?.id === id).map((e) => e.type);
}

function messageText(resp) {
  return resp.output
    .filter((o) => o.type === 'message')
    .flatMap((m) => m.content)
    .filter((p) => p.type === 'output_text')
    .map((p) => p.text)
    .join('');
}

function checkMcpCall(item) {
  for (const k of MCP_CALL_KEYS) assert.ok(k in item, `mcp_call lacks '${k}': ${JSON.stringify(item)}`);
  assert.match(item.id, /^mcp_/);
  assert.equal(typeof item.arguments, 'string');
  assert.equal(item.approval_request_id, null);
}

// A loopback port nothing listens on.
async function closedPort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

for (const kind of KINDS) {
  const base = process.env[`RELAY_URL_${kind.toUpperCase()}`];
  const skip = !base
    ? `RELAY_URL_${kind.toUpperCase()} is not set`
    : !RUST || !PY
      ? 'RELAY_MCP_RUST_URL / RELAY_MCP_PY_URL are not set'
      : false;
  describe(`upstream=${kind}: MCP and resume`, { skip }, () => {
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'test-key', maxRetries: 0, timeout: 60_000 });

    test('responses.stream(): MCP add on the rmcp server', async () => {
      const { events, final } = await runStream(client, {
        model: MODEL,
        input: 'CALL add {"a":2,"b":3}',
        tools: [mcpTool('rust', RUST)],
      });
      checkSequence(events);
      assert.equal(final.status, 'completed');
      assert.deepEqual(kinds(final), ['mcp_list_tools', 'mcp_call', 'message']);
      const [listed, call] = final.output;
      assert.equal(listed.server_label, 'rust');
      assert.ok(listed.tools.some((t) => t.name === 'add'));
      checkMcpCall(call);
      assert.equal(call.status, 'completed');
      assert.equal(call.error, null);
      assert.deepEqual(JSON.parse(call.arguments), { a: 2, b: 3 });
      assert.match(call.output, /5/);
      assert.deepEqual(itemEvents(events, listed.id), [
        'response.output_item.added',
        'response.mcp_list_tools.in_progress',
        'response.mcp_list_tools.completed',
        'response.output_item.done',
      ]);
      const seq = itemEvents(events, call.id);
      assert.deepEqual(seq.slice(0, 2), ['response.output_item.added', 'response.mcp_call.in_progress']);
      assert.deepEqual(seq.slice(-3), [
        'response.mcp_call_arguments.done',
        'response.mcp_call.completed',
        'response.output_item.done',
      ]);
      assert.ok(seq.includes('response.mcp_call_arguments.delta'));
      assert.match(final.output_text, /^Tool results: .*5/);
    });

    for (const [tool, errorType] of [
      ['fail', 'mcp_tool_execution_error'],
      ['boom', 'mcp_protocol_error'],
    ]) {
      test(`responses.stream(): failing tool '${tool}' is a failed mcp_call, the run completes`, async () => {
        const { events, final } = await runStream(client, {
          model: MODEL,
          input: `CALL ${tool} {}`,
          tools: [mcpTool('rust', RUST)],
        });
        checkSequence(events);
        assert.equal(final.status, 'completed');
        assert.deepEqual(kinds(final), ['mcp_list_tools', 'mcp_call', 'message']);
        const call = final.output[1];
        checkMcpCall(call);
        assert.equal(call.status, 'failed');
        assert.equal(call.error?.type, errorType, JSON.stringify(call.error));
        if (tool === 'boom') assert.equal(call.error.code, -32042);
        const seq = itemEvents(events, call.id);
        assert.ok(seq.includes('response.mcp_call.failed'), seq.join(' '));
        assert.ok(!seq.includes('response.mcp_call.completed'), seq.join(' '));
      });
    }

    test("responses.stream(): the Python SDK server's explode fails as mcp_tool_execution_error", async () => {
      const { events, final } = await runStream(client, {
        model: MODEL,
        input: 'CALL explode {}',
        tools: [mcpTool('py', PY)],
      });
      checkSequence(events);
      assert.equal(final.status, 'completed');
      const call = itemsOf(final, 'mcp_call')[0];
      checkMcpCall(call);
      assert.equal(call.status, 'failed');
      assert.equal(call.error?.type, 'mcp_tool_execution_error');
      assert.match(JSON.stringify(call.error.content), /exploded on purpose/);
      assert.ok(types(events).includes('response.mcp_call.failed'));
    });

    test('responses.stream(): two servers (rmcp + Python SDK), two calls in one turn', async () => {
      const { events, final } = await runStream(client, {
        model: MODEL,
        input: 'CALL shout {"text":"hi"}\nCALL add {"a":2,"b":3}',
        tools: [mcpTool('rust', RUST), mcpTool('py', PY)],
      });
      checkSequence(events);
      assert.equal(final.status, 'completed');
      assert.deepEqual(kinds(final), ['mcp_list_tools', 'mcp_list_tools', 'mcp_call', 'mcp_call', 'message']);
      assert.deepEqual(itemsOf(final, 'mcp_list_tools').map((l) => l.server_label).sort(), ['py', 'rust']);
      const [shout, add] = itemsOf(final, 'mcp_call');
      checkMcpCall(shout);
      checkMcpCall(add);
      assert.equal(shout.server_label, 'py');
      assert.equal(shout.output, 'HI');
      assert.equal(add.server_label, 'rust');
      assert.match(add.output, /5/);
      assert.equal(types(events).filter((t) => t === 'response.mcp_call.completed').length, 2);
    });

    test('responses.stream(): an unreachable MCP server gives a failed mcp_list_tools, the run completes', async () => {
      const url = `http://127.0.0.1:${await closedPort()}/mcp`;
      const { events, final } = await runStream(client, {
        model: MODEL,
        input: 'hello anyway',
        tools: [mcpTool('gone', url)],
      });
      checkSequence(events);
      assert.equal(final.status, 'completed');
      assert.deepEqual(kinds(final), ['mcp_list_tools', 'message']);
      const listed = final.output[0];
      assert.deepEqual(listed.tools, []);
      assert.ok(typeof listed.error === 'string' && listed.error.length > 0, JSON.stringify(listed));
      assert.deepEqual(itemEvents(events, listed.id), [
        'response.output_item.added',
        'response.mcp_list_tools.in_progress',
        'response.mcp_list_tools.failed',
        'response.output_item.done',
      ]);
      assert.equal(final.output_text, 'Hello! You said: hello anyway');
    });

    test('responses.stream(): default require_approval gives an mcp_approval_request and no call', async () => {
      const { events, final } = await runStream(client, {
        model: MODEL,
        input: 'CALL add {"a":2,"b":3}',
        tools: [{ type: 'mcp', server_label: 'rust', server_url: RUST }],
      });
      checkSequence(events);
      assert.equal(final.status, 'completed');
      assert.deepEqual(kinds(final), ['mcp_list_tools', 'mcp_approval_request']);
      const req = final.output[1];
      assert.match(req.id, /^mcpr_/);
      assert.equal(req.name, 'add');
      assert.equal(req.server_label, 'rust');
      assert.deepEqual(JSON.parse(req.arguments), { a: 2, b: 3 });
      assert.ok(!types(events).some((t) => t.startsWith('response.mcp_call')));
    });

    test('responses.stream(): previous_response_id with the same MCP tools does not re-list', async () => {
      const tools = [mcpTool('rust', RUST)];
      const first = await runStream(client, { model: MODEL, input: 'CALL add {"a":2,"b":3}', tools });
      assert.deepEqual(kinds(first.final), ['mcp_list_tools', 'mcp_call', 'message']);
      const { events, final } = await runStream(client, {
        model: MODEL,
        input: 'CALL add {"a":40,"b":2}',
        tools,
        previous_response_id: first.final.id,
      });
      checkSequence(events);
      assert.deepEqual(kinds(final), ['mcp_call', 'message']);
      assert.match(final.output[0].output, /42/);
    });

    // ------------------------------------------------------------------------------------------
    // resume

    test('responses.retrieve(id, {stream: true, starting_after}) returns exactly the events after N', async () => {
      const created = await collect(
        await client.responses.create({
          model: MODEL,
          input: 'CALL add {"a":2,"b":3}',
          tools: [mcpTool('rust', RUST)],
          stream: true,
        }),
      );
      checkSequence(created);
      const id = created[0].response.id;
      for (const n of [0, 5, created.length - 2]) {
        const resumed = await collect(await client.responses.retrieve(id, { stream: true, starting_after: n }));
        assert.deepEqual(resumed, created.slice(n + 1), `starting_after=${n}`);
      }
      const all = await collect(await client.responses.retrieve(id, { stream: true }));
      assert.deepEqual(all, created);
    });

    test('responses.stream({response_id, starting_after}) replays and filters; finalResponse() resolves', async () => {
      const { events: created, final: original } = await runStream(client, {
        model: MODEL,
        input: 'CALL shout {"text":"hi"}\nCALL add {"a":2,"b":3}',
        tools: [mcpTool('rust', RUST), mcpTool('py', PY)],
      });
      const n = 7;
      const { events, final } = await runStream(client, { response_id: original.id, starting_after: n });
      assert.deepEqual(
        events.map((e) => e.sequence_number),
        created.slice(n + 1).map((e) => e.sequence_number),
      );
      assert.deepEqual(types(events), types(created.slice(n + 1)));
      assert.equal(final.id, original.id);
      assert.deepEqual(kinds(final), kinds(original));
      assert.equal(final.output_text, original.output_text);
    });

    test('background stream: leave early, resume with retrieve(starting_after): no gap, no duplicate', async () => {
      const stream = await client.responses.create({
        model: `${MODEL}?deltas=60&delay_ms=10`,
        input: 'long background run',
        background: true,
        stream: true,
      });
      const head = [];
      for await (const ev of stream) {
        head.push(ev);
        if (head.length >= 6 && ev.type === 'response.output_text.delta') break;
      }
      const id = head[0].response.id;
      const last = head.at(-1).sequence_number;
      const mid = await client.responses.retrieve(id);
      assert.ok(['queued', 'in_progress'].includes(mid.status), `the run is ${mid.status} right after the client left`);
      const tail = await collect(await client.responses.retrieve(id, { stream: true, starting_after: last }));
      const joined = [...head, ...tail];
      checkSequence(joined);
      assert.equal(joined.at(-1).type, 'response.completed');
      const all = await collect(await client.responses.retrieve(id, { stream: true }));
      assert.deepEqual(joined, all);
      assert.equal(joined.filter((e) => e.type === 'response.output_text.delta').length, 60);
    });
  });
}
