// The MCP approval flow (issue 5) through the official OpenAI Node SDK (7.x), raw: the request item,
// then the answer with previous_response_id — streamed through responses.stream() (whose
// accumulator rejects any unknown event or ordering mistake) and not streamed.
// Env: RELAY_URL_CHAT, RELAY_URL_RESPONSES, RELAY_MCP_RUST_URL; all set by ../run.sh.

import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const MODEL = 'fake-model';
const RUST = process.env.RELAY_MCP_RUST_URL;
const tool = () => ({ type: 'mcp', server_label: 'rust', server_url: RUST });
const answer = (id, approve, reason) => ({ type: 'mcp_approval_response', approval_request_id: id, approve, ...(reason ? { reason } : {}) });
const kinds = (r) => r.output.map((o) => o.type);

for (const kind of ['chat', 'responses']) {
  const base = process.env[`RELAY_URL_${kind.toUpperCase()}`];
  const skip = !base ? `RELAY_URL_${kind.toUpperCase()} is not set` : !RUST ? 'RELAY_MCP_RUST_URL is not set' : false;
  describe(`upstream=${kind}: MCP approvals`, { skip }, () => {
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'test-key', maxRetries: 0, timeout: 60_000 });

    async function ask() {
      const stream = client.responses.stream({ model: MODEL, input: 'CALL add {"a":2,"b":3}', tools: [tool()] });
      for await (const _ of stream);
      const first = await stream.finalResponse();
      assert.deepEqual(kinds(first), ['mcp_list_tools', 'mcp_approval_request']);
      assert.equal(first.status, 'completed');
      return first;
    }

    test('responses.stream(): an approved call runs first and carries approval_request_id', async () => {
      const first = await ask();
      const req = first.output[1];
      const stream = client.responses.stream({ model: MODEL, previous_response_id: first.id, tools: [tool()], input: [answer(req.id, true)] });
      const events = [];
      for await (const ev of stream) events.push(ev.type);
      const final = await stream.finalResponse();
      assert.deepEqual(kinds(final), ['mcp_call', 'message']);
      assert.equal(final.output[0].approval_request_id, req.id);
      assert.match(final.output[0].output, /5/);
      assert.ok(events.includes('response.mcp_call.completed'));
    });

    test('responses.create(): a refused call runs nothing and the model is told', async () => {
      const first = await ask();
      const req = first.output[1];
      const second = await client.responses.create({ model: MODEL, previous_response_id: first.id, tools: [tool()], input: [answer(req.id, false, 'not now')] });
      assert.deepEqual(kinds(second), ['message']);
      assert.match(second.output_text, /refused.*not now/);
    });
  });
}
